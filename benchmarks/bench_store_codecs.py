"""Layouts and codecs for per-pair derivatives: bytes per atom, write and read speed.

Computes the ACSF of one partition of n2p2's water example (``../shared/n2p2/water``,
``acsf: {n2p2: input.nn}``, with dG/dr; ~93 neighbours per atom, 27-30 functions per
element) and writes its arrays as a featurize task does, with each candidate layout and
codec: format 1 (float64 dG/dr, pair-major, as computed), float32 pair-major, float32
feature-major, and format 3 (``dparallel.store._derivatives``: float32, radial columns as
one number per pair, feature-major, all columns in one array; its feature index and
radial flags, attributes in the store, are written here as arrays), one chunk per array
or chunks of 2^16 pairs.
Write time includes the layout's encoding; MB/s counts the format-1 (logical float64)
bytes, so the columns compare like with like. Rounds are interleaved over candidates and
medians reported; zarr's codec work runs on one thread (as in a 1-thread worker). Without
the water example it falls back to ``bench_scaling.py``'s Cu data (say so in the table).
dparallel's store uses the row marked ``*``.

    python benchmarks/bench_store_codecs.py [--atoms 4000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Callable

WATER = Path(__file__).resolve().parents[2] / "shared" / "n2p2" / "water"

Arrays = dict[str, np.ndarray]


def partition_arrays(tmp: Path, atoms: int) -> tuple[str, int, Arrays]:
    """(data label, atoms, arrays a featurize task hands the store) for one partition."""
    import torch

    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.io import open_source
    from dparallel.n2p2 import acsf_from_input_nn

    torch.set_num_threads(1)
    if (WATER / "input.data").is_file():
        one = (WATER / "input.data").read_text()
        copies = 1 + atoms // 2064  # the example has 2,064 atoms
        (tmp / "input.data").write_text(one * copies)
        source = open_source(tmp / "input.data", "n2p2", cache_index=False)
        dset = DescriptorSet(acsf=acsf_from_input_nn(str(WATER / "input.nn")), derivatives=True)
        label = "n2p2 water, acsf {n2p2: input.nn}"
    else:
        from bench_scaling import descriptor_set, make_dataset

        source = open_source(make_dataset(tmp / "cu.extxyz", 2 * max(1, atoms // 32)))
        dset = descriptor_set(True)
        label = "Cu (water example missing)"
    counts = np.cumsum(source.atom_counts)
    stop = int(np.searchsorted(counts, atoms)) + 1
    batch = source.read(0, min(stop, len(source)))
    # Copies of the same structures would give byte-identical derivatives, which a codec
    # with a long window (zstd) "compresses" away: rattle every atom by ~0.01 Å.
    noise = np.random.default_rng(0).normal(0.0, 0.01, batch.positions.shape)
    batch = dataclasses.replace(batch, positions=batch.positions + noise)
    arrays = {}
    for name, per_element in dset.compute(batch).items():
        for element, named in per_element.items():
            for key, value in named.items():
                arrays[f"{name}/{element}/{key}"] = np.asarray(value)
    return label, batch.n_atoms, arrays


def _blocks(arrays: Arrays, encode: Callable[[Arrays], Arrays]) -> Arrays:
    """Apply a layout's ``encode`` to every ``…/d/<F>`` block; other arrays unchanged."""
    out: Arrays = {}
    blocks: dict[str, Arrays] = {}
    for key, value in arrays.items():
        head, _, name = key.rpartition("/")
        if "/d/" in key:
            blocks.setdefault(head, {})[name] = value
        else:
            out[key] = value
    for head, block in blocks.items():
        out.update({f"{head}/{k}": v for k, v in encode(block).items()})
    return out


def _float32(block: Arrays, feature_major: bool) -> Arrays:
    out = dict(block)
    for name in ("pair_first", "pair_second", "center"):
        out[name] = block[name].astype(np.int32)
    out["vectors"] = block["vectors"].astype(np.float32)
    dg = block["dG_dr"].astype(np.float32)
    out["dG_dr"] = np.ascontiguousarray(dg.transpose(1, 2, 0)) if feature_major else dg
    return out


#: The layout dparallel's store writes.
FORMAT = "format 3 (f32, radial, f-major)"


def layouts() -> dict[str, Callable[[Arrays], Arrays]]:
    """Layout label → encoder of one derivative block."""
    from dparallel.store._derivatives import encode_pairs

    return {
        "format 1 (f64, pair-major)": dict,
        "f32 pair-major": lambda b: _float32(b, False),
        "f32 feature-major": lambda b: _float32(b, True),
        FORMAT: encode_pairs,
    }


