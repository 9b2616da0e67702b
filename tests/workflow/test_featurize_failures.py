"""Per-structure failures inside a partition: named by file, index and line; skip skips one."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ase.io
import numpy as np
import pytest

from dparallel.datasets import generate_emt_cu
from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.errors import PartitionFailedError
from dparallel.workflow.featurize import (
    FeaturizeOptions,
    featurize_in_process,
)

if TYPE_CHECKING:
    from pathlib import Path

ACSF_CU = ACSF.uniform(
    ["Cu"], r_cut=4.0, cutoff="cos", radial=[(0.5, 0.0), (1.0, 2.5)], narrow=[(0.02, 1, 1, 0)]
)


def _write(path: Path, frames: list) -> list[int]:
    """Write ``frames`` as extxyz; returns each frame's first line (1-based)."""
    ase.io.write(path, frames, format="extxyz")
    lines, line = [], 1
    for atoms in frames:
        lines.append(line)
        line += len(atoms) + 2
    return lines


def _dataset(tmp_path: Path, bad: dict[int, str]) -> tuple[Path, list, list[int]]:
    """12 EMT Cu structures; ``bad`` maps a frame index to what is wrong with it."""
    frames = generate_emt_cu(12, seed=5)
    for k, kind in bad.items():
        atoms = frames[k]
        if kind == "duplicate":
            atoms.positions[3] = atoms.positions[1]  # two atoms at the same place
        elif kind == "image":
            atoms.positions[2] = atoms.positions[0] + atoms.cell[0]  # on a periodic image
        elif kind == "oxygen":
            atoms.numbers[2] = 8  # an element the descriptors do not define
    path = tmp_path / "cu.extxyz"
    return path, frames, _write(path, frames)


def _oxygen_line(path: Path, first: int) -> int:
    """The line (1-based) of the first O atom at or after line ``first``, found in the text
    (extxyz ``O x y z …``, n2p2 ``atom x y z O …``)."""
    rows = path.read_text().splitlines()
    for k in range(first - 1, len(rows)):
        words = rows[k].split()
        if words[:1] == ["O"] or (words[:1] == ["atom"] and words[4] == "O"):
            return k + 1
    raise AssertionError("no O atom")


def _features_by_source(store) -> dict[int, np.ndarray]:
    """Stored ACSF rows of each source structure (independent of partitioning)."""
    out = {}
    for p in store.done_partitions().tolist():
        batch = store.read_partition(p)
        feats = store.read_features(p, "acsf")["Cu"]
        start = int(store._cumulative()[p])  # first stored structure of p
        ids = store.source_indices(start, start + batch.n_structures)
        struct = batch.structure_index[feats["atom_index"]]
        for s, source_index in enumerate(ids.tolist()):
            out[source_index] = feats["values"][struct == s]
    return out


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("duplicate", "atoms 1 and 3 are at the same position"),
        ("image", "atoms 0 and 2 are at the same position"),
        ("oxygen", "atom 2: element O is not in the acsf elements (Cu)"),
    ],
)
def test_bad_structure_is_named_by_file_index_and_line_and_others_are_kept(tmp_path, kind, message):
    path, _frames, lines = _dataset(tmp_path, {7: kind})
    store_path = tmp_path / "s.zarr"
    descriptors = DescriptorSet(acsf=ACSF_CU, derivatives=True)
    with pytest.raises(PartitionFailedError) as info:
        featurize_in_process(path, store_path, descriptors, FeaturizeOptions(partition_atoms=120))
    text = str(info.value)
    line = _oxygen_line(path, lines[7]) if kind == "oxygen" else lines[7]  # the atom's own
    assert f"{path}, line {line}, structure 7: {message}" in text, text
    assert "1 of " in text and "ZeroDivision" not in text and "non-finite" not in text
    # the same input fails a rerun the same way: the message says what does help
    assert "a rerun fails the same way" in text and "--on-error skip --overwrite" in text
    from dparallel.store import open_store

    store = open_store(store_path)
    bad_partition = store.partition_of(7)
    assert set(store.pending_partitions().tolist()) == {bad_partition}
    assert len(store.done_partitions()) == store.n_partitions - 1


