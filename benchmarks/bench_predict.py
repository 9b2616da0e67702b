"""Prediction speed against n2p2's ``nnp-dataset``: one potential, one dataset, one run.

The potential: n2p2's RPBE-D3 water example (``$N2P2_WATER``, else ``../shared/n2p2/water``:
its ``input.nn``, ``scaling.data`` from ``nnp-scaling`` on its ``input.data``) with random
weights (seeded), read in the file's units (Å/eV for both codes: no conversion on either
side). The data: its 20 structures concatenated ``--copies`` times, as one n2p2 ``input.data``.

Timed, energies and forces of every structure, wall time of each whole route:

* n2p2 ``nnp-dataset 0`` (1 process; 2 with ``mpirun -np 2`` when its build has MPI):
  reading, neighbour lists, symmetry functions, networks, forces, writing output.data;
* ``dparallel evaluate POT DATA --units ase`` (the command: interpreter, imports, reading,
  ``--batch`` 64, errors; torch's thread count: the machine's cores);
* ``DeployedModel.predict`` on batches of ``--batch`` structures (read already), on 1 and
  on 2 threads;
* ``dparallel.ase.Calculator(POT)`` per structure (``get_potential_energy`` and
  ``get_forces`` on each ``ase.Atoms``; calculator already made; one thread).

Ratio = n2p2 (1 process) time / the route's time (> 1: faster than n2p2). The energies and
forces of the in-process routes are compared with n2p2's ``output.data`` (16 digits): the
largest energy difference per atom and force difference, relative to the largest value.

    python benchmarks/bench_predict.py [--copies 10] [--batch 64] [--workdir DIR]

n2p2 comes from ``../shared/n2p2/build.sh`` (``$N2P2_HOME``); without it the script says so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from bench_n2p2 import MPI_ENV, N2P2_HOME
from water_example import WATER

if TYPE_CHECKING:
    from dparallel.types import StructureBatch

REPO = Path(__file__).resolve().parents[1]


def make_potential(work: Path, bindir: Path, seed: int = 0) -> Path:
    """``work/pot``: the water input.nn, n2p2's scaling.data for it, random weights."""
    from ase.data import atomic_numbers

    from dparallel.n2p2 import read_input_nn, write_weights

    pot = work / "pot"
    pot.mkdir(parents=True, exist_ok=True)
    for name in ("input.nn", "input.data"):
        shutil.copy(WATER / name, pot / name)
    subprocess.run([str(bindir / "nnp-scaling"), "1"], cwd=pot, check=True, capture_output=True)
    (pot / "input.data").unlink()
    inp = read_input_nn(pot / "input.nn")
    rng = np.random.default_rng(seed)
    for e in inp.elements:
        sizes = [inp.n_symmetry_functions[e], *inp.networks[e].nodes, 1]
        layers = [
            (rng.uniform(-0.4, 0.4, (b, a)), rng.uniform(-0.4, 0.4, b))
            for a, b in itertools.pairwise(sizes)
        ]
        write_weights(pot / f"weights.{atomic_numbers[e]:03d}.data", layers)
    for f in ("nnp-scaling.log.0000", "sf-scaled.histo"):
        (pot / f).unlink(missing_ok=True)
    return pot


def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[float, str]:
    """Wall seconds and stdout of ``cmd`` (stops on failure, printing its output tail)."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{(proc.stdout + proc.stderr)[-2000:]}")
    return dt, proc.stdout


def run_n2p2(pot: Path, data: Path, work: Path, bindir: Path, ranks: int) -> tuple[float, Path]:
    """Seconds of ``nnp-dataset 0`` on ``data`` with ``ranks`` processes; its output.data."""
    d = work / f"n2p2-{ranks}"
    d.mkdir(exist_ok=True)
    for f in pot.iterdir():
        shutil.copy(f, d / f.name)
    shutil.copy(data, d / "input.data")
    exe = str(bindir / "nnp-dataset")
    cmd = [exe, "0"] if ranks == 1 else ["mpirun", "--allow-run-as-root", "-np", "2", exe, "0"]
    return timed(cmd, d, {**os.environ, **MPI_ENV})[0], d / "output.data"


def agreement(energy: np.ndarray, forces: np.ndarray, ref: tuple, counts: np.ndarray) -> str:
    """Largest |ΔE|/atom and |ΔF|, each relative to the reference's largest |E|/atom, |F|."""
    ref_e, ref_f = ref[0] / counts, np.concatenate(ref[1])
    de = np.abs(energy / counts - ref_e).max() / np.abs(ref_e).max()
    df = np.abs(forces - ref_f).max() / np.abs(ref_f).max()
    return f"{de:.1e} / {df:.1e}"


