"""Training parity with n2p2: test-set error against wall time, ``nnp-train`` vs dparallel.

Same data, symmetry functions and network for both:

* data: EMT-labelled, rattled and strained 2×2×2 cubic fcc CuAu cells (32 atoms, ASE's EMT),
  split once into ``train.data`` and ``test.data`` (n2p2 ``input.data``, Å and eV); both
  programs train on ``train.data`` only and are scored on the same ``test.data``;
* symmetry functions: one ``input.nn`` (types 2 and 3, poly2 cutoff, rc = 6 Å), read by
  n2p2 and by dparallel (``acsf: {n2p2: input.nn}``), so features are identical and in
  n2p2's order;
* network: the input.nn's (``global_nodes_short``, tanh hidden layers, linear output,
  n2p2's ``scalecenter`` scaling); dparallel takes them from ``InputNN.training_options()``
  (``n2p2_compatible: true``), so both networks have the same architecture.

Runs (2 processes / 2 cores each), timed as a user runs them (wall time of each command):

* n2p2: ``mpirun -np 2 nnp-scaling 100`` then ``mpirun -np 2 nnp-train`` (its multi-stream
  global extended Kalman filter, energies and forces, the settings of n2p2's own
  ``examples/nnp-train`` input files); weights written after every epoch;
* dparallel: ``dparallel featurize train.data --format n2p2 --descriptors d.yaml --local 2
  --derivatives`` once, then ``dparallel.train.train`` in a child process (what
  ``dparallel train`` runs; its callback copies each epoch's checkpoint, time subtracted)
  with ``optimizer: kalman`` (n2p2's filter, docs/training.md) and with ``adam``; both
  times include the featurization.

Each program's per-epoch models are scored afterwards (outside the timed runs) on
``test.data`` by one evaluator: ``DeployedModel.predict`` (n2p2's epoch weights loaded with
``dparallel.n2p2.load_potential``, equal to ``nnp-dataset`` within 1e-8, and the last n2p2
epoch is checked against ``nnp-dataset`` here too). Time of an epoch = the wall time of
everything before it (featurization/scaling, setup, earlier epochs with their error
passes). The table prints test energy RMSE (meV/atom) and force RMSE (meV/Å) per epoch,
and the time each program first reaches n2p2's final test RMSEs.

    python benchmarks/bench_train_n2p2.py [--quick] [--structures 300] [--n2p2-epochs 8]
        [--kalman-epochs 12] [--adam-epochs 60] [--dp-set key=value ...] [--workdir DIR]

The shared benchmark machine is noisy: rerun on a quiet machine before quoting times.
n2p2 comes from ``../shared/n2p2/build.sh``; without it the script says so and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_n2p2 import MPI_ENV, cuau_cells, n2p2_bin, n2p2_structure

ELEMENTS = ("Cu", "Au")
RC = 6.0

# network, scaling and n2p2's training settings (its examples/nnp-train water input,
# Kalman filter, forces); test_fraction 0: the test set is test.data, scored outside
TRAIN_SETTINGS = """\
number_of_elements 2
elements Cu Au
cutoff_type 6 0.0
scale_symmetry_functions
center_symmetry_functions
scale_min_short 0.0
scale_max_short 1.0
global_hidden_layers_short 2
global_nodes_short {nodes} {nodes}
global_activation_short t t l
use_short_forces
random_seed {seed}
epochs {epochs}
updater_type 1
parallel_mode 0
jacobian_mode 1
update_strategy 0
selection_mode 2
task_batch_size_energy 1
task_batch_size_force 1
memorize_symfunc_results
test_fraction 0.0
force_weight 10.0
short_energy_fraction 1.000
force_energy_ratio 3.0
short_energy_error_threshold 0.00
short_force_error_threshold 1.00
rmse_threshold_trials 3
weights_min -1.0
weights_max 1.0
nguyen_widrow_weights_short
main_error_metric RMSEpa
write_trainpoints 0
write_trainforces 0
write_weights_epoch 1
write_neuronstats 0
kalman_type 0
kalman_epsilon 1.0E-2
kalman_q0 0.01
kalman_qtau 2.302
kalman_qmin 1.0E-6
kalman_eta 0.01
kalman_etatau 2.302
kalman_etamax 1.0
"""


# dparallel settings per optimizer beyond the input.nn's: for the Kalman filter, updates of
# 4 structures with 6 force components each (4 × (1 + 6) = 28 rows) — chosen on the --quick
# data among batch sizes 2, 4, 8 and 3 or 6 components; Adam keeps its defaults
DP_SETTINGS: dict[str, dict] = {
    "kalman": {"batch_size": 4, "kalman_force_components": 6},
    "adam": {},
}


# --------------------------------------------------------------------------- data
def cuau_structures(n: int, seed: int = 0) -> list:
    """EMT-labelled rattled, strained 2×2×2 cubic fcc Cu/Au cells (32 atoms, Å, eV)."""
    return cuau_cells(n, seed, a=3.8, repeat=2, au=(0.1, 0.9), rattle=0.1)


def input_nn(nodes: int, epochs: int, seed: int) -> str:
    """The shared input.nn: 4 radial per element pair, 4 angular per element triple."""
    lines = [TRAIN_SETTINGS.format(nodes=nodes, epochs=epochs, seed=seed)]
    for ec in ELEMENTS:
        for e1 in ELEMENTS:
            for eta, rs in ((0.01, 0.0), (0.5, 2.4), (1.0, 3.2), (1.0, 4.2)):
                lines.append(f"symfunction_short {ec} 2 {e1} {eta} {rs} {RC}")
        for e1, e2 in (("Cu", "Cu"), ("Cu", "Au"), ("Au", "Au")):
            for eta, lam, zeta in ((0.01, 1, 1), (0.01, -1, 1), (0.02, 1, 4), (0.02, -1, 4)):
                lines.append(f"symfunction_short {ec} 3 {e1} {e2} {eta} {lam} {zeta} {RC}")
    return "\n".join(lines) + "\n"


def write_data(path: Path, structures: list) -> None:
    """Structures with their EMT labels as n2p2 input.data."""
    path.write_text(
        "".join(n2p2_structure(a, a.get_potential_energy(), a.get_forces()) for a in structures)
    )


# --------------------------------------------------------------------------- runs
def timed(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of ``cmd`` in ``cwd``; raises with its output tail on failure."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})}
    )
    seconds = time.perf_counter() - t0
    (cwd / f"{Path(cmd[-1]).name}.log").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{tail}")
    return seconds


def mpirun(bindir: Path, tool: str, *args: str) -> list[str]:
    """``mpirun -np 2`` command line of an n2p2 tool."""
    return ["mpirun", "--allow-run-as-root", "-np", "2", str(bindir / tool), *args]


def run_n2p2(root: Path, nn: str, bindir: Path) -> dict:
    """nnp-scaling + nnp-train on train.data; per-epoch wall times and weight files."""
    work = root / "n2p2"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    shutil.copy(root / "train.data", work / "input.data")
    (work / "input.nn").write_text(nn)
    t_scaling = timed(mpirun(bindir, "nnp-scaling", "100"), work, MPI_ENV)
    t_train = timed(mpirun(bindir, "nnp-train"), work, MPI_ENV)
    # timing.out: epoch, train, ptrain, error, perror, epoch time, total loop time, …
    rows = [ln.split() for ln in (work / "timing.out").read_text().splitlines()]
    loop = {int(r[0]): float(r[6]) for r in rows if r and not r[0].startswith("#")}
    setup = t_scaling + t_train - max(loop.values())  # reading, SF, epoch-0 errors, exit
    epochs = []
    for ep, cum in sorted(loop.items()):
        weights = {e: work / f"weights.{z:03d}.{ep:06d}.out" for e, z in (("Cu", 29), ("Au", 79))}
        epochs.append({"epoch": ep, "seconds": setup + cum, "weights": weights})
    return {"dir": work, "setup": setup, "wall": t_scaling + t_train, "epochs": epochs}


def featurize(root: Path, partition_atoms: int) -> tuple[Path, float]:
    """``dparallel featurize`` of train.data with the shared input.nn (2 processes)."""
    work = root / "dparallel"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "input.nn").write_text((root / "n2p2" / "input.nn").read_text())
    (work / "d.yaml").write_text("acsf: {n2p2: input.nn}\n")
    exe = str(Path(sys.executable).with_name("dparallel"))
    cmd = [exe, "featurize", str(root / "train.data"), "--format", "n2p2", "--descriptors"]
    cmd += ["d.yaml", "--local", "2", "--derivatives", "-o", "store.zarr"]
    cmd += ["--partition-atoms", str(partition_atoms), "-q"]  # 4 partitions: 2 workers busy
    return work / "store.zarr", timed(cmd, work)


def run_dparallel(store: Path, t_featurize: float, name: str, spec: dict) -> dict:
    """Train in a child process (as ``dparallel train``); per-epoch wall times and models."""
    work = store.parent / name
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "spec.json").write_text(json.dumps(spec))
    t0 = time.time()
    t_train = timed([sys.executable, __file__, "--child-train", str(work)], work)
    marks = json.loads((work / "epochs.json").read_text())
    epochs = [
        {
            "epoch": m["epoch"] + 1,
            "seconds": t_featurize + m["time"] - t0 - m["overhead"],
            "checkpoint": work / "epochs" / f"{m['epoch']:04d}.pt",
        }
        for m in marks
    ]
    return {"dir": work, "featurize": t_featurize, "wall": t_featurize + t_train, "epochs": epochs}


def child_train(work: Path) -> None:
    """Run dparallel's training (as ``dparallel train`` does), keeping each epoch's weights."""
    from dparallel.train import TrainingSpec, train

    spec = TrainingSpec(**json.loads((work / "spec.json").read_text()))
    (work / "epochs").mkdir()
    marks: list[dict] = []
    overhead = 0.0

    def keep(row: dict) -> None:
        nonlocal overhead
        t = time.time()
        shutil.copy(work / "model" / "checkpoint.pt", work / "epochs" / f"{row['epoch']:04d}.pt")
        marks.append({"epoch": int(row["epoch"]), "time": t, "overhead": overhead})
        overhead += time.time() - t

    train(work.parent / "store.zarr", work / "model", spec, callback=keep)
    (work / "epochs.json").write_text(json.dumps(marks))


# --------------------------------------------------------------------------- scoring
class Scorer:
    """Test RMSEs of a (descriptor, HDNNP) pair on test.data (meV/atom, meV/Å)."""

    def __init__(self, structures: list) -> None:
        import torch

        from dparallel.types import StructureBatch

        self.batch = StructureBatch.from_ase(structures)
        self.n_atoms = np.array([len(a) for a in structures])
        self.energy = np.array([a.get_potential_energy() for a in structures])
        self.forces = np.concatenate([a.get_forces() for a in structures])
        self.torch = torch

    def __call__(self, acsf, model) -> tuple[float, float]:  # noqa: ANN001
        from dparallel.deploy import DeployedModel

        out = DeployedModel(acsf, model).predict(self.batch, forces=True)
        de = (np.asarray(out["energy"]) - self.energy) / self.n_atoms
        df = np.asarray(out["forces"]) - self.forces
        return 1e3 * float(np.sqrt(np.mean(de**2))), 1e3 * float(np.sqrt(np.mean(df**2)))


def score_n2p2(run: dict, scorer: Scorer, bindir: Path, test_data: Path) -> None:
    """Score every epoch's weights; check the last one against nnp-dataset."""
    from dparallel.n2p2 import load_potential
    from dparallel.n2p2.binaries import read_output_data

    pot = run["dir"] / "potential"
    pot.mkdir(exist_ok=True)
    for name in ("input.nn", "scaling.data"):
        shutil.copy(run["dir"] / name, pot / name)
    for ep in run["epochs"]:
        for e, src in ep["weights"].items():
            z = 29 if e == "Cu" else 79
            shutil.copy(src, pot / f"weights.{z:03d}.data")
        acsf, model = load_potential(pot)
        ep["rmse"] = scorer(acsf, model)
    shutil.copy(test_data, pot / "input.data")
    subprocess.run(
        [str(bindir / "nnp-dataset"), "0"], cwd=pot, capture_output=True, check=True,
        env={**os.environ, **MPI_ENV},
    )  # fmt: skip
    energy, forces = read_output_data(pot / "output.data")
    de = (energy - scorer.energy) / scorer.n_atoms
    df = np.concatenate(forces) - scorer.forces
    run["nnp_dataset_rmse"] = (1e3 * np.sqrt(np.mean(de**2)), 1e3 * np.sqrt(np.mean(df**2)))