@pytest.mark.parametrize("kind", ["duplicate", "oxygen"])
def test_skip_skips_only_that_structure(tmp_path, kind):
    path, frames, lines = _dataset(tmp_path, {4: kind, 9: kind})
    store = featurize_in_process(
        path,
        tmp_path / "s.zarr",
        DescriptorSet(acsf=ACSF_CU, derivatives=True),
        FeaturizeOptions(partition_atoms=120, on_error="skip"),
    )
    assert store.is_complete
    skipped = store.skipped()
    assert [i for i, _ in skipped] == [4, 9]
    line = _oxygen_line(path, lines[4]) if kind == "oxygen" else lines[4]
    assert skipped[0][1].startswith(f"line {line}: ")
    assert store.n_structures == len(frames) - 2
    assert store.source_indices().tolist() == [i for i in range(len(frames)) if i not in (4, 9)]
    got = _features_by_source(store)
    # every kept structure's features equal those computed for it alone (independent code)
    for i, atoms in enumerate(ase.io.read(path, ":")):
        if i in (4, 9):
            continue
        alone = ACSF_CU.compute([atoms])["Cu"].values.numpy()
        np.testing.assert_allclose(got[i], alone, rtol=1e-12, atol=1e-14)
    assert store.info()["n_skipped"] == 2


def test_an_element_outside_the_descriptors_names_its_atom_line_in_n2p2(tmp_path):
    from dparallel.n2p2 import write_input_data

    frames = generate_emt_cu(6, seed=5)
    frames[3].numbers[4] = 8
    path = tmp_path / "input.data"
    write_input_data(path, frames, "ase")
    store = featurize_in_process(
        path,
        tmp_path / "s.zarr",
        DescriptorSet(acsf=ACSF_CU, derivatives=True),
        FeaturizeOptions(partition_atoms=120, on_error="skip"),
    )
    [(index, reason)] = store.skipped()
    assert index == 3
    assert reason.startswith(f"line {_oxygen_line(path, 1)}: atom 4: element O "), reason


def test_any_kernel_failure_or_non_finite_output_is_pinned_to_its_structure(tmp_path, monkeypatch):
    """Failures the cheap checks do not foresee are found by computing structure by structure."""
    import dparallel.descriptors.descriptor_set as dset_module

    frames = generate_emt_cu(10, seed=2)
    frames[3].calc.results["energy"] = 1234.5  # marks the structure the kernels will refuse
    frames[6].calc.results["energy"] = 6789.5  # marks the one whose features come out NaN
    path = tmp_path / "cu.extxyz"
    lines = _write(path, frames)
    original = dset_module.DescriptorSet.compute

    def flaky(self, batch, neighbors=None, **options):
        if np.any(batch.energy == 1234.5):
            raise FloatingPointError("kernel cannot take it")
        out = original(self, batch, neighbors, **options)
        marked = np.flatnonzero(batch.energy == 6789.5)
        for s in marked:
            values = out["acsf"]["Cu"]["values"]
            rows = batch.structure_index[out["acsf"]["Cu"]["atom_index"]] == s
            values[rows] = np.nan
        return out

    monkeypatch.setattr(dset_module.DescriptorSet, "compute", flaky)
    descriptors = DescriptorSet(acsf=ACSF_CU)
    with pytest.raises(PartitionFailedError) as info:
        featurize_in_process(
            path, tmp_path / "a.zarr", descriptors, FeaturizeOptions(partition_atoms=10_000)
        )
    assert (
        f"line {lines[3]}, structure 3: the descriptors cannot be computed: "
        "FloatingPointError: kernel cannot take it"
    ) in str(info.value)
    store = featurize_in_process(
        path,
        tmp_path / "b.zarr",
        descriptors,
        FeaturizeOptions(partition_atoms=10_000, on_error="skip"),
    )
    assert [i for i, _ in store.skipped()] == [3, 6]
    assert "acsf features of Cu atoms are not finite" in store.skipped()[1][1]
    assert store.is_complete and store.n_structures == 8


