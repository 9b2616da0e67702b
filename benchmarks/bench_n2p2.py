"""dparallel against n2p2 itself on n2p2's own workload: one table from one run.

Datasets (both written as n2p2 ``input.data``, read by both programs):

* **water ×25**: the 20 structures of n2p2's RPBE-D3 water example
  (``../shared/n2p2/water``) concatenated 25 times (500 structures, 51,600 atoms), its
  ``input.nn`` (types 2 and 3, tanhu cutoff, rc = 12 bohr), units as in the file;
* **CuAu (EMT)**: rattled, strained fcc Cu/Au alloy cells labelled with ASE's EMT, and an
  input.nn of our own with types 2, 3 and 9 (poly2 cutoff, rc = 6 Å).

Runs, each timed as a user runs it (wall time of the whole command, peak RSS of every
process it starts, sampled with psutil):

* n2p2: ``nnp-scaling 1`` (``mpirun --allow-run-as-root -np 2 nnp-scaling 1`` for 2
  processes), input.nn without ``use_short_forces`` (values) and with it (values and
  dG/dr, which n2p2 keeps in RAM; its log's memory estimate is reported per atom);
* dparallel: ``dparallel featurize input.data --format n2p2 --descriptors d.yaml
  --local N --scaling-data s.data [--derivatives] -o store.zarr`` with
  ``d.yaml = {acsf: {n2p2: input.nn}}``; bytes per atom of the store it wrote.

Also: in-process ``ACSF.compute`` atoms/s (one thread, neighbour list included, values and
with dG/dr) beside n2p2's single-rank atoms/s (whole run: reading, neighbour lists,
symmetry functions, statistics); the fixed cost of a ~4,000-atom ``--local 2`` featurize
and its kernel time. Speed-up = n2p2 time / dparallel time (> 1: dparallel is faster).

Configurations are interleaved within each round; with ``--rounds R`` the best time of
each is printed. The shared benchmark machine is noisy: quote ratios, not absolute times.

    python benchmarks/bench_n2p2.py [--copies 25] [--metal-structures 200] [--rounds 1]
        [--workdir DIR] [--quick]

n2p2 comes from ``../shared/n2p2/build.sh`` (``$N2P2_HOME``, default
``~/.cache/n2p2-61daa0df``); without it the script says so and exits.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from water_example import WATER

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "n2p2"
N2P2_HOME = Path(os.environ.get("N2P2_HOME", Path.home() / ".cache" / "n2p2-61daa0df"))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

# n2p2 keywords nnp-scaling needs besides the symmetry functions (network unused here)
NNP_SETTINGS = """\
number_of_elements {n}
elements {elements}
cutoff_type {cutoff}
scale_symmetry_functions
scale_min_short 0.0
scale_max_short 1.0
center_symmetry_functions
global_hidden_layers_short 2
global_nodes_short 15 15
global_activation_short t t l
random_seed 12345
"""


# --------------------------------------------------------------------------- datasets
def n2p2_bin() -> Path | None:
    """n2p2's bin directory if nnp-scaling is built there."""
    exe = N2P2_HOME / "bin" / "nnp-scaling"
    return exe.parent if exe.is_file() else None


def n2p2_structure(atoms, energy: float, forces: np.ndarray) -> str:  # noqa: ANN001
    """One structure in n2p2 ``input.data`` format (ASE units: Å, eV)."""
    lines = ["begin", "comment EMT CuAu (ASE)"]
    lines += [f"lattice {v[0]:.10f} {v[1]:.10f} {v[2]:.10f}" for v in atoms.cell[:]]
    for p, s, f in zip(atoms.positions, atoms.get_chemical_symbols(), forces, strict=True):
        lines.append(
            f"atom {p[0]:.10f} {p[1]:.10f} {p[2]:.10f} {s} 0.0 0.0 {f[0]:.10f} {f[1]:.10f} "
            f"{f[2]:.10f}"
        )
    lines += [f"energy {energy:.10f}", "charge 0.0", "end"]
    return "\n".join(lines) + "\n"