def codecs() -> dict[str, object]:
    """Candidate compressor lists by label (``"auto"`` is zarr's default, zstd level 0);
    a callable picks them by dtype (dparallel's store: LZ4 for numbers, default for strings)."""
    from zarr.codecs import BloscCodec, ZstdCodec

    from dparallel.store._layout import _compressors

    return {
        "dparallel (by dtype)": _compressors,
        "none": None,
        "zarr default": "auto",
        "blosc lz4 shuffle": (BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),),
        "blosc lz4:1 shuffle": (BloscCodec(cname="lz4", clevel=1, shuffle="shuffle"),),
        "blosc lz4:9 shuffle": (BloscCodec(cname="lz4", clevel=9, shuffle="shuffle"),),
        "blosc lz4 bitshuffle": (BloscCodec(cname="lz4", clevel=5, shuffle="bitshuffle"),),
        "blosc zstd1 shuffle": (BloscCodec(cname="zstd", clevel=1, shuffle="shuffle"),),
        "zstd 1": (ZstdCodec(level=1),),
    }


def _write(group, arrays: Arrays, compressors: object, chunk: int | None) -> None:  # noqa: ANN001
    for key, value in arrays.items():
        shape = tuple(max(1, s) for s in value.shape)
        if chunk is not None and value.ndim and value.shape[-1] > chunk:
            shape = (*shape[:-1], chunk)  # feature-major arrays end with the pair axis
        chosen = compressors(value.dtype) if callable(compressors) else compressors
        group.create_array(
            key, shape=value.shape, dtype=value.dtype, chunks=shape, compressors=chosen
        )[...] = value


def one_round(
    arrays: Arrays, encode: Callable, compressors: object, chunk: int | None, root: Path
) -> tuple[float, float, int]:
    """(write s incl. encoding, read s, bytes on disk) for one partition."""
    import zarr

    group = zarr.open_group(str(root), mode="w")
    t0 = time.perf_counter()
    stored = _blocks(arrays, encode)
    _write(group, stored, compressors, chunk)
    write = time.perf_counter() - t0
    t0 = time.perf_counter()
    for key in stored:
        group[key][...]
    read = time.perf_counter() - t0  # stored arrays only: format 3's decoding is not in it
    chunks = (f for f in root.rglob("*") if f.is_file() and f.name != "zarr.json")
    size = sum(f.stat().st_size for f in chunks)
    shutil.rmtree(root)
    return write, read, size


def candidates() -> list[tuple[str, str, Callable, object, int | None]]:
    """(layout, codec, encoder, compressors, pair chunk) rows; format 1 with its codec first."""
    lay, cod = layouts(), codecs()
    rows = [("format 1 (f64, pair-major)", "blosc lz4 shuffle", None)]
    rows += [("f32 pair-major", c, None) for c in ("blosc lz4 shuffle", "blosc lz4 bitshuffle")]
    rows += [("f32 feature-major", c, None) for c in ("blosc lz4 shuffle", "blosc zstd1 shuffle")]
    rows += [(FORMAT, c, None) for c in cod]
    rows += [(FORMAT, "dparallel (by dtype)", 2**16)]
    return [(lab, c, lay[lab], cod[c], chunk) for lab, c, chunk in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--atoms", type=int, default=4000, help="atoms of the partition")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("ZARR_THREADING__MAX_WORKERS", "1")
    from dparallel.store._derivatives import encode_pairs
    from dparallel.store._layout import _compressors

    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        label, n_atoms, arrays = partition_arrays(tmp_path, args.atoms)
        rows = candidates()
        encode_pairs({k.rsplit("/", 1)[1]: v for k, v in arrays.items() if "/d/" in k})  # jit
        times: dict[int, list[tuple[float, float, int]]] = {i: [] for i in range(len(rows))}
        for _ in range(args.repeats):  # interleaved: load changes hit every candidate alike
            for i, (_, _, encode, compressors, chunk) in enumerate(rows):
                times[i].append(one_round(arrays, encode, compressors, chunk, tmp_path / f"r{i}"))
    raw = sum(a.nbytes for a in arrays.values())
    print(
        f"one partition: {label} (rattled by 0.01 Å), {n_atoms} atoms, "
        f"{raw / n_atoms / 1e3:.1f} kB/atom as computed (float64); medians of "
        f"{args.repeats} interleaved rounds; MB/s of those bytes"
    )
    print(
        f"{'layout':32s} {'codec':21s} {'chunk':>6s} {'kB/atom':>8s} {'write ms':>9s} "
        f"{'MB/s':>6s} {'read ms':>8s} {'size vs f1':>10s} {'write vs f1':>11s}"
    )
    base = None
    for i, (lab, codec, _, compressors, chunk) in enumerate(rows):
        w = statistics.median(t[0] for t in times[i])
        rd = statistics.median(t[1] for t in times[i])
        size = times[i][-1][2]
        base = base or (w, size)
        mark = " *" if lab == FORMAT and chunk is None else ""
        mark = mark if compressors is _compressors else ""
        print(
            f"{lab:32s} {codec + mark:21s} {chunk or 'one':>6} {size / n_atoms / 1e3:>8.1f} "
            f"{w * 1e3:>9.1f} {raw / w / 1e6:>6.0f} {rd * 1e3:>8.1f} "
            f"{size / base[1]:>10.2f} {base[0] / w:>10.2f}x"
        )


if __name__ == "__main__":
    main()
