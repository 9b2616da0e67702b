"""Peak memory and CPU time of one prediction on a large fcc Cu cell, per route.

One ``DeployedModel.predict(..., stress=True)`` with a fresh Verlet list (skin 0.5 Å) on
fcc Cu repeated ``--repeat`` times per axis (4 n³ atoms), rattled 0.02 Å; the quickstart
ACSF (12 functions, rc 5 Å) and a random (48, 48) tanh network. Printed: peak RSS above
the RSS before the call (VmHWM reset just before, Linux), per atom, and CPU time
(``time.process_time``; wall time is unreliable on a shared machine). docs/deploy.md
("Large cells") has the figures.

    PYTHONPATH=. python benchmarks/bench_large_cell.py --repeat 14 --backend torch \
        [--block-bytes N]

Run each route in a fresh process: the peak is the process's.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def status(key: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key + ":"))


def main() -> None:
    from ase.build import bulk

    from dparallel.deploy import DeployedModel
    from dparallel.deploy.verlet import VerletList
    from dparallel.train import HDNNP
    from dparallel.types import StructureBatch
    from dparallel.workflow.spec import load_quickstart

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=14, help="cells per axis (4 n³ atoms)")
    parser.add_argument("--backend", default="auto", help="auto (compiled), numba or torch")
    parser.add_argument("--block-bytes", type=int, default=None, help="DeployedModel.block_bytes")
    args = parser.parse_args()
    torch.set_num_threads(1)
    acsf = load_quickstart().descriptors.build().acsf
    torch.manual_seed(0)
    net = HDNNP(["Cu"], {"Cu": acsf.n_features("Cu")}, hidden=(48, 48)).double()
    model = DeployedModel(acsf, net, torch.float64)
    if args.block_bytes is not None:
        model.block_bytes = args.block_bytes
    cu = bulk("Cu", "fcc", a=3.61, cubic=True)
    model.predict(cu.repeat((2, 2, 2)), stress=True, backend=args.backend)  # first calls
    atoms = cu.repeat((args.repeat,) * 3)
    atoms.rattle(0.02, seed=1)
    batch = StructureBatch.from_ase([atoms])
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM starts again from the RSS of now
    start, t0 = status("VmRSS"), time.process_time()
    nb = VerletList(model.cutoff, skin=0.5).neighbors(batch)
    out = model.predict(batch, neighbors=nb, stress=True, backend=args.backend)
    cpu, peak = time.process_time() - t0, status("VmHWM") - start
    report = {
        "atoms": len(atoms), "backend": args.backend, "block_bytes": model.block_bytes,
        "peak_MB": round(peak / 1e6), "kB_per_atom": round(peak / len(atoms) / 1e3, 1),
        "cpu_s": round(cpu, 2), "energy": float(out["energy"][0]),
    }  # fmt: skip
    print(json.dumps(report))


if __name__ == "__main__":
    main()
