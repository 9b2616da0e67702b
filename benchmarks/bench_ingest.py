"""Peak memory and speed of ``dparallel ingest`` vs ``ase.io.read(path, ':')`` on extxyz.

Generates extxyz files of the given sizes (mixed 8–128-atom structures, half periodic,
with energies and forces), then runs each tool in its own subprocess and reads that
process's peak RSS from ``getrusage``. Peak RSS of the ingest must not grow with file size.

    python benchmarks/bench_ingest.py                      # 50 MB and 200 MB
    python benchmarks/bench_ingest.py --size-mb 200 1000   # 1 GB
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# runs CMD..., prints its peak RSS (KiB on Linux) as the last line
_MEASURE = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:])\n"
    "print(json.dumps({'rc': r.returncode, "
    "'maxrss_kib': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))"
)
_ASE_PEER = (
    "import sys, ase.io\n"
    "frames = ase.io.read(sys.argv[1], ':')\n"
    "print(len(frames), file=sys.stderr)"
)


def make_extxyz(path: Path, size_mb: float, seed: int = 0) -> None:
    """Write ~``size_mb`` MB of extxyz by repeating 500 random structures written by ASE."""
    import ase.io

    sys.path.insert(0, str(ROOT))
    from dparallel.io.synthetic import random_structures

    rng = np.random.default_rng(seed)
    buf = io.StringIO()
    ase.io.write(buf, random_structures(500, rng, min_atoms=8, max_atoms=128), format="extxyz")
    block = buf.getvalue().encode()
    target = int(size_mb * 1e6)
    with open(path, "wb") as f:
        written = 0
        while written < target:
            f.write(block)
            written += len(block)


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``cmd`` run in a fresh process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    t0 = time.perf_counter()
    res = subprocess.run(
        [sys.executable, "-c", "import json\n" + _MEASURE, *cmd],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    wall = time.perf_counter() - t0
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if out["rc"] != 0:
        raise RuntimeError(f"{cmd} failed:\n{res.stderr}")
    return wall, out["maxrss_kib"] / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, nargs="+", default=[50.0, 200.0])
    parser.add_argument("--partition-atoms", type=int, default=20_000)
    parser.add_argument("--no-peer", action="store_true", help="skip the ASE peer")
    parser.add_argument("--workdir", default=None, help="where to put files (default: tmp)")
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for size in args.size_mb:
            path = Path(tmp) / f"bench_{int(size)}mb.xyz"
            make_extxyz(path, size)
            store = Path(tmp) / f"bench_{int(size)}mb.zarr"
            cmd = [
                sys.executable,
                "-m",
                "dparallel",
                "ingest",
                str(path),
                "-o",
                str(store),
                "-q",
                "--partition-atoms",
                str(args.partition_atoms),
            ]
            wall, rss = measure(cmd)
            info = subprocess.run(
                [sys.executable, "-m", "dparallel", "info", str(store), "--json"],
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                capture_output=True,
                text=True,
                check=True,
            )
            n = json.loads(info.stdout)["n_structures"]
            peer = (float("nan"), float("nan"))
            if not args.no_peer:
                peer = measure([sys.executable, "-c", _ASE_PEER, str(path)])
            rows.append((path.stat().st_size / 1e6, n, wall, rss, *peer))
            for p in path.parent.glob(path.name + "*"):
                p.unlink() if p.is_file() else None

    hdr = (
        f"{'file MB':>8} {'structures':>10} | {'ingest s':>8} {'struct/s':>9} "
        f"{'peak RSS MiB':>12} | {'ase.read s':>10} {'ase RSS MiB':>11} | "
        f"{'time ratio':>10} {'RSS ratio':>9}"
    )
    print(hdr)
    print("-" * len(hdr))
    for mb, n, wall, rss, pwall, prss in rows:
        print(
            f"{mb:8.1f} {n:10d} | {wall:8.1f} {n / wall:9.0f} {rss:12.0f} | "
            f"{pwall:10.1f} {prss:11.0f} | {wall / pwall:10.2f} {rss / prss:9.2f}"
        )
    print("ratios: dparallel ingest / ase.io.read(path, ':') (RSS < 1 = less memory)")


if __name__ == "__main__":
    main()