@pytest.mark.parametrize("on_error", ["raise", "skip"])
def test_a_failure_of_every_structure_is_not_blamed_on_them(tmp_path, monkeypatch, on_error):
    """A kernel that fails for all structures is a bug or bad parameters: nothing is skipped."""
    import dparallel.descriptors.descriptor_set as dset_module

    path = tmp_path / "cu.extxyz"
    _write(path, generate_emt_cu(6, seed=2))

    def broken(self, batch, neighbors=None, **options):
        raise FloatingPointError("kernel bug")

    monkeypatch.setattr(dset_module.DescriptorSet, "compute", broken)
    with pytest.raises(PartitionFailedError) as info:
        featurize_in_process(
            path,
            tmp_path / "s.zarr",
            DescriptorSet(acsf=ACSF_CU),
            FeaturizeOptions(on_error=on_error),
        )
    text = str(info.value)
    assert "failed: FloatingPointError: kernel bug" in text and "structure 0" not in text
    from dparallel.store import open_store

    assert open_store(tmp_path / "s.zarr").skipped() == []


def _four_structures(rng: np.random.Generator) -> tuple:
    """A batch of 4 Cu structures (3, 4, 2, 5 atoms), its offsets, two pairs per atom."""
    from dparallel.types import StructureBatch

    offsets = np.concatenate([[0], np.cumsum([3, 4, 2, 5])])
    n = int(offsets[-1])
    batch = StructureBatch(
        numbers=np.full(n, 29), positions=rng.normal(size=(n, 3)), cells=np.zeros((4, 3, 3)),
        pbc=np.zeros((4, 3), bool), energy=np.zeros(4), forces=np.zeros((n, 3)), offsets=offsets,
    )  # fmt: skip
    return batch, offsets, np.repeat(np.arange(n), 2).astype(np.int32)  # pair_first (P,)


def test_non_finite_finds_nan_and_inf_in_values_and_derivatives_and_nothing_in_huge_finite():
    """The one-sum shortcut never hides a NaN/±inf, and overflowing finite sums fall back."""
    from dparallel.workflow.featurize_task import _all_finite, _non_finite

    rng = np.random.default_rng(0)
    batch, offsets, pair_first = _four_structures(rng)
    n = batch.n_atoms

    def computed(values: np.ndarray, dg: np.ndarray) -> dict:
        return {"acsf": {"Cu": {"values": values, "atom_index": np.arange(n),
                                "d/Cu/pair_first": pair_first, "d/Cu/dG_dr": dg}}}  # fmt: skip

    values = rng.normal(size=(n, 4))
    dg = rng.normal(size=(2 * n, 4, 3)).astype(np.float32)
    assert _all_finite(values) and _all_finite(dg)
    assert _non_finite(batch, computed(values, dg)) == {}
    for bad in (np.nan, np.inf, -np.inf):
        v = values.copy()
        v[offsets[2], 1] = bad  # an atom of structure 2
        d = dg.copy()
        d[2 * offsets[3] + 1, 3, 2] = bad  # a pair centred on an atom of structure 3
        assert not _all_finite(v) and not _all_finite(d)
        assert set(_non_finite(batch, computed(v, dg))) == {2}
        assert set(_non_finite(batch, computed(values, d))) == {3}
    both = dg.copy()
    both[0, 0, 0], both[-1, 0, 0] = np.inf, -np.inf  # inf - inf: NaN, still caught
    assert set(_non_finite(batch, computed(values, both))) == {0, 3}
    huge = dg.copy()
    huge[:, 0, 0] = np.float32(3e38)  # all finite, but their float32 sum overflows
    assert not _all_finite(huge)
    assert _non_finite(batch, computed(values, huge)) == {}


