"""Training benchmark on the EMT Cu dataset: throughput, peak RSS and achieved accuracy.

Usage: ``PYTHONPATH=. python benchmarks/bench_train.py [--structures 400] [--epochs N]``.

1. Writes the dataset (``write_emt_cu``) and a featurized store (the quickstart workflow's ACSF with
   derivatives) under ``--workdir``; uses ``dparallel.workflow.featurize`` when present,
   else the in-process featurizer of tests/train/_store_fixture.py (same layout).
2. Peers, 4 epochs each, same store: float64 energy+forces (the default), float32
   energy+forces, float64 energy only → structures/s and ratios.
3. The full default training run; prints held-out (test) RMSEs against the issue-6
   targets (energy ≤ 2 meV/atom, forces ≤ 60 meV/Å).
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _featurize(data: Path, store_path: Path):  # noqa: ANN202
    """Featurize in this process (no Dask): the featurize time row is the kernels' time."""
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
    from dparallel.workflow.spec import load_quickstart

    descriptors = DescriptorSet(acsf=load_quickstart().descriptors.build().acsf, derivatives=True)
    return featurize_in_process(
        data, store_path, descriptors, FeaturizeOptions(partition_atoms=2000)
    )


def main() -> None:
    """Run the benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", type=int, default=400)
    parser.add_argument("--epochs", type=int, default=None, help="override the default")
    parser.add_argument("--workdir", default="/tmp/dparallel-bench-train")
    args = parser.parse_args()

    import torch

    from dparallel.datasets import write_emt_cu
    from dparallel.train import TrainingSpec, train

    work = Path(args.workdir)
    t0 = time.perf_counter()
    data = write_emt_cu(work / f"cu{args.structures}.xyz", args.structures)
    t_data = time.perf_counter() - t0
    t0 = time.perf_counter()
    store = _featurize(data, work / f"cu{args.structures}.zarr")
    t_feat = time.perf_counter() - t0
    print(f"dataset {args.structures} structures, {store.n_atoms} atoms: "
          f"generate {t_data:.1f} s, featurize {t_feat:.1f} s")  # fmt: skip

    peers = [
        ("float64, energy+forces", {}),
        ("float32, energy+forces", {"dtype": "float32"}),
        ("float64, energy only", {"force_weight": 0.0}),
    ]
    print(f"\n{'peer (4 epochs)':28s} {'structures/s':>13s} {'ratio':>7s}")
    base = None
    for name, upd in peers:
        spec = TrainingSpec(**{**TrainingSpec().to_dict(), "epochs": 4, **upd})
        res = train(store, work / "peer", spec)
        secs = sum(r["seconds"] for r in res.history[1:])  # first epoch warms the cache
        n = len(res.history[1:]) * _n_train(work / "peer")
        rate = n / secs
        base = base or rate
        print(f"{name:28s} {rate:13.1f} {rate / base:7.2f}")

    spec = TrainingSpec()
    if args.epochs:
        spec = TrainingSpec(**{**spec.to_dict(), "epochs": args.epochs})
    t0 = time.perf_counter()
    res = train(store, work / "model", spec)
    t_train = time.perf_counter() - t0
    n_train = _n_train(work / "model")
    rate = n_train * len(res.history) / sum(r["seconds"] for r in res.history)
    e, f = res.test["energy_rmse"] * 1e3, res.test["force_rmse"] * 1e3
    print(f"\nfull run: {len(res.history)} epochs, {t_train:.1f} s "
          f"(torch threads {torch.get_num_threads()}), {rate:.1f} structures/s with forces, "
          f"peak RSS {_peak_rss_mb():.0f} MiB")  # fmt: skip
    print(f"{'held-out (test)':16s} {'achieved':>10s} {'target':>8s}  ok")
    print(f"{'energy meV/atom':16s} {e:10.2f} {2.0:8.1f}  {e <= 2.0}")
    print(f"{'force meV/Å':16s} {f:10.1f} {60.0:8.1f}  {f <= 60.0}")


def _n_train(model_dir: Path) -> int:
    import json

    return int(json.loads((model_dir / "metrics.json").read_text())["splits"]["train"])


if __name__ == "__main__":
    main()
