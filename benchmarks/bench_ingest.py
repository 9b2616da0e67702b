"""Peak memory and speed of ``dparallel ingest`` vs ``ase.io.read(path, ':')`` on extxyz.

Generates extxyz files of the given sizes (mixed 8–128-atom structures, half periodic,
with energies and forces), then runs each tool in its own subprocess and reads that
process's peak RSS from ``getrusage``. Peak RSS of the ingest must not grow with file size.

    python benchmarks/bench_ingest.py                      # 50 MB and 200 MB
    python benchmarks/bench_ingest.py --size-mb 200 1000   # 1 GB

``--structures N …`` measures scaling in the number of structures instead: N periodic
structures of 1–8 atoms each (10⁶: 368 MB), and for each file the time and peak RSS of
building its index, ``dparallel ingest`` and ``dparallel info --verify``, with the
exponent of each against the previous N (1.0: linear):

    python benchmarks/bench_ingest.py --structures 10000 100000 1000000

``--compress gz`` (or ``bz2``, ``xz``) runs them on the file compressed so (by the
command-line tool, fastest level), the text's MB still in the table.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

# runs CMD..., prints its peak RSS (KiB on Linux) and CPU seconds as the last line
_MEASURE = (
    "import resource, subprocess, sys\n"
    "r = subprocess.run(sys.argv[1:])\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'rc': r.returncode, 'maxrss_kib': u.ru_maxrss, "
    "'cpu_s': u.ru_utime + u.ru_stime}))"
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


def make_small_structures(path: Path, n: int, seed: int = 0) -> None:
    """Write ``n`` periodic extxyz structures of 1–8 H/Cu atoms (8 Å cubes, energies and
    forces); atom lines formatted by numpy, not ASE, so 10⁶ take ~30 s."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 9, n)
    total = int(counts.sum())
    text = io.StringIO()
    np.savetxt(
        text,
        np.column_stack([rng.uniform(0, 8, (total, 3)), rng.normal(0, 0.1, (total, 3))]),
        fmt="%.6f",
    )
    rows = text.getvalue().splitlines()
    species = np.where(rng.random(total) < 0.5, "Cu", "H")
    energy = rng.normal(-3, 1, n)
    comment = (
        'Lattice="8 0 0 0 8 0 0 0 8" Properties=species:S:1:pos:R:3:forces:R:3 '
        'energy={:.6f} pbc="T T T"'
    )
    out, at = [], 0
    for i, c in enumerate(counts.tolist()):
        out += [str(c), comment.format(energy[i])]
        out += [f"{species[at + k]} {rows[at + k]}" for k in range(c)]
        at += c
    path.write_text("\n".join(out) + "\n")


def measure(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of ``cmd`` run in a fresh process."""
    wall, rss, _ = measure_cpu(cmd)
    return wall, rss


def measure_cpu(cmd: list[str]) -> tuple[float, float, float]:
    """(wall seconds, peak RSS MiB, CPU seconds) of ``cmd`` run in a fresh process."""
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
    return wall, out["maxrss_kib"] / 1024, out["cpu_s"]


def _dparallel(*args: str) -> list[str]:
    return [sys.executable, "-m", "dparallel", *args]


def _ingest(path: Path, store: Path, partition_atoms: int) -> list[str]:
    """The ``dparallel ingest`` command line both tables time."""
    return _dparallel(
        "ingest", str(path), "-o", str(store), "-q", "--partition-atoms", str(partition_atoms)
    )


_INDEX = "import sys\nfrom dparallel.io import open_source\nopen_source(sys.argv[1])"


def _compress(path: Path, kind: str) -> Path:
    """``path`` compressed beside it by ``gzip``/``bzip2``/``xz -1`` (``path`` removed)."""
    tool, suffix = {"gz": ("gzip", ".gz"), "bz2": ("bzip2", ".bz2"), "xz": ("xz", ".xz")}[kind]
    subprocess.run([tool, "-1", str(path)], check=True)
    return path.with_name(path.name + suffix)


def scaling(
    sizes: list[int], partition_atoms: int, workdir: str | None, compress: str | None = None
) -> None:
    """The table of ``--structures``: index, ingest and verify against N (see the top)."""
    steps = ("index", "ingest", "verify")
    rows: list[tuple[int, float, dict[str, tuple[float, float, float]]]] = []
    with tempfile.TemporaryDirectory(dir=workdir) as tmp:
        for n in sizes:
            path, store = Path(tmp) / f"small_{n}.xyz", Path(tmp) / f"small_{n}.zarr"
            make_small_structures(path, n)
            text_mb = path.stat().st_size / 1e6
            if compress:
                path = _compress(path, compress)
            got = {
                "index": measure_cpu([sys.executable, "-c", _INDEX, str(path)]),
                "ingest": measure_cpu(_ingest(path, store, partition_atoms)),
                "verify": measure_cpu(_dparallel("info", "--verify", str(store))),
            }
            rows.append((n, text_mb, got))
            for p in Path(tmp).iterdir():
                p.unlink() if p.is_file() else shutil.rmtree(p)
    # a process's start (its imports), taken off below
    start = measure_cpu([sys.executable, "-c", "import dparallel.workflow.ingest"])[2]
    head = f"{'structures':>10} {'file MB':>8}" + "".join(
        f" | {step + ' s':>9} {'CPU s':>6} {'RSS MiB':>8} {'exp':>5}" for step in steps
    )
    print(head)
    print("-" * len(head))
    for k, (n, mb, got) in enumerate(rows):
        line = f"{n:10d} {mb:8.1f}"
        for step in steps:
            wall, rss, cpu = got[step]
            exp = ""
            before, n_before = rows[k - 1][2][step][2], rows[k - 1][0]
            if k and min(cpu, before) - start > 0.25:  # else mostly the start: no exponent
                exp = f"{np.log((cpu - start) / (before - start)) / np.log(n / n_before):5.2f}"
            line += f" | {wall:9.2f} {cpu:6.2f} {rss:8.0f} {exp:>5}"
        print(line)
    print("exp: log(CPU ratio) / log(N ratio) against the row above (1 = linear), CPU less")
    print(f"{start:.2f} s, a process's start (import dparallel.workflow.ingest)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size-mb", type=float, nargs="+", default=[50.0, 200.0])
    parser.add_argument("--partition-atoms", type=int, default=20_000)
    parser.add_argument("--no-peer", action="store_true", help="skip the ASE peer")
    parser.add_argument("--workdir", default=None, help="where to put files (default: tmp)")
    parser.add_argument(
        "--structures", type=int, nargs="+", help="scaling in N small structures instead"
    )
    parser.add_argument(
        "--compress", choices=("gz", "bz2", "xz"), help="with --structures: compress the file"
    )
    args = parser.parse_args()
    if args.structures:
        scaling(args.structures, args.partition_atoms, args.workdir, args.compress)
        return

    rows = []
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        for size in args.size_mb:
            path = Path(tmp) / f"bench_{int(size)}mb.xyz"
            make_extxyz(path, size)
            store = Path(tmp) / f"bench_{int(size)}mb.zarr"
            wall, rss = measure(_ingest(path, store, args.partition_atoms))
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
