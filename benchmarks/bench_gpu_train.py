"""Training on the GPU against the CPU: the same store and spec on each device, in one run.

Data: bench_train_n2p2's EMT CuAu cells (32 atoms, rattled and strained) — 10× as many
(3,000 by default), split into train.data and test.data; one n2p2 ``input.nn`` gives the
symmetry functions and the network (``InputNN.training_options()``, n2p2's scalecenter
scaling, 15-15 tanh), featurized once with derivatives (``dparallel featurize``).

Then, on every device present — the CPU with all its cores (``threads: 0``), and each run
on the GPU with the store's arrays held on it (``data_on_device: true``) and, unless
``--quick``, streamed through the prefetch thread (``data_on_device: false``) — the same
first-order spec (Adam, cosine schedule, force-weight schedule; docs/training.md) trains
and each epoch's model is scored on test.data. Printed per run: mean epoch time, atoms/s,
the share of the epoch spent waiting for data, peak device memory, final test RMSEs and
the training time until both test RMSEs reach the target: n2p2's final test RMSE
(``--n2p2`` runs nnp-train on the same data; else ``--target E,F`` in meV/atom, meV/Å,
by default what bench_train_n2p2 measured for nnp-train on its 300 cells).

Without a GPU it runs on the CPU alone and says so.

    python benchmarks/bench_gpu_train.py [--quick] [--structures 3000] [--epochs 200]
        [--target 6.93,137.0 | --n2p2] [--dp-set key=value ...] [--workdir DIR]

``--quick`` (200 cells, 15 epochs) finishes in about two minutes on a small CPU machine.
``--profile RUN`` (e.g. ``--profile "cuda (streamed)"``) trains that run's spec two more
epochs and prints where the second one's time went (``torch.profiler``: own CPU and
device time per operation and kernel), recorded as ``profile_train_…``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_train_n2p2 import (
    Scorer,
    cuau_structures,
    first_reaching,
    input_nn,
    n2p2_bin,
    reaching,
    run_n2p2,
    score_n2p2,
    timed,
    write_data,
)
from gpu_profile import print_rows, table
from gpu_results import record
from water_example import WATER

#: nnp-train's final test RMSE on bench_train_n2p2's 300 cells (meV/atom, meV/Å).
N2P2_TARGET = (6.93, 137.0)

#: The first-order settings (docs/training.md, "First-order training against n2p2's accuracy").
FIRST_ORDER = {
    "optimizer": "adam",
    "schedule": "cosine",
    "lr": 3e-3,
    "lr_min": 1e-5,
    "force_weight": 0.01,
    "force_weight_start": 3.0,
    "batch_size": 8,
}


def _runs(quick: bool, epochs: int, cpu_epochs: int, streamed_epochs: int) -> list:
    """(label, spec changes) of each run: the CPU, then the GPU held and streamed
    (``cpu_epochs`` and ``streamed_epochs``, 0 = ``epochs``, bound those two runs)."""
    import torch

    cpu = {"device": "cpu", "threads": 0, "data_on_device": "auto"}
    runs = [("cpu", {**cpu, "epochs": cpu_epochs or epochs})]
    if torch.cuda.is_available():
        runs.append(("cuda (data held)", {"device": "cuda", "data_on_device": True}))
        if not quick:
            streamed = {"device": "cuda", "data_on_device": False}
            runs.append(("cuda (streamed)", {**streamed, "epochs": streamed_epochs or epochs}))
    return runs


def stage_water(root: Path, copies: int, water: Path) -> None:
    """train.data = n2p2's water example × ``copies``; its input.nn in root/n2p2."""
    (root / "train.data").write_text((water / "input.data").read_text() * copies)
    (root / "n2p2").mkdir(exist_ok=True)
    (root / "n2p2" / "input.nn").write_text((water / "input.nn").read_text())


def featurize(root: Path, partition_atoms: int, workers: int) -> tuple[Path, float]:
    """``python -m dparallel featurize`` of train.data with the input.nn (``workers`` processes)."""
    work = root / "dparallel"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    (work / "input.nn").write_text((root / "n2p2" / "input.nn").read_text())
    (work / "d.yaml").write_text("acsf: {n2p2: input.nn}\n")
    cmd = [sys.executable, "-m", "dparallel", "featurize", str(root / "train.data")]
    cmd += ["--format", "n2p2", "--descriptors", "d.yaml", "--local", str(workers)]
    cmd += ["--derivatives", "-o", "store.zarr", "--partition-atoms", str(partition_atoms), "-q"]
    return work / "store.zarr", timed(cmd, work)


