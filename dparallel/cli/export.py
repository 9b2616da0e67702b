"""``dparallel export MODEL_DIR``: write the deployable model next to the trained one."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from dparallel.train.export import export_model

if TYPE_CHECKING:
    import argparse


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``export`` sub-command."""
    p = subparsers.add_parser(
        "export",
        help="write the deployable model (deployed.pt) for dparallel.ase.Calculator",
        description="Write MODEL_DIR/deployed.pt (descriptor spec + weights; energy, forces "
        "and stress from positions) and MODEL_DIR/export.json.",
    )
    p.add_argument("model_dir", help="directory written by `dparallel train`")
    p.add_argument("--float32", action="store_true", help="export in float32")
    p.add_argument("--no-probe", action="store_true", help="skip the torch.export probe")
    p.add_argument(
        "--format",
        choices=("dparallel", "n2p2"),
        default="dparallel",
        help="n2p2: input.nn, scaling.data, weights.XXX.data for n2p2 and LAMMPS pair_style "
        "hdnnp (refused, with the reason, for models n2p2 cannot express)",
    )
    p.add_argument("-o", "--output", help="n2p2 output directory (default: MODEL_DIR/n2p2)")
    p.add_argument(
        "--units",
        default="ase",
        help="units of the n2p2 files: ase (Å, eV; default) or bohr-hartree",
    )
    return p


def run(args: argparse.Namespace) -> int:
    """Export and print the report."""
    import torch

    if args.format == "n2p2":
        from dparallel.n2p2.potential import export_model_dir

        print(json.dumps(export_model_dir(args.model_dir, args.output, args.units), indent=1))
        return 0

    report = export_model(
        args.model_dir,
        dtype=torch.float32 if args.float32 else torch.float64,
        try_export=not args.no_probe,
    )
    print(json.dumps(report, indent=1))
    return 0
