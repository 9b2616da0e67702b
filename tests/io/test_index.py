"""The per-file index at scale: what building it holds per structure."""

from __future__ import annotations

import tracemalloc
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dparallel.io import _indexers, _text
from dparallel.io.location import as_location

if TYPE_CHECKING:
    from pathlib import Path

#: Structures in the files below: enough that per-structure bytes dwarf fixed costs.
N = 20_000


def _small_structures(path: Path, fmt: str, rng: np.random.Generator) -> np.ndarray:
    """Write ``N`` structures of 1–3 atoms in ``fmt``; return their atom counts."""
    counts = rng.integers(1, 4, N)
    rows = iter(f"H {x:.4f} {y:.4f} {z:.4f}" for x, y, z in rng.uniform(0, 5, (counts.sum(), 3)))
    out = []
    for n in counts.tolist():
        atoms = [next(rows) for _ in range(n)]
        if fmt == "extxyz":
            out += [str(n), 'energy=-1.0 pbc="F F F"', *atoms]
        else:
            out += ["begin", *(f"atom {a[2:]} H 0 0 0 0 0" for a in atoms), "energy -1", "end"]
    path.write_text("\n".join(out) + "\n")
    return counts


@pytest.mark.parametrize("fmt", ["extxyz", "n2p2"])
def test_building_an_index_holds_a_few_int64_per_structure(tmp_path, rng, fmt):
    # its four columns (8 bytes each) grew as lists of Python ints (~36 bytes an entry): a
    # 10^7-structure file took over a GB to index; now about 4 × 8 bytes, plus growth room
    path = tmp_path / ("data.xyz" if fmt == "extxyz" else "input.data")
    counts = _small_structures(path, fmt, rng)
    build = _indexers._index_extxyz if fmt == "extxyz" else _indexers._index_n2p2
    tracemalloc.start()
    try:
        with _text.open_stream(as_location(path)) as f:
            found, length = build(f, str(path))  # the pass itself (no sample hash)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(found.counts, counts)  # what was written
    assert found.starts[0] == 0 and found.ends[-1] == length == path.stat().st_size
    assert peak / N < 64, f"{peak / N:.0f} bytes per structure"
