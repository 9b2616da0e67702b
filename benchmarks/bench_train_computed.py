"""Training from stored dG/dr against descriptors computed per batch: epoch time, store size.

Usage: ``PYTHONPATH=. python benchmarks/bench_train_computed.py [--structures 200]
[--epochs 3] [--device cpu|cuda] [--dtype float64|float32] [--batch-size 8]``.

1. Writes EMT Cu (``write_emt_cu``) and featurizes it twice in this process with the
   training default ACSF (the quickstart workflow's): with dG/dr and without (values only).
   Prints each
   store's size in kB/atom, and that of its ``structures`` group (what
   ``descriptor_source: computed`` reads).
2. Times training epochs on ``--device`` with the same model, batches and optimizer:
   ``stored`` (values + dG/dr read from the store, forces from stored ∂G/∂r) and
   ``graph`` (``descriptor_source: computed``: positions → ACSF graph → forces by
   autograd; neighbour lists built once per partition on the host) and ``kernel``
   (``compute_with: kernel``: values and dG/dr per batch on the host by the compiled
   kernel, then the stored path's forces). The first epoch (reads, caches, neighbour lists) is shown
   apart; the rest give the median epoch time and the ratios to ``stored``.

The loop here is the training step of ``dparallel.train`` (``predict_batch``, ``loss``,
Adam) with every batch moved to ``--device``, so it runs where ``train()`` cannot yet
place a model.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from gpu_results import record


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _featurize(data: Path, store_path: Path, derivatives: bool) -> Any:
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process
    from dparallel.workflow.spec import load_quickstart

    descriptors = DescriptorSet(
        acsf=load_quickstart().descriptors.build().acsf, derivatives=derivatives
    )
    return featurize_in_process(
        data, store_path, descriptors, FeaturizeOptions(partition_atoms=2000, overwrite=True)
    )


def _epochs(
    store: Any, source: str, engine: str, args: argparse.Namespace
) -> tuple[list[float], int]:
    """Seconds of each epoch (``descriptor_source``, ``compute_with``) on the device; n train."""
    import torch

    from dparallel.train import TrainingSpec
    from dparallel.train.batch import batch_to
    from dparallel.train.data import PartitionReader
    from dparallel.train.device import Target
    from dparallel.train.feed import BatchFeed
    from dparallel.train.objective import loss, predict_batch
    from dparallel.train.preparation import build_model, prepare
    from dparallel.train.structure_data import StructureReader

    device = torch.device(args.device)
    spec = TrainingSpec(
        descriptor_source=source,
        compute_with=engine,
        batch_size=args.batch_size,
        dtype=args.dtype,
        threads=0,
    )
    prep = prepare(store, spec)
    feed = BatchFeed(Target.of(spec))
    model = build_model(prep, spec, feed.target).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=spec.lr)
    cache = 8 * 2**30
    if source == "computed":
        reader: PartitionReader = StructureReader(
            store, spec.descriptor, prep.descriptor_spec or {}, prep.elements, prep.index,
            True, cache, engine,
        )  # fmt: skip
    else:
        reader = PartitionReader(store, spec.descriptor, prep.elements, prep.index, True, cache)
    times = []
    for epoch in range(args.epochs):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for batch in feed.batches(reader, "train", spec, epoch=epoch):
            batch = batch_to(batch, device)
            opt.zero_grad(set_to_none=True)
            e, f = predict_batch(model, batch, True, create_graph=True)
            value = loss(e, f, batch, spec.force_weight)
            value.backward()
            opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return times, prep.index.count("train")


def main() -> None:
    """Run the benchmark and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--structures", type=int, default=200)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument(
        "--skip", nargs="*", default=[], choices=("stored", "graph", "kernel"), help="rows"
    )
    parser.add_argument("--workdir", default="/tmp/dparallel-bench-train-computed")
    args = parser.parse_args()

    import torch

    from dparallel.datasets import write_emt_cu

    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    data = write_emt_cu(work / f"cu{args.structures}.xyz", args.structures)
    stores = {}
    print(f"{'store':<16} {'featurize s':>11} {'kB/atom':>9} {'structures kB/atom':>19}")
    for name, deriv in (("with dG/dr", True), ("values only", False)):
        path = work / f"cu{args.structures}-{'d' if deriv else 'v'}.zarr"
        t0 = time.perf_counter()
        stores[name] = _featurize(data, path, deriv)
        seconds = time.perf_counter() - t0
        n_atoms = stores[name].n_atoms
        total = _dir_bytes(path) / n_atoms / 1e3
        structs = _dir_bytes(path / "structures") / n_atoms / 1e3
        print(f"{name:<16} {seconds:>11.1f} {total:>9.2f} {structs:>19.2f}")
    sizes = {n: _dir_bytes(Path(s.path)) for n, s in stores.items()}
    print(f"store with dG/dr / values only: {sizes['with dG/dr'] / sizes['values only']:.1f}x")
    print()
    gpu = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(f"device {args.device} ({gpu}), "
          f"{args.dtype}, {stores['with dG/dr'].n_structures} structures, "
          f"{stores['with dG/dr'].n_atoms} atoms, batch {args.batch_size}, torch threads "
          f"{torch.get_num_threads()}")  # fmt: skip
    print(f"{'training':<10} {'first epoch s':>13} {'median epoch s':>15} {'structures/s':>13}")
    med = {}
    runs = (
        ("stored", "stored", "graph", stores["with dG/dr"]),
        ("graph", "computed", "graph", stores["values only"]),
        ("kernel", "computed", "kernel", stores["values only"]),
    )
    for name, source, engine, store in runs:
        if name in args.skip:
            continue
        times, n_train = _epochs(store, source, engine, args)
        rest = times[1:] or times
        med[name] = statistics.median(rest)
        print(f"{name:<10} {times[0]:>13.2f} {med[name]:>15.3f} "
              f"{n_train / med[name]:>13.1f}")  # fmt: skip
    ratios = {}
    for name in ("graph", "kernel"):
        if name in med and "stored" in med:
            ratios[name] = med[name] / med["stored"]
            print(f"computed ({name}) / stored epoch time: {ratios[name]:.2f}x")
    if args.device.startswith("cuda"):
        record(
            f"train_computed_{args.device.split(':')[0]}_{args.dtype}",
            {"structures": args.structures, "batch_size": args.batch_size,
             "median_epoch_s": med, "epoch_ratio_to_stored": ratios},
        )  # fmt: skip


if __name__ == "__main__":
    main()
