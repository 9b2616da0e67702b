"""MD speed: NVE VelocityVerlet on the 108-atom Cu cell, dparallel's ASE calculator vs EMT.

Usage: ``PYTHONPATH=. python benchmarks/bench_md.py [--model MODEL_DIR] [--steps 200]``.

Without ``--model`` a Cu model is trained first (the quickstart workflow's ACSF, hidden
(48, 48), 60 EMT structures, 40 epochs, ~1 min): speed does not depend on the weights, but
the trajectory (and so how often the neighbour list is rebuilt) should be a physical one.
Every method starts from the same state (300 K, seeded) and runs ``--steps`` steps of
1 fs; methods are interleaved over ``--rounds`` rounds and the best round counts, so ratios
are robust to load that drifts during the run. Also printed: time to make the calculator
and its first force call, neighbour-list builds, and the energy drift (max |E_tot − E_0|
per atom) against EMT's own.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np
import torch


def train_quick_model(work: Path) -> Path:
    """A small trained Cu model in ``work/model`` (deployed.pt)."""
    from dparallel.datasets import write_emt_cu
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.train import TrainingSpec, train
    from dparallel.train.export import export_model
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
    from dparallel.workflow.spec import load_quickstart

    data = write_emt_cu(work / "cu60.xyz", 60, seed=1)
    acsf = load_quickstart().descriptors.build().acsf
    store = featurize_in_process(
        data,
        work / "cu60.zarr",
        DescriptorSet(acsf=acsf, derivatives=True),
        FeaturizeOptions(partition_atoms=2000, overwrite=True),
    )
    spec = TrainingSpec(epochs=40, hidden=(48, 48), seed=0)
    train(store, work / "model", spec)
    export_model(work / "model")  # deployed.pt and the plain-torch artifacts
    return work / "model"


def start_state():  # noqa: ANN201
    """108-atom Cu fcc cell, rattled, Maxwell-Boltzmann velocities at 300 K (seeded)."""
    from ase.build import bulk
    from ase.md.velocitydistribution import MaxwellBoltzmannDistribution

    atoms = bulk("Cu", "fcc", a=3.61, cubic=True).repeat((3, 3, 3))
    atoms.rattle(0.02, seed=1)
    MaxwellBoltzmannDistribution(atoms, temperature_K=300, rng=np.random.default_rng(0))
    return atoms


def run_md(calc, steps: int) -> tuple[float, float]:  # noqa: ANN001
    """Wall seconds for ``steps`` VelocityVerlet steps and the max energy drift (eV/atom)."""
    from ase import units
    from ase.md.verlet import VelocityVerlet

    atoms = start_state()
    atoms.calc = calc
    dyn = VelocityVerlet(atoms, timestep=1.0 * units.fs)
    e0 = atoms.get_total_energy()  # first force call happens here, outside the timing
    totals = []
    dyn.attach(lambda: totals.append(atoms.get_total_energy()), interval=10)
    t0 = time.perf_counter()
    dyn.run(steps)
    seconds = time.perf_counter() - t0
    return seconds, float(np.abs(np.array(totals) - e0).max()) / len(atoms)


def fresh_process_start(model: Path, skin: float) -> tuple[float, float]:
    """Seconds to make the calculator and to run its first force call, in a new process."""
    code = (
        "import time, sys; t0 = time.perf_counter()\n"
        "from dparallel.ase import Calculator\n"
        "sys.path.insert(0, sys.argv[1]); from bench_md import start_state\n"
        "calc = Calculator(sys.argv[2], skin=float(sys.argv[3])); t1 = time.perf_counter()\n"
        "atoms = start_state(); atoms.calc = calc; atoms.get_forces()\n"
        "print(t1 - t0, time.perf_counter() - t1)\n"
    )
    here = str(Path(__file__).parent)
    out = subprocess.run(
        [sys.executable, "-c", code, here, str(model), str(skin)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    made, first = map(float, out.stdout.split()[-2:])
    return made, first


def _forces_after_a_move(atoms) -> None:  # noqa: ANN001
    """One force call as in MD: an atom moved (±1e-4 Å, alternating), nothing else changed."""
    pos = atoms.get_positions()
    pos[0, 0] += 1e-4 if pos[0, 0] <= atoms.info.setdefault("x0", pos[0, 0]) else -1e-4
    atoms.set_positions(pos)
    atoms.get_forces()


def force_call_breakdown(calc, rounds: int = 30) -> dict[str, float]:  # noqa: ANN001
    """Best ms of a whole call and of its parts (interleaved): ``DeployedModel.predict``,
    the compiled engine it runs (the fused energy + forces kernel pass in float64), the
    descriptor kernels alone (values; values + dG/dr, the unfused route's kernel), the
    neighbour list reused / built fresh; the rest of a call is ASE's bookkeeping."""
    from ase.calculators.calculator import all_changes
    from ase.calculators.emt import EMT

    from dparallel.neighbors import neighbor_list
    from dparallel.types import StructureBatch

    atoms = start_state()
    atoms.calc = calc
    batch = StructureBatch.from_ase(atoms, labels=False)
    neighbors = calc.neighbor_list.neighbors(batch)
    engine = calc.model.engine(calc.backend)  # the compiled route predict takes
    emt_atoms = start_state()
    emt_atoms.calc = EMT()
    parts = {
        "EMT atoms.get_forces()": lambda: _forces_after_a_move(emt_atoms),
        "atoms.get_forces()": lambda: _forces_after_a_move(atoms),
        "Calculator.calculate": lambda: calc.calculate(atoms, ["energy", "forces"], all_changes),
        "DeployedModel.predict": lambda: calc.model.predict(batch, neighbors=neighbors),
        "fused kernel (energy + forces)": lambda: engine(batch, neighbors, True, False),
        "ACSF kernel with dG/dr": lambda: engine.descriptors(batch, neighbors, True),
        "ACSF kernel values": lambda: engine.descriptors(batch, neighbors, False),
        "neighbour list reused (skin)": lambda: calc.neighbor_list.neighbors(batch),
        "neighbour list built": lambda: neighbor_list(batch, calc.model.cutoff),
    }
    best = dict.fromkeys(parts, float("inf"))
    for _ in range(rounds):
        for name, fn in parts.items():
            t0 = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t0)
    return {name: 1e3 * t for name, t in best.items()}


