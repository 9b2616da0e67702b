"""Zarr codecs for featurized partitions: write and read time, compression ratio.

Computes one partition of ``bench_scaling.py``'s data (32-atom Cu cells, 16 ACSF with
per-pair derivatives; float64 dG/dr is ~90 % of the bytes) and writes its arrays, one
chunk each as ``Store.write_partition_arrays`` does, with each candidate codec. Medians of
``--repeats`` rounds, in one process, zarr's codec work on one thread; ratios are against
zarr's default (zstd level 0), measured in the same run. dparallel's store uses the codec
marked ``*``.

    python benchmarks/bench_store_codecs.py [--partition-atoms 4000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def partition_arrays(tmp: Path, partition_atoms: int) -> dict[str, np.ndarray]:
    """Arrays one featurize task writes for the first partition of the benchmark data."""
    import torch
    from bench_scaling import descriptor_set, make_dataset

    from dparallel.io import open_source
    from dparallel.store.plan import plan_partitions

    torch.set_num_threads(1)
    source = open_source(make_dataset(tmp / "cu.extxyz", 2 * max(1, partition_atoms // 32)))
    plan = plan_partitions(source.atom_counts, partition_atoms)
    batch = source.read(int(plan.starts[0]), int(plan.stops[0]))
    arrays = {}
    for name, per_element in descriptor_set(True).compute(batch).items():
        for element, named in per_element.items():
            for key, value in named.items():
                arrays[f"{name}/{element}/{key}"] = np.asarray(value)
    return arrays


def codecs() -> dict[str, object]:
    """Candidate compressor lists by label (``"auto"`` is zarr's default)."""
    from zarr.codecs import BloscCodec, ZstdCodec

    from dparallel.store._store import _NUMERIC_COMPRESSORS

    return {
        "zarr default (zstd 0)": "auto",
        "none": None,
        "blosc lz4 + shuffle *": _NUMERIC_COMPRESSORS,
        "blosc lz4 + bitshuffle": (BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),),
        "blosc zstd 1 + shuffle": (BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"),),
        "zstd 1": (ZstdCodec(level=1),),
    }


def measure(arrays: dict[str, np.ndarray], compressors: object, root: Path, repeats: int):
    """(median write s, median read s, bytes on disk) for writing every array once."""
    import zarr

    writes, reads, size = [], [], 0
    for r in range(repeats):
        group = zarr.open_group(str(root / f"r{r}"), mode="w")
        t0 = time.perf_counter()
        for key, value in arrays.items():
            group.create_array(
                key,
                shape=value.shape,
                dtype=value.dtype,
                chunks=tuple(max(1, s) for s in value.shape),
                compressors=compressors,
            )[...] = value
        writes.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        back = {key: group[key][...] for key in arrays}
        reads.append(time.perf_counter() - t0)
        for key, value in arrays.items():
            if not np.array_equal(back[key], value):
                raise AssertionError(f"{key} did not round-trip")
        chunks = (f for f in (root / f"r{r}").rglob("*") if f.is_file() and f.name != "zarr.json")
        size = sum(f.stat().st_size for f in chunks)
        shutil.rmtree(root / f"r{r}")  # keep the page cache to one round's files
    return statistics.median(writes), statistics.median(reads), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partition-atoms", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("ZARR_THREADING__MAX_WORKERS", "1")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        arrays = partition_arrays(tmp_path, args.partition_atoms)
        raw = sum(a.nbytes for a in arrays.values())
        results = {
            label: measure(arrays, compressors, tmp_path / f"c{i}", args.repeats)
            for i, (label, compressors) in enumerate(codecs().items())
        }
    print(
        f"one partition: {args.partition_atoms} atoms, {len(arrays)} arrays, "
        f"{raw / 2**20:.1f} MiB raw; medians of {args.repeats}"
    )
    base_w, base_r, _ = results["zarr default (zstd 0)"]
    print(
        f"{'codec':26s} {'write ms':>9s} {'MB/s':>7s} {'read ms':>8s} {'ratio':>6s} "
        f"{'write vs default':>17s} {'read vs default':>16s}"
    )
    for label, (w, r, size) in results.items():
        print(
            f"{label:26s} {w * 1e3:>9.1f} {raw / w / 1e6:>7.0f} {r * 1e3:>8.1f} "
            f"{raw / size:>6.2f} {base_w / w:>16.2f}x {base_r / r:>15.2f}x"
        )


if __name__ == "__main__":
    main()