def cuau_cells(
    n: int, seed: int, *, a: float, repeat: int, au: tuple[float, float], rattle: float
) -> list:
    """EMT-labelled, rattled and strained cubic fcc Cu/Au cells (Å, eV; labels kept in a
    ``SinglePointCalculator``): lattice constant ``a``, ``repeat``³ cubic cells, each atom
    Au with a chance drawn per structure from ``au``, positions rattled by ``rattle`` Å."""
    from ase.build import bulk
    from ase.calculators.emt import EMT
    from ase.calculators.singlepoint import SinglePointCalculator

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        atoms = bulk("Cu", "fcc", a=a, cubic=True) * (repeat, repeat, repeat)
        atoms.numbers[rng.random(len(atoms)) < rng.uniform(*au)] = 79
        strain = np.eye(3) + rng.uniform(-0.02, 0.02, (3, 3))
        atoms.set_cell(atoms.cell[:] @ (0.5 * (strain + strain.T)), scale_atoms=True)
        atoms.positions += rng.normal(scale=rattle, size=atoms.positions.shape)
        atoms.calc = EMT()
        e, f = atoms.get_potential_energy(), atoms.get_forces()
        atoms.calc = SinglePointCalculator(atoms, energy=e, forces=f)
        out.append(atoms)
    return out


def cuau_data(n_structures: int, seed: int = 0) -> str:
    """input.data of EMT-labelled, rattled and strained 3×3×3 fcc CuAu cells (108 atoms)."""
    cells = cuau_cells(n_structures, seed, a=3.75, repeat=3, au=(0.2, 0.6), rattle=0.08)
    return "".join(n2p2_structure(c, c.get_potential_energy(), c.get_forces()) for c in cells)


def cuau_input_nn() -> str:
    """Cu/Au symmetry functions: per centre 5 radial per element, 4 narrow + 4 wide per pair."""
    lines = [NNP_SETTINGS.format(n=2, elements="Cu Au", cutoff="6 0.0")]
    for ec in ("Cu", "Au"):
        for e1 in ("Cu", "Au"):
            for eta, rs in ((0.01, 0.0), (0.1, 0.0), (0.6, 2.5), (1.5, 3.2), (1.5, 4.4)):
                lines.append(f"symfunction_short {ec} 2 {e1} {eta} {rs} 6.0")
        for e1, e2 in (("Cu", "Cu"), ("Cu", "Au"), ("Au", "Au")):
            for t in (3, 9):
                for eta, lam, zeta in ((0.01, 1, 1), (0.01, -1, 1), (0.05, 1, 4), (0.05, -1, 4)):
                    lines.append(f"symfunction_short {ec} {t} {e1} {e2} {eta} {lam} {zeta} 6.0")
    return "\n".join(lines) + "\n"


def count_atoms(path: Path) -> tuple[int, int]:
    """(structures, atoms) of an input.data file."""
    n_s = n_a = 0
    with open(path) as f:
        for line in f:
            w = line.split(None, 1)
            if not w:
                continue
            if w[0] == "begin":
                n_s += 1
            elif w[0] == "atom":
                n_a += 1
    return n_s, n_a


@dataclass
class Dataset:
    """A benchmark dataset: its directory holds input.data and the input.nn variants."""

    name: str
    dir: Path
    n_structures: int
    n_atoms: int

    def input_nn(self, forces: bool) -> Path:
        return self.dir / ("input.forces.nn" if forces else "input.values.nn")


def stage_dataset(name: str, root: Path, data: str, input_nn: str) -> Dataset:
    """Directory with input.data and input.nn with/without ``use_short_forces``."""
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "input.data").write_text(data)
    plain = "\n".join(
        line for line in input_nn.splitlines() if line.split()[:1] != ["use_short_forces"]
    )
    (d / "input.values.nn").write_text(plain + "\n")
    (d / "input.forces.nn").write_text(plain + "\nuse_short_forces\n")
    (d / "d.yaml").write_text("acsf:\n  n2p2: input.values.nn\n")
    n_s, n_a = count_atoms(d / "input.data")
    return Dataset(name, d, n_s, n_a)