def test_non_finite_finds_nan_in_split_derivatives_by_their_pair_axis():
    """The split layout featurize tasks compute: (F_r + 3 F_a, P), pairs last."""
    from dparallel.workflow.featurize_task import _non_finite

    rng = np.random.default_rng(1)
    batch, offsets, pair_first = _four_structures(rng)
    n = batch.n_atoms
    split = rng.normal(size=(2 + 3 * 3, 2 * n)).astype(np.float32)  # (F_r + 3 F_a, P)

    def computed(split: np.ndarray) -> dict:
        arrays = {"values": rng.normal(size=(n, 5)), "atom_index": np.arange(n),
                  "d/Cu/pair_first": pair_first, "d/Cu/radial": np.array([1, 0, 1, 0, 0], bool),
                  "d/Cu/dG_dr_split": split}  # fmt: skip
        return {"acsf": {"Cu": arrays}}

    assert _non_finite(batch, computed(split)) == {}
    bad_s, bad_ang = split.copy(), split.copy()
    bad_s[1, 2 * offsets[1]] = np.nan  # a radial row, first pair of structure 1
    bad_ang[2 + 3 * 2 + 1, 2 * offsets[3] + 3] = np.inf  # an angular row, a pair of structure 3
    assert set(_non_finite(batch, computed(bad_s))) == {1}
    assert set(_non_finite(batch, computed(bad_ang))) == {3}


def test_a_done_partition_whose_report_is_gone_is_computed_again(tmp_path):
    """The statistics (n2p2's scaling) are merged from the partitions' reports: one whose
    group document was deleted was left out of them silently (fewer atoms counted, other
    means); a rerun now computes that partition again and the statistics are whole."""
    path, _, _ = _dataset(tmp_path, {})
    options = FeaturizeOptions(partition_atoms=60)
    dset = DescriptorSet(acsf=ACSF_CU)
    store = featurize_in_process(path, tmp_path / "s.zarr", dset, options)
    assert store.n_partitions >= 3
    whole = store.attrs["statistics"]
    (tmp_path / "s.zarr" / "parts" / "1" / "zarr.json").unlink()
    with pytest.warns(UserWarning, match=r"partition 1 is marked done but its report is gone"):
        again = featurize_in_process(path, tmp_path / "s.zarr", dset, options)
    assert again.report(1) is not None
    assert again.attrs["statistics"] == whole


@pytest.mark.parametrize("worker_copy", [False, True])
def test_an_input_truncated_under_the_run_is_said_as_such(tmp_path, monkeypatch, worker_copy):
    """A file truncated while featurize reads it: the summary says it changed under the
    run (leave it alone, rerun), not that it holds invalid structures to fix. A worker's
    copy of the source (pickled, as Dask sends it) finds it changed since it was opened."""
    import os
    import pickle

    import dparallel.workflow.featurize as featurize_module

    path, _frames, _lines = _dataset(tmp_path, {})
    real = featurize_module.featurize_partition
    calls = []

    def truncating(source, ref, p, spec):  # noqa: ANN001, ANN202
        if not calls:  # after the run has opened and indexed the file
            os.truncate(path, path.stat().st_size // 2)
        calls.append(p)
        return real(pickle.loads(pickle.dumps(source)) if worker_copy else source, ref, p, spec)

    monkeypatch.setattr(featurize_module, "featurize_partition", truncating)
    descriptors = DescriptorSet(acsf=ACSF_CU, derivatives=True)
    with pytest.raises(PartitionFailedError) as info:
        featurize_in_process(
            path, tmp_path / "s.zarr", descriptors, FeaturizeOptions(partition_atoms=120)
        )
    summary, *partitions = str(info.value).splitlines()
    assert f"{len(calls)} of {len(calls)} partitions failed" in summary
    assert "the input file changed while this run read it" in summary
    assert "leave the input alone while a run reads it, then rerun" in summary
    assert "invalid structures" not in summary and "fails the same way" not in summary
    changed = "changed since it was opened" if worker_copy else "changed while it was being read"
    assert all(f"{path} {changed}" in line for line in partitions), partitions