def artifact_calls(model: Path, rounds: int = 10) -> dict[str, float]:
    """Best ms of one call of each plain-torch artifact in ``model`` (inputs prepared once)."""
    import warnings

    from dparallel.deploy.probes import inputs_from_atoms

    loaders = {
        "potential.pt2 (torch.export)": lambda p: torch.export.load(p).module(),
        "potential.ts (TorchScript)": lambda p: torch.jit.load(str(p)),
        "potential_aoti.pt2 (AOTInductor)": lambda p: torch._inductor.aoti_load_package(str(p)),
    }
    cutoff = json.loads((model / "export.json").read_text())["cutoff"]
    args = inputs_from_atoms(start_state(), cutoff, torch.float64)
    out = {}
    for name, load in loaders.items():
        path = model / name.split()[0]
        if not path.exists():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            potential = load(path)
        potential(*args)
        best = float("inf")
        for _ in range(rounds):
            t0 = time.perf_counter()
            potential(*args)
            best = min(best, time.perf_counter() - t0)
        out[name] = 1e3 * best
    return out


def main() -> None:
    """Run the benchmark and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model directory (deployed.pt)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skin", type=float, default=0.5)
    args = parser.parse_args()
    torch.set_num_threads(1)

    from ase.calculators.emt import EMT

    from dparallel.ase import Calculator

    model = Path(args.model) if args.model else train_quick_model(Path(tempfile.mkdtemp()))
    t_make, t_first = fresh_process_start(model, args.skin)
    breakdown = force_call_breakdown(Calculator(model, skin=args.skin))

    makers = {
        "ASE EMT": EMT,
        f"dparallel (skin {args.skin} Å)": lambda: Calculator(model, skin=args.skin),
        "dparallel (fresh list each step)": lambda: Calculator(model, skin=0.0),
    }
    calcs = {name: make() for name, make in makers.items()}
    best = dict.fromkeys(calcs, float("inf"))
    drift = {}
    for _ in range(args.rounds):
        for name, calc in calcs.items():
            seconds, drift[name] = run_md(calc, args.steps)
            best[name] = min(best[name], seconds)
    builds = {
        n: c.neighbor_list.statistics.builds
        for n, c in calcs.items()
        if hasattr(c, "neighbor_list")
    }

    print(f"NVE VelocityVerlet, 108-atom Cu, 1 fs, {args.steps} steps, best of {args.rounds} "
          f"interleaved rounds; torch threads 1; model {model}")  # fmt: skip
    print(f"dparallel Calculator() in a fresh process: made in {t_make:.2f} s (warm-up "
          f"included), first force call {1e3 * t_first:.1f} ms")  # fmt: skip
    print("one force call, best of 30 interleaved: " + ", ".join(
        f"{name} {ms:.2f} ms" for name, ms in breakdown.items()))  # fmt: skip
    ratio = breakdown["EMT atoms.get_forces()"] / breakdown["atoms.get_forces()"]
    print(f"one force call, dparallel vs EMT (best of 30 each, less sensitive to load than "
          f"whole runs): {ratio:.2f}x")  # fmt: skip
    print(f"{'method':34s} {'steps/s':>9s} {'ms/step':>8s} {'x EMT':>6s} {'drift eV/atom':>14s}")
    emt_rate = args.steps / best["ASE EMT"]
    for name, seconds in best.items():
        rate = args.steps / seconds
        print(f"{name:34s} {rate:9.1f} {1e3 / rate:8.2f} {rate / emt_rate:6.2f} "
              f"{drift[name]:14.2e}")  # fmt: skip
    for name, n in builds.items():
        print(f"{name}: {n} neighbour-list builds over {args.rounds * (args.steps + 1)} calls")
    for name, ms in artifact_calls(model).items():
        print(f"one call of {name}: {ms:.1f} ms (neighbour list given)")


if __name__ == "__main__":
    main()