def _peak_host_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def train_run(store: Path, work: Path, spec_dict: dict, scorer: Scorer | None) -> dict:
    """Train once (in this process), keeping each epoch's weights; score them afterwards."""
    import torch

    from dparallel.descriptors import ACSF
    from dparallel.train import TrainingSpec, load_model, train

    shutil.rmtree(work, ignore_errors=True)
    (work / "epochs").mkdir(parents=True)
    spec = TrainingSpec(**spec_dict)
    if spec.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    rows: list[dict] = []
    weights: list[dict] = []
    first: list[float] = []

    def keep(row: dict) -> None:
        if not first:
            first.append(time.perf_counter())
        rows.append(dict(row))
        ck = torch.load(work / "model" / "checkpoint.pt", weights_only=True)
        weights.append(ck["model"])

    t0 = time.perf_counter()
    result = train(store, work / "model", spec, callback=keep)
    wall = time.perf_counter() - t0
    metrics = json.loads((work / "model" / "metrics.json").read_text())
    model, info = load_model(work / "model")
    acsf = ACSF.from_dict(info["descriptor"])
    # set-up (preparation, data onto the device) before the first epoch counts too
    setup = first[0] - t0 - rows[0]["seconds"]
    epochs = []
    cum = setup
    for row, state in zip(rows, weights, strict=True):
        cum += row["seconds"]
        if scorer is not None:
            model.load_state_dict(state)
        rmse = scorer(acsf, model) if scorer is not None else None
        epochs.append({"epoch": row["epoch"] + 1, "seconds": cum, "rmse": rmse})
    device = metrics.get("device", {})
    peak = device.get("peak_memory_bytes")
    return {
        "epochs": epochs,
        "rows": rows,
        "wall": wall,
        "setup": setup,
        "n_train": metrics["splits"]["train"],
        "best_epoch": result.best_epoch,
        "data_on_device": device.get("data_on_device"),
        "peak_bytes": peak if peak is not None else _peak_host_bytes(),
        "peak_kind": "device" if peak is not None else "host RSS",
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--structures", type=int, default=3000, help="CuAu cells (3000)")
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--nodes", type=int, default=15)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--target", default=None, help="E,F test RMSE (meV/atom, meV/Å)")
    parser.add_argument("--n2p2", action="store_true", help="run nnp-train for the target")
    parser.add_argument("--n2p2-epochs", type=int, default=8)
    parser.add_argument("--dp-set", action="append", default=[], help="TrainingSpec key=value")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--quick", action="store_true", help="200 cells, 15 epochs, no n2p2")
    water_help = "train on n2p2's water example × COPIES instead (epoch times only)"
    parser.add_argument("--water", type=int, default=0, metavar="COPIES", help=water_help)
    parser.add_argument("--water-dir", type=Path, default=None, help="n2p2 water example folder")
    parser.add_argument("--cpu-epochs", type=int, default=0, help="epochs of the CPU run (all)")
    parser.add_argument("--streamed-epochs", type=int, default=0, help="epochs streamed (all)")
    parser.add_argument("--batch-sizes", default="", help="with --water: e.g. 8,64,450")
    sync_help = "with --water and a GPU: one more held epoch under torch's sync debug mode"
    parser.add_argument("--sync-debug", action="store_true", help=sync_help)
    parser.add_argument(
        "--profile", action="append", default=[], metavar="RUN",
        help="profile the second epoch of this run ('cpu', 'cuda (data held)', "
        "'cuda (streamed)'; repeatable) under torch.profiler",
    )  # fmt: skip
    args = parser.parse_args()
    if args.quick:
        args.structures, args.epochs, args.n2p2 = 200, 15, False
    if args.water:
        return water_main(args)

    import torch

    from dparallel.config import apply_overrides
    from dparallel.n2p2 import read_input_nn
    from dparallel.train.optimizer_kinds import read_by_optimizer

    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-gpu-train-"))
    root.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    print(
        f"devices: cpu ({os.cpu_count()} cores)"
        + (f", cuda:0 ({gpu})" if gpu else " only: no CUDA device here, the GPU runs are skipped")
    )
    t0 = time.perf_counter()
    structures = cuau_structures(args.structures, seed=args.seed)
    n_test = max(1, round(args.test_fraction * len(structures)))
    train_s, test_s = structures[:-n_test], structures[-n_test:]
    write_data(root / "train.data", train_s)
    write_data(root / "test.data", test_s)
    (root / "n2p2").mkdir(exist_ok=True)
    nn = input_nn(args.nodes, args.n2p2_epochs, args.seed)
    (root / "n2p2" / "input.nn").write_text(nn)
    print(
        f"data: {len(train_s)} train / {len(test_s)} test cells ({time.perf_counter() - t0:.1f} s)"
    )

    target = N2P2_TARGET
    source = "bench_train_n2p2's nnp-train on 300 cells"
    scorer = Scorer(test_s)
    if args.target:
        target = tuple(float(x) for x in args.target.split(","))  # type: ignore[assignment]
        source = "--target"
    elif args.n2p2:
        bindir = n2p2_bin()
        if bindir is None:
            print("n2p2 is not built (../shared/n2p2/build.sh): using the default target")
        else:
            n2p2_run = run_n2p2(root, nn, bindir)
            score_n2p2(n2p2_run, scorer, bindir, root / "test.data")
            target = n2p2_run["epochs"][-1]["rmse"]
            source = f"nnp-train on this data ({n2p2_run['wall']:.1f} s, 2 MPI ranks)"
    train_atoms = sum(len(a) for a in train_s)
    workers = max(1, min(8, (os.cpu_count() or 2) // 2))
    store, t_feat = featurize(root, -(-train_atoms // (2 * workers)), workers)
    print(f"featurized {train_atoms} atoms with derivatives in {t_feat:.1f} s")

    base = read_input_nn(root / "n2p2" / "input.nn").training_options()
    base.update(validation_fraction=0.1, test_fraction=0.0, epochs=args.epochs, **FIRST_ORDER)
    results = {}
    for label, changes in _runs(args.quick, args.epochs, args.cpu_epochs, args.streamed_epochs):
        spec = read_by_optimizer(apply_overrides({**base, **changes}, args.dp_set))
        results[label] = train_run(store, root / label.split()[0], spec, scorer)
        r = results[label]
        print(f"{label}: {len(r['epochs'])} epochs in {r['wall']:.1f} s", flush=True)

    _profiled_runs(args, base, store, root)
    atoms_per_cell = train_atoms / len(train_s)
    goal = f"{target[0]:.2f} meV/atom, {target[1]:.1f} meV/Å"
    print(f"\nspec: {json.dumps({k: spec[k] for k in sorted(spec) if not k.startswith('kalman')})}")
    print(f"target: {goal} ({source})")
    print(
        "\n| run | epoch s (mean) | atoms/s | data wait | peak memory | final test RMSE "
        "| time to target (set-up + epochs) |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, r in results.items():
        secs = np.array([row["seconds"] for row in r["rows"]])
        steady = secs[1:] if secs.size > 1 else secs
        wait = np.mean([row.get("data_wait_fraction", float("nan")) for row in r["rows"]])
        e, f = r["epochs"][-1]["rmse"]
        atoms_per_s = r["n_train"] * atoms_per_cell / float(steady.mean())
        print(
            f"| {label} | {steady.mean():.3f} | {atoms_per_s:,.0f} | {100 * wait:.1f}% | "
            f"{r['peak_bytes'] / 2**20:,.0f} MiB ({r['peak_kind']}) | {e:.2f} meV/atom, "
            f"{f:.1f} meV/Å | {first_reaching(r['epochs'], target)} |"
        )
    figures = summarize(results, atoms_per_cell, target)
    for label, fig in figures.items():
        if label != "cpu":
            print(f"{label}: epoch {fig['epoch_speedup_vs_cpu']:.1f}x faster than the CPU")
    project_cpu(figures)
    record(
        f"train_cuau_{args.structures}_{spec['optimizer']}",
        {
            "target_rmse": {"energy_mev_atom": target[0], "force_mev_a": target[1],
                            "source": source},
            "spec": {k: spec[k] for k in sorted(spec) if not k.startswith("kalman")},
            "featurize_s": t_feat,
            "runs": figures,
        },
    )  # fmt: skip
    print(f"\nworkdir {root}; total {time.perf_counter() - t0:.1f} s")
    return 0


def summarize(results: dict, atoms_per_cell: float, target: tuple[float, float] | None) -> dict:
    """Per run: steady epoch seconds (epochs after the first), atoms/s, data wait, peak
    memory, final RMSE, time to ``target`` and the epoch speed-up over the CPU run."""
    out: dict[str, dict] = {}
    for label, r in results.items():
        secs = np.array([row["seconds"] for row in r["rows"]])
        steady = float((secs[1:] if secs.size > 1 else secs).mean())
        out[label] = {
            "epochs": len(r["rows"]),
            "first_epoch_s": float(secs[0]),
            "epoch_s": steady,
            "setup_s": r["setup"],
            "atoms_per_s": r["n_train"] * atoms_per_cell / steady,
            "data_wait_fraction": float(
                np.mean([row.get("data_wait_fraction", np.nan) for row in r["rows"]])
            ),
            "data_on_device": r["data_on_device"],
            "peak_bytes": r["peak_bytes"],
            "peak_kind": r["peak_kind"],
            "final_test_rmse": r["epochs"][-1]["rmse"],
            "reached_target": reaching(r["epochs"], target) if target else None,
        }
    cpu = out.get("cpu", {}).get("epoch_s")
    for fig in out.values():
        fig["epoch_speedup_vs_cpu"] = cpu / fig["epoch_s"] if cpu else None
    return out


def project_cpu(figures: dict) -> None:
    """Where the CPU ran fewer epochs than a GPU run needed to reach the target: the CPU's
    time to it at the same epoch (same spec and seed), set-up plus that many measured mean
    epochs, labelled a projection."""
    cpu, held = figures.get("cpu"), figures.get("cuda (data held)")
    if not cpu or not held or not held["reached_target"] or cpu["reached_target"]:
        return
    n = held["reached_target"]["epoch"]
    mean = (cpu["first_epoch_s"] + cpu["epoch_s"] * (cpu["epochs"] - 1)) / cpu["epochs"]
    projected = cpu["setup_s"] + n * mean
    cpu["projected_time_to_target_s"] = projected
    ratio = projected / held["reached_target"]["seconds"]
    held["time_to_target_speedup_vs_cpu_projected"] = ratio
    print(
        f"CPU to the target at epoch {n} (projected from its {cpu['epochs']} measured "
        f"epochs): {projected:.1f} s, {ratio:.1f}x the GPU's time"
    )


def water_main(args: argparse.Namespace) -> int:
    """Epoch time, atoms/s and data wait on n2p2's water example × ``--water``."""
    import torch

    from dparallel.config import apply_overrides
    from dparallel.n2p2 import read_input_nn
    from dparallel.train.optimizer_kinds import read_by_optimizer

    water = args.water_dir or WATER
    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-gpu-train-water-"))
    root.mkdir(parents=True, exist_ok=True)
    stage_water(root, args.water, water)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    workers = max(1, min(8, (os.cpu_count() or 2) // 2))
    from dparallel.io import open_source

    source = open_source(root / "train.data", "n2p2", cache_index=False)
    atoms = int(sum(source.read(0, len(source)).atom_counts))
    store, t_feat = featurize(root, -(-atoms // (2 * workers)), workers)
    print(f"water x{args.water}: {len(source)} structures, {atoms} atoms; {os.cpu_count()} "
          f"CPUs, {gpu}; featurized with dG/dr in {t_feat:.1f} s")  # fmt: skip
    base = read_input_nn(root / "n2p2" / "input.nn").training_options()
    base.update(validation_fraction=0.1, test_fraction=0.0, epochs=args.epochs, **FIRST_ORDER)
    sizes = [int(b) for b in args.batch_sizes.split(",")] if args.batch_sizes else [None]
    for size in sizes:
        if size is not None:
            base["batch_size"] = size
        results = {}
        for label, changes in _runs(False, args.epochs, args.cpu_epochs, args.streamed_epochs):
            spec = read_by_optimizer(apply_overrides({**base, **changes}, args.dp_set))
            results[label] = train_run(store, root / label.split()[0], spec, None)
            print(f"batch {spec['batch_size']}, {label}: {len(results[label]['rows'])} epochs "
                  f"in {results[label]['wall']:.1f} s", flush=True)  # fmt: skip
        figures = summarize(results, atoms / len(source), None)
        print(f"\nbatch_size {spec['batch_size']}")
        print("| run | epoch s | atoms/s | data wait | peak memory | x CPU epoch |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for label, f in figures.items():
            print(f"| {label} | {f['epoch_s']:.3f} | {f['atoms_per_s']:,.0f} | "
                  f"{100 * f['data_wait_fraction']:.1f}% | {f['peak_bytes'] / 2**20:,.0f} MiB "
                  f"({f['peak_kind']}) | {f['epoch_speedup_vs_cpu']:.1f} |")  # fmt: skip
        record(
            f"train_water_x{args.water}_b{spec['batch_size']}",
            {"atoms": atoms, "structures": len(source), "featurize_s": t_feat,
             "spec": {k: spec[k] for k in sorted(spec) if not k.startswith("kalman")},
             "runs": figures},
        )  # fmt: skip
    _profiled_runs(args, base, store, root)
    if args.sync_debug and torch.cuda.is_available():
        held = read_by_optimizer(apply_overrides(
            {**base, "device": "cuda", "data_on_device": True, "epochs": 1}, args.dp_set
        ))  # fmt: skip
        sync_report(store, root / "sync", held)
    return 0


def profile_epoch(store: Path, work: Path, spec: dict, label: str) -> None:
    """Train two epochs of ``spec`` and profile the second (its steps, validation and
    checkpoint; the first carries the set-up): print and record where its time went."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from dparallel.train import TrainingSpec, train

    cuda = str(spec["device"]).startswith("cuda") and torch.cuda.is_available()
    prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []))
    rows: list[dict] = []

    def at_epoch_end(row: dict) -> None:
        rows.append(dict(row))
        if cuda:
            torch.cuda.synchronize()
        if len(rows) == 1:
            prof.start()
        elif len(rows) == 2:
            prof.stop()

    shutil.rmtree(work, ignore_errors=True)
    train(store, work / "model", TrainingSpec(**{**spec, "epochs": 2}), callback=at_epoch_end)
    top, device_ms = table(prof, cuda)
    epoch = rows[-1]
    wait = epoch.get("data_wait_fraction", float("nan"))
    print(f"\n--profile {label!r}, batch {spec['batch_size']}: second epoch "
          f"{epoch['seconds']:.3f} s, data wait {wait:.1%}, "
          f"device time of all kernels {device_ms:.1f} ms")  # fmt: skip
    print_rows(top)
    record(
        f"profile_train_{label.split()[0]}_{label.split('(')[-1].rstrip(')').replace(' ', '_')}"
        f"_b{spec['batch_size']}",
        {"epoch": epoch, "device_ms_total": device_ms, "rows": top},
    )


def _profiled_runs(args: argparse.Namespace, base: dict, store: Path, root: Path) -> None:
    """``--profile LABEL``: one profiled epoch of each named run (labels of :func:`_runs`)."""
    from dparallel.config import apply_overrides
    from dparallel.train.optimizer_kinds import read_by_optimizer

    runs = dict(_runs(False, args.epochs, args.cpu_epochs, args.streamed_epochs))
    for label in args.profile:
        if label not in runs:
            print(f"--profile {label!r}: no such run here (runs: {', '.join(runs)})")
            continue
        spec = read_by_optimizer(apply_overrides({**base, **runs[label]}, args.dp_set))
        profile_epoch(store, root / "profile", spec, label)


def sync_report(store: Path, work: Path, spec: dict) -> None:
    """Train one epoch with ``torch.cuda.set_sync_debug_mode("warn")``: print and record
    where the host waited for the device (each distinct place, with its count)."""
    import traceback
    import warnings

    import torch

    places: dict[str, int] = {}

    def seen(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        stack = [f for f in traceback.extract_stack()[:-1] if "/dparallel/" in f.filename]
        where = f"{stack[-1].filename.split('/dparallel/')[-1]}:{stack[-1].lineno}" if stack else (
            f"{filename}:{lineno}")  # fmt: skip
        places[where] = places.get(where, 0) + 1

    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.showwarning = seen
            train_run(store, work, spec, None)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    print(f"\nsynchronisations in one held epoch (with validation): {sum(places.values())}")
    for where, n in sorted(places.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {n:6d}  {where}")
    record("train_sync_points", {"batch_size": spec["batch_size"], "places": places})


if __name__ == "__main__":
    sys.exit(main())