def score_dparallel(run: dict, scorer: Scorer) -> None:
    """Score every epoch's checkpointed model (weights as after that epoch)."""
    import torch

    from dparallel.descriptors import ACSF
    from dparallel.train import load_model

    model, info = load_model(run["dir"] / "model")
    acsf = ACSF.from_dict(info["descriptor"])
    for ep in run["epochs"]:
        ck = torch.load(ep["checkpoint"], weights_only=True)
        model.load_state_dict(ck["model"])
        ep["rmse"] = scorer(acsf, model)


# --------------------------------------------------------------------------- report
def reaching(epochs: list[dict], target: tuple[float, float]) -> dict | None:
    """The first epoch with both test RMSEs at or below ``target`` (unscored ones skipped)."""
    for ep in epochs:
        if ep["rmse"] is not None and ep["rmse"][0] <= target[0] and ep["rmse"][1] <= target[1]:
            return ep
    return None


def first_reaching(epochs: list[dict], target: tuple[float, float]) -> str:
    """Wall time of the first epoch with both test RMSEs at or below ``target``."""
    ep = reaching(epochs, target)
    return "not reached" if ep is None else f"{ep['seconds']:.1f} s (epoch {ep['epoch']})"


def print_curve(name: str, epochs: list[dict], every: int) -> None:
    """One program's learning curve: epoch, wall time, test RMSEs."""
    print(f"\n{name}\n| epoch | wall s | test E RMSE (meV/atom) | test F RMSE (meV/Å) |")
    print("| ---: | ---: | ---: | ---: |")
    for i, ep in enumerate(epochs):
        if i % every == 0 or i == len(epochs) - 1:
            e, f = ep["rmse"]
            print(f"| {ep['epoch']} | {ep['seconds']:.1f} | {e:.2f} | {f:.1f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--structures", type=int, default=300, help="CuAu cells (300)")
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--nodes", type=int, default=15, help="hidden nodes per layer (15)")
    parser.add_argument("--n2p2-epochs", type=int, default=8)
    parser.add_argument("--kalman-epochs", type=int, default=12, help="dparallel, 0 = skip")
    parser.add_argument("--adam-epochs", type=int, default=60, help="dparallel, 0 = skip")
    parser.add_argument("--dp-set", action="append", default=[], help="TrainingSpec key=value")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--quick", action="store_true", help="100 cells, few epochs")
    parser.add_argument("--child-train", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_train:
        child_train(args.child_train)
        return 0
    if args.quick:
        args.structures, args.n2p2_epochs, args.kalman_epochs, args.adam_epochs = 100, 4, 6, 30
    bindir = n2p2_bin()
    if bindir is None or not (bindir / "nnp-train").is_file():
        print("n2p2 is not built: run ../shared/n2p2/build.sh (nnp-train needed)")
        return 1
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-train-n2p2-"))
    root.mkdir(parents=True, exist_ok=True)

    structures = cuau_structures(args.structures, seed=args.seed)
    n_test = max(1, round(args.test_fraction * len(structures)))
    train_s, test_s = structures[:-n_test], structures[-n_test:]
    write_data(root / "train.data", train_s)
    write_data(root / "test.data", test_s)
    nn = input_nn(args.nodes, args.n2p2_epochs, args.seed)

    from dparallel.config import apply_overrides
    from dparallel.n2p2 import read_input_nn
    from dparallel.train.optimizer_kinds import read_by_optimizer

    n2p2_run = run_n2p2(root, nn, bindir)
    base = read_input_nn(n2p2_run["dir"] / "input.nn").training_options()
    base.update(validation_fraction=0.0, test_fraction=0.0)
    train_atoms = sum(len(a) for a in train_s)
    store, t_feat = featurize(root, -(-train_atoms // 4))
    dp_runs: dict[str, dict] = {}
    specs: dict[str, dict] = {}
    for name, epochs in (("kalman", args.kalman_epochs), ("adam", args.adam_epochs)):
        if epochs:
            spec = {**base, **DP_SETTINGS[name], "optimizer": name, "epochs": epochs}
            spec = read_by_optimizer(apply_overrides(spec, args.dp_set))
            specs[name] = spec
            dp_runs[name] = run_dparallel(store, t_feat, name, spec)

    scorer = Scorer(test_s)
    score_n2p2(n2p2_run, scorer, bindir, root / "test.data")
    for run in dp_runs.values():
        score_dparallel(run, scorer)

    n_atoms = sum(len(a) for a in structures)
    print(
        f"CuAu EMT: {len(train_s)} train / {len(test_s)} test structures "
        f"({n_atoms} atoms), 2 processes each, workdir {root}"
    )
    for name, spec in specs.items():
        print(f"dparallel {name} spec: {json.dumps({k: spec[k] for k in sorted(spec)})}")
    print_curve(
        f"n2p2 nnp-train (Kalman; scaling+setup {n2p2_run['setup']:.1f} s)",
        n2p2_run["epochs"],
        1,
    )
    for name, run in dp_runs.items():
        print_curve(
            f"dparallel {name} (featurize {t_feat:.1f} s; train setup included)",
            run["epochs"],
            max(1, len(run["epochs"]) // 15),
        )
    target = n2p2_run["epochs"][-1]["rmse"]
    ne, nf = n2p2_run["nnp_dataset_rmse"]
    print(
        f"\nn2p2 last epoch scored by nnp-dataset: {ne:.2f} meV/atom, {nf:.1f} meV/Å "
        f"(by DeployedModel: {target[0]:.2f}, {target[1]:.1f})"
    )
    goal = f"{target[0]:.2f} meV/atom, {target[1]:.1f} meV/Å"
    print(f"\n| to reach n2p2's final test RMSE ({goal}) | wall | final test RMSE | total wall |")
    print("| --- | ---: | ---: | ---: |")
    rows = [("n2p2 nnp-train (Kalman)", n2p2_run)]
    rows += [(f"dparallel {name}", run) for name, run in dp_runs.items()]
    for label, run in rows:
        e, f = run["epochs"][-1]["rmse"]
        print(
            f"| {label} | {first_reaching(run['epochs'], target)} | {e:.2f} meV/atom, "
            f"{f:.1f} meV/Å | {run['wall']:.1f} s |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