def label_rmse(ref: tuple, labels: StructureBatch) -> tuple[float, float]:
    """Energy (per atom) and force-component RMSE of predictions ``ref`` against the labels."""
    de = (ref[0] - labels.energy) / labels.atom_counts
    df = np.concatenate(ref[1]) - labels.forces
    return float(np.sqrt(np.mean(de**2))), float(np.sqrt(np.mean(df**2)))


def batched(every: StructureBatch, size: int) -> list[StructureBatch]:
    """``every`` cut into batches of ``size`` structures."""
    n = every.n_structures
    return [every.select(a, min(n, a + size)) for a in range(0, n, size)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=10, help="water example repeats (20 each)")
    ap.add_argument("--batch", type=int, default=64, help="structures per predict batch")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    bindir = N2P2_HOME / "bin"
    if not (bindir / "nnp-dataset").is_file():
        print(f"n2p2 is not built in {N2P2_HOME} (run ../shared/n2p2/build.sh)")
        return 1
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench_predict_"))
    work.mkdir(parents=True, exist_ok=True)
    pot = make_potential(work, bindir)
    data = work / "input.data"
    data.write_text((WATER / "input.data").read_text() * args.copies)

    from dparallel.ase import Calculator
    from dparallel.deploy import DeployedModel
    from dparallel.io import open_source
    from dparallel.n2p2 import load_potential
    from dparallel.n2p2.binaries import read_output_data

    every = open_source(str(data), "n2p2", units="ase").read(0, None)
    counts = every.atom_counts
    rows: list[tuple[str, float, str]] = []
    t1, out1 = run_n2p2(pot, data, work, bindir, 1)
    ref = read_output_data(out1)
    rows.append(("n2p2 nnp-dataset, 1 process", t1, "(the reference)"))
    if shutil.which("mpirun"):
        t2, out2 = run_n2p2(pot, data, work, bindir, 2)
        e2, f2 = read_output_data(out2)
        agree = agreement(e2, np.concatenate(f2), ref, counts)
        rows.append(("n2p2 nnp-dataset, 2 processes (mpirun)", t2, agree))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "dparallel", "evaluate", str(pot), str(data), "--units", "ase"]
    t_eval, out = timed([*cmd, "--json"], work, env)
    got = json.loads(out)
    mine = got["energy_rmse_meV_per_atom"] / 1e3, got["force_rmse_meV_per_A"] / 1e3
    theirs = label_rmse(ref, every)
    agree = " / ".join(f"{abs(a / b - 1):.1e}" for a, b in zip(mine, theirs, strict=True))
    rows.append(("dparallel evaluate (the command)", t_eval, f"{agree} (RMSEs vs labels)"))

    model = DeployedModel(*load_potential(pot, units="ase"))
    batches = batched(every, args.batch)
    model.predict(batches[0])  # compile (numba) outside the timing, as the calculator does
    for threads in (1, 2):
        t0 = time.perf_counter()
        outs = [model.predict(b, threads=threads) for b in batches]
        t_pred = time.perf_counter() - t0
        e = np.concatenate([o["energy"] for o in outs])
        f = np.concatenate([o["forces"] for o in outs])
        name = f"DeployedModel.predict, {args.batch}/batch, {threads} thr."
        rows.append((name, t_pred, agreement(e, f, ref, counts)))

    frames = every.to_ase()
    calc = Calculator(pot, units="ase")
    t0 = time.perf_counter()
    es, fs = [], []
    for atoms in frames:
        atoms.calc = calc
        es.append(atoms.get_potential_energy())
        fs.append(atoms.get_forces())
    t_calc = time.perf_counter() - t0
    agree = agreement(np.array(es), np.concatenate(fs), ref, counts)
    rows.append(("ase Calculator, per structure", t_calc, agree))

    n_s, n_a = len(counts), int(counts.sum())
    print(f"\nwater ×{args.copies}: {n_s} structures, {n_a} atoms; energies and forces")
    head = f"{'route':40s} {'wall s':>7s} {'struct/s':>8s} {'atoms/s':>8s} {'vs n2p2':>7s}"
    print(f"{head}  agreement with n2p2 (1 process): max |ΔE|/atom / max |ΔF|, relative")
    for name, t, agree in rows:
        print(f"{name:40s} {t:7.2f} {n_s / t:8.1f} {n_a / t:8.0f} {t1 / t:6.2f}×  {agree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