# ---------------------------------------------------------------------------- running
@dataclass
class Run:
    """One timed command: wall seconds, peak RSS per process, output, files it wrote."""

    wall: float
    peak_rss: dict[int, tuple[str, int]] = field(default_factory=dict)  # pid → (name, bytes)
    output: str = ""
    root_pid: int = 0

    def max_rss(self, name: str | None = None, exclude_root: bool = False) -> float:
        """Largest peak RSS (MiB) among processes (named ``name``; not the root)."""
        vals = [
            rss
            for pid, (n, rss) in self.peak_rss.items()
            if (name is None or n == name) and not (exclude_root and pid == self.root_pid)
        ]
        return max(vals, default=0) / 2**20


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> Run:
    """Run ``cmd`` to completion; wall time and per-process peak RSS (psutil, 20 Hz)."""
    import psutil

    log = cwd / "run.log"
    t0 = time.perf_counter()
    with open(log, "w") as out:
        proc = psutil.Popen(
            cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        run = Run(0.0, root_pid=proc.pid)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                try:
                    procs = [proc, *proc.children(recursive=True)]
                except psutil.Error:
                    procs = []
                for p in procs:
                    try:
                        rss = p.memory_info().rss
                        name = p.name()
                    except psutil.Error:
                        continue
                    old = run.peak_rss.get(p.pid, (name, 0))[1]
                    run.peak_rss[p.pid] = (name, max(old, rss))
                done.wait(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = proc.wait()
        done.set()
        sampler.join()
    run.wall = time.perf_counter() - t0
    run.output = log.read_text()
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {rc}):\n{run.output[-3000:]}")
    return run


def run_n2p2(ds: Dataset, procs: int, forces: bool, bindir: Path) -> Run:
    """nnp-scaling 1 on ``ds`` with 1 or 2 MPI processes in a fresh directory."""
    work = ds.dir / f"n2p2-{procs}-{'f' if forces else 'v'}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    os.symlink(ds.dir / "input.data", work / "input.data")
    shutil.copy(ds.input_nn(forces), work / "input.nn")
    exe = str(bindir / "nnp-scaling")
    cmd = [exe, "1"] if procs == 1 else ["mpirun", "--allow-run-as-root", "-np", "2", exe, "1"]
    run = timed(cmd, work, MPI_ENV)
    shutil.rmtree(work, ignore_errors=True)
    return run


def n2p2_ram_per_atom(run: Run, n_atoms: int) -> float:
    """n2p2's own estimate of its RAM for all structures (G and dG/dr), bytes per atom."""
    m = re.search(r"Memory for all structures\s*:\s*(\d+) bytes", run.output)
    return int(m.group(1)) / n_atoms if m else float("nan")


def compile_bytecode() -> Path:
    """Write the bytecode of the dparallel package the runs import (returns its folder), as
    an install has it: a checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (or without write
    access) has none or stale files, and each process a run starts (the command, the warm
    server) compiles the modules it imports again: ~0.3 s of CPU per CuAu ``--local 2``
    run, a third of it on the path to the first worker."""
    import compileall

    import dparallel

    folder = Path(dparallel.__file__).parent
    compileall.compile_dir(folder, quiet=1)
    return folder


def run_dparallel(ds: Dataset, procs: int, forces: bool, data: Path | None = None) -> Run:
    """``dparallel featurize`` as a user runs it; the run's store size is kept in Run.output."""
    store = ds.dir / "store.zarr"
    shutil.rmtree(store, ignore_errors=True)
    os.sync()  # no run pays for the previous run's writeback
    exe = str(Path(sys.executable).with_name("dparallel"))
    cmd = [exe, "featurize", str(data or ds.dir / "input.data"), "--format", "n2p2"]
    cmd += ["--descriptors", "d.yaml", "--local", str(procs), "--scaling-data", "s.data"]
    cmd += ["-o", str(store), "-q"] + (["--derivatives"] if forces else [])
    run = timed(cmd, ds.dir)
    size = sum(p.stat().st_size for p in store.rglob("*") if p.is_file())
    run.output += f"\nSTORE_BYTES {size}\nWRITE_SHARE {write_share(store)}\n"
    shutil.rmtree(store, ignore_errors=True)
    return run


def write_share(store: Path) -> float:
    """Σ write seconds / Σ compute seconds of the store's task reports (compute: neighbour
    list, checks and descriptors; write: structures, features, encoding and statistics)."""
    from dparallel.store import open_store

    opened = open_store(store)
    reports = [opened.report(p) or {} for p in opened.done_partitions()]
    compute = sum(r.get("seconds_compute", 0.0) for r in reports)
    return sum(r.get("seconds_write", 0.0) for r in reports) / compute if compute else float("nan")


def stored_share(run: Run) -> float:
    return float(re.search(r"WRITE_SHARE (\S+)", run.output).group(1))  # type: ignore[union-attr]


def store_bytes(run: Run) -> int:
    return int(re.search(r"STORE_BYTES (\d+)", run.output).group(1))  # type: ignore[union-attr]


def kernel_rate(ds: Dataset, derivatives: bool, max_atoms: int, rounds: int = 3) -> float:
    """In-process ACSF.compute atoms/s (1 thread, neighbour list included), best of rounds."""
    import torch

    from dparallel.io import open_source
    from dparallel.n2p2 import acsf_from_input_nn

    torch.set_num_threads(1)
    source = open_source(ds.dir / "input.data", "n2p2", cache_index=False)
    n = 0
    stop = 0
    while stop < len(source) and n < max_atoms:
        n += len(source.read(stop, stop + 1).numbers)
        stop += 1
    batch = source.read(0, stop)
    acsf = acsf_from_input_nn(str(ds.input_nn(False)))
    acsf.compute(batch, derivatives=derivatives)  # compile / warm up
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        acsf.compute(batch, derivatives=derivatives)
        best = min(best, time.perf_counter() - t)
    return batch.n_atoms / best


def kernel_table(sets: list[Dataset], bindir: Path, rounds: int) -> None:
    """In-process kernel atoms/s against n2p2 single-rank atoms/s (interleaved rounds)."""
    print(f"# python benchmarks/{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}")
    print(f"# n2p2: {bindir}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    print(f"{'dataset':28s} {'kernel':16s} {'n2p2 at/s':>10s} {'dp at/s':>10s} {'speed-up':>8s}")
    for ds in sets:
        label = f"{ds.name} ({ds.n_structures} str, {ds.n_atoms:,} at)"
        for f in (False, True):
            n2p2_wall = ours = 0.0
            for r in range(rounds):
                wall = run_n2p2(ds, 1, f, bindir).wall
                n2p2_wall = wall if r == 0 else min(n2p2_wall, wall)
                rate = kernel_rate(ds, f, max_atoms=3000 if ds.name == "water" else 2500)
                ours = max(ours, rate)
            n2p2_rate = ds.n_atoms / n2p2_wall
            what = "values + dG/dr" if f else "values"
            print(
                f"{label:28s} {what:16s} {n2p2_rate:10,.0f} {ours:10,.0f} {ours / n2p2_rate:7.2f}x"
            )
    print(
        "n2p2 = nnp-scaling 1, single rank, whole run (read, neighbour lists, symmetry "
        "functions, statistics); dparallel = in-process ACSF.compute, 1 thread, "
        "neighbour list included; best of rounds."
    )


# ----------------------------------------------------------------------------- report
def fmt(x: float, digits: int = 1) -> str:
    return "-" if x != x else f"{x:,.{digits}f}"  # NaN → "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=25, help="water example copies (25)")
    parser.add_argument("--metal-structures", type=int, default=200, help="CuAu cells (200)")
    parser.add_argument("--rounds", type=int, default=1, help="interleaved rounds, best kept")
    parser.add_argument("--workdir", help="keep files here (default: a temporary directory)")
    parser.add_argument("--quick", action="store_true", help="2 copies, 20 cells (smoke run)")
    parser.add_argument(
        "--kernel-only",
        action="store_true",
        help="only the in-process kernel rows (n2p2 single rank vs ACSF.compute)",
    )
    args = parser.parse_args()
    if args.quick:
        args.copies, args.metal_structures = 2, 20
    bindir = n2p2_bin()
    water = WATER
    if bindir is None or not water.is_dir():
        print(
            f"SKIPPED: n2p2 is not built in {N2P2_HOME} or its water example is missing "
            f"({water}); run ../shared/n2p2/build.sh (about 8 minutes) and try again."
        )
        return 0
    compiled = compile_bytecode()
    root = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="bench_n2p2_"))
    root.mkdir(parents=True, exist_ok=True)
    one = (water / "input.data").read_text()
    sets = [
        stage_dataset("water", root, one * args.copies, (water / "input.nn").read_text()),
        stage_dataset("cuau", root, cuau_data(args.metal_structures), cuau_input_nn()),
    ]
    small = stage_dataset("water4k", root, one * 2, (water / "input.nn").read_text())
    if args.kernel_only:
        kernel_table(sets, bindir, args.rounds)
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
        return 0

    configs = [(ds, p, f) for ds in sets for f in (False, True) for p in (1, 2)]
    best: dict[tuple, tuple[Run, Run]] = {}
    fixed_n2p2: Run | None = None
    fixed_dp: Run | None = None
    for _ in range(args.rounds):
        for ds, p, f in configs:
            a = run_n2p2(ds, p, f, bindir)
            b = run_dparallel(ds, p, f)
            key = (ds.name, p, f)
            old = best.get(key)
            best[key] = (
                a if old is None or a.wall < old[0].wall else old[0],
                b if old is None or b.wall < old[1].wall else old[1],
            )
        a, b = run_n2p2(small, 2, False, bindir), run_dparallel(small, 2, False)
        fixed_n2p2 = a if fixed_n2p2 is None or a.wall < fixed_n2p2.wall else fixed_n2p2
        fixed_dp = b if fixed_dp is None or b.wall < fixed_dp.wall else fixed_dp
    rates = {
        (ds.name, f): kernel_rate(ds, f, max_atoms=3000 if ds.name == "water" else 2500)
        for ds in sets
        for f in (False, True)
    }
    small_kernel = small.n_atoms / kernel_rate(small, False, max_atoms=10**9)

    print(f"# python benchmarks/{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}")
    print(f"# n2p2: {bindir}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    print(f"# dparallel: {compiled} (bytecode written before the runs)")
    head = (
        f"{'dataset':28s} {'run':30s} {'n2p2':>9s} {'dparallel':>10s} {'speed-up':>8s} "
        f"{'n2p2 RSS':>9s} {'dp RSS':>8s} {'n2p2 RAM':>9s} {'dp store':>9s} {'dp write':>9s}"
    )
    units = f"{'':28s} {'':30s} {'':>9s} {'':>10s} {'':>8s} {'MiB/rank':>9s} {'MiB/wkr':>8s} "
    units += f"{'kB/atom':>9s} {'kB/atom':>9s} {'/compute':>9s}"
    print(head)
    print(units)
    print("-" * len(head))
    for ds in sets:
        label = f"{ds.name} ({ds.n_structures} str, {ds.n_atoms:,} at)"
        for f in (False, True):
            for p in (1, 2):
                a, b = best[(ds.name, p, f)]
                what = f"{'values + dG/dr' if f else 'values'}, {p} proc [s]"
                ram = n2p2_ram_per_atom(a, ds.n_atoms) / 1e3 if f else float("nan")
                print(
                    f"{label:28s} {what:30s} {a.wall:9.1f} {b.wall:10.1f} "
                    f"{a.wall / b.wall:7.2f}x {fmt(a.max_rss('nnp-scaling')):>9s} "
                    f"{fmt(b.max_rss(exclude_root=True)):>8s} {fmt(ram):>9s} "
                    f"{fmt(store_bytes(b) / ds.n_atoms / 1e3):>9s} "
                    f"{fmt(100 * stored_share(b), 0) + ' %':>9s}"
                )
        for f in (False, True):
            n2p2_rate = ds.n_atoms / best[(ds.name, 1, f)][0].wall
            ours = rates[(ds.name, f)]
            what = f"kernel {'values + dG/dr' if f else 'values'} [atoms/s]"
            print(
                f"{label:28s} {what:30s} {n2p2_rate:9,.0f} {ours:10,.0f} {ours / n2p2_rate:7.2f}x"
            )
    assert fixed_n2p2 is not None and fixed_dp is not None  # rounds ≥ 1
    what = f"fixed cost, {small.n_atoms:,} at, 2 proc [s]"
    print(
        f"{'water (40 str)':28s} {what:30s} {fixed_n2p2.wall:9.1f} {fixed_dp.wall:10.1f} "
        f"{fixed_n2p2.wall / fixed_dp.wall:7.2f}x"
    )
    print(
        f"\nspeed-up = n2p2 / dparallel time (rate for atoms/s rows). kernel rows: n2p2 = "
        f"single-rank whole run (read, neighbour lists, symmetry functions, statistics), "
        f"dparallel = in-process ACSF.compute, 1 thread, neighbour list included.\n"
        f"fixed cost: kernel time of those {small.n_atoms:,} atoms, 1 thread in-process: "
        f"{small_kernel:.2f} s. RSS: peak per process (n2p2 ranks; dparallel processes "
        f"below the CLI: workers and nannies). n2p2 RAM: its own estimate of the memory "
        f"holding G and dG/dr. dp store: bytes on disk of the zarr store / atoms. dp write: "
        f"the tasks' store writes (structures, features, dG/dr encoding, statistics) over "
        f"their computing (neighbour lists, checks, descriptors), summed over task reports."
    )
    if not args.workdir:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
