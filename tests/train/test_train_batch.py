"""The one batch type: the tensor walk covers every batch kind; the optimizer seam."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch
from _store_fixture import small_store

from dparallel.train import TrainingSpec, make_optimizer
from dparallel.train.batch import Batch, PartitionData, batch_nbytes, map_batch
from dparallel.train.data import BatchPlan, PartitionReader, iterate_batches
from dparallel.train.device import Target
from dparallel.train.feed import HeldData
from dparallel.train.optimizer_kinds import OPTIMIZER_KEYS, OPTIMIZERS
from dparallel.train.preparation import build_model, prepare
from dparallel.train.structure_data import StructureReader

SPEC = TrainingSpec(epochs=1, hidden=(4,), batch_size=3, seed=7, device="cpu")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    return small_store(tmp_path_factory.mktemp("batch"), n=12)


def _tensors(obj: object, seen: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
    """Every tensor reachable from ``obj`` through attributes, dicts, lists and tuples.

    Independent of the dataclass declarations the walk uses: a tensor kept anywhere in a
    batch (a new field, a list of tensors, an attribute set later) is found here.
    """
    if isinstance(obj, torch.Tensor):
        seen[id(obj)] = obj
    elif isinstance(obj, torch.nn.Module):  # the descriptor graph: moved whole, not walked
        pass
    elif isinstance(obj, dict):
        for v in obj.values():
            _tensors(v, seen)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _tensors(v, seen)
    elif hasattr(obj, "__dict__"):
        for v in vars(obj).values():
            _tensors(v, seen)
    return seen


@pytest.fixture(scope="module")
def batches(store) -> dict[str, Batch]:  # noqa: ANN001
    """One batch of each kind: streamed, held on the device, computed (graph and kernel)."""
    prep = prepare(store, SPEC)
    reader = PartitionReader(store, "acsf", prep.elements, prep.index, True)
    held = HeldData.load(reader, torch.device("cpu"), torch.float64, None)
    assert held is not None
    plan = BatchPlan(prep.index, "train", 3, shuffle=False)
    out = {"stored": next(iterate_batches(reader, plan)), "held": next(iter(held.batches(plan)))}
    for engine in ("graph", "kernel"):
        computed = StructureReader(store, "acsf", prep.descriptor_spec or {}, prep.elements,
                                   prep.index, True, engine=engine)  # fmt: skip
        out[engine] = next(iterate_batches(computed, plan))
    return out


def test_the_tensor_walk_visits_every_tensor_of_every_batch_kind(batches) -> None:  # noqa: ANN001
    """Moves, pinning and CUDA stream recording miss no tensor (issue 30's stream bug)."""
    for kind, batch in batches.items():
        fields = _tensors(batch, {})
        visited: dict[int, torch.Tensor] = {}

        def visit(t: torch.Tensor, visited: dict = visited) -> torch.Tensor:
            visited[id(t)] = t
            return t

        map_batch(batch, visit)
        assert visited.keys() == fields.keys(), kind
        assert batch_nbytes(batch) == sum(t.numel() * t.element_size() for t in fields.values())
        # what a walk returns holds only what it made: a pinned/moved batch keeps no old tensor
        copied = _tensors(map_batch(batch, torch.clone), {})
        assert len(copied) == len(fields)
        assert not {t.data_ptr() for t in copied.values() if t.numel()} & {
            t.data_ptr() for t in fields.values() if t.numel()}, kind  # fmt: skip
        if kind == "graph":  # the computed batch's positions and pairs are among them
            g = batch.geometry
            assert g is not None
            assert {id(g.positions), id(g.pair_first), id(g.pair_second),
                    id(g.pair_offsets), id(g.species)} <= visited.keys()  # fmt: skip


def test_held_and_streamed_batches_carry_the_same_fields(batches) -> None:  # noqa: ANN001
    stored, held = batches["stored"], batches["held"]
    assert stored.features is not None and held.features is not None
    assert stored.geometry is None and batches["kernel"].geometry is None
    assert batches["graph"].features is None and batches["graph"].geometry is not None
    assert len(_tensors(stored, {})) == len(_tensors(held, {}))


class _Reads:
    """A spec that records which of its keys are read."""

    def __init__(self, spec: TrainingSpec) -> None:
        self.spec, self.read = spec, set[str]()

    def __getattr__(self, key: str) -> object:
        self.read.add(key)
        return getattr(self.spec, key)


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_each_optimizer_is_built_once_and_declares_what_it_needs(store, name) -> None:  # noqa: ANN001
    kind = OPTIMIZERS[name]
    scheduled = {"force_weight_start": 1.0} if "force_weight_start" in kind.reads else {}
    spec = SPEC.model_copy(update={"optimizer": name, **scheduled})
    prep = prepare(store, spec)
    model = build_model(prep, spec, Target.of(spec))
    reads = _Reads(spec)
    optimizer = make_optimizer(model, reads, prep.index.count("train"))  # type: ignore[arg-type]
    assert type(optimizer) is kind.load()
    assert optimizer.needs_derivatives == kind.needs_derivatives
    reader = PartitionReader(store, "acsf", prep.elements, prep.index, True)
    optimizer.begin_epoch()
    before = [p.detach().clone() for p in model.parameters()]
    for batch in iterate_batches(reader, BatchPlan(reader.index, "train", 3, shuffle=False)):
        energy, forces, value = optimizer.step(model, batch, True)
        assert energy.shape == (batch.n_structures,) and forces is not None
        assert torch.isfinite(value)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    optimizer.end_epoch(float(value.detach()))
    optimizer.columns()
    # the table says which optimizer keys it reads: the spec refuses the others
    assert reads.read & OPTIMIZER_KEYS <= kind.reads, reads.read & OPTIMIZER_KEYS - kind.reads
    # a checkpoint holds "optimizer" and "scheduler", as before the interface: old ones load
    state = optimizer.state_dict()
    assert set(state) == {"optimizer", "scheduler"}
    again = make_optimizer(model, spec, prep.index.count("train"))
    again.load_state_dict(state)
    assert again.lr == optimizer.lr
    assert ("force_weight" in optimizer.columns()) == bool(scheduled)


def test_the_optimizer_table_names_spec_keys_and_the_spec_offers_its_names() -> None:
    assert TrainingSpec.model_fields.keys() >= OPTIMIZER_KEYS
    assert TrainingSpec.model_json_schema()["properties"]["optimizer"]["enum"] == list(OPTIMIZERS)


def test_no_training_module_tests_the_optimizer_name() -> None:
    """The optimizers are named once: the table in optimizer_kinds.py."""
    root = Path(__file__).parents[2] / "dparallel" / "train"
    for path in root.glob("*.py"):
        if path.name != "optimizer_kinds.py":
            text = path.read_text()
            for name in OPTIMIZERS:
                assert f'"{name}"' not in text and f"'{name}'" not in text, (path, name)


# ----------------------------------------------------------------- held data, merged
@pytest.mark.parametrize("per_assembly", [1, 3, 1000])
def test_held_batches_assembled_together_equal_streamed_ones(
    tmp_path, monkeypatch, per_assembly
) -> None:  # noqa: ANN001
    """Merged partitions (some without an element), several batches per gather, cut apart:
    the same batches, array for array, as host assembly from the store."""
    from _store_fixture import assert_same_batches, build_store, write_emt_alloy

    from dparallel.descriptors import ACSF
    from dparallel.train.splits import build_split_index

    acsf = ACSF.uniform(
        ["Cu", "Au"], r_cut=4.0, radial=[(0.05, 0.0), (2.0, 2.7)], narrow=[(0.01, 1.0, 1.0, 0.0)]
    )
    data = write_emt_alloy(tmp_path / "m.xyz", 12, seed=5, repeat=(2, 1, 1), pure=4)
    store = build_store(data, tmp_path / "m.zarr", acsf, partition_atoms=20)
    index = build_split_index(store, 0.25, 0.0, 3)
    reader = PartitionReader(store, "acsf", ["Cu", "Au"], index, True)
    load = reader.load

    def without_empty_au(p: int) -> PartitionData:  # as a store lacking those groups reads
        part = load(p)
        part.rows = {k: v for k, v in part.rows.items() if "Au" not in k or v.offsets[-1]}
        return part

    monkeypatch.setattr(reader, "load", without_empty_au)
    assert len(index.partitions) > 3
    assert any("features/Au" not in reader.load(p).rows for p in index.partitions)
    assert any(reader.load(p).n_structures > 1 for p in index.partitions)
    held = HeldData.load(reader, torch.device("cpu"), torch.float64, None)
    assert held is not None and held.per_assembly == held.data.n_structures  # host RAM: room
    held.per_assembly = per_assembly
    for split, shuffle, size in (("train", True, 2), ("train", True, 3), ("validation", False, 2)):
        plans = [BatchPlan(index, split, size, shuffle=shuffle, seed=1, epoch=4, shuffle_buffer=4)
                 for _ in range(2)]  # fmt: skip
        assert_same_batches(list(iterate_batches(reader, plans[0])), list(held.batches(plans[1])))


# ----------------------------------------------------------------- gathering into place
def _random_partition(rng, p: int, n: int) -> PartitionData:  # noqa: ANN001
    """A partition of ``n`` structures: atoms, a float32 pair table indexing the atoms, a
    per-structure label, with a random number of rows per structure (some with none)."""
    from dparallel.train.batch import Rows

    atoms_per = rng.integers(1, 5, n)
    pairs_per = rng.integers(0, 7, n)
    atom_off = np.concatenate([[0], np.cumsum(atoms_per)]).astype(np.int64)
    pair_off = np.concatenate([[0], np.cumsum(pairs_per)]).astype(np.int64)
    first = np.concatenate(
        [rng.integers(atom_off[s], atom_off[s + 1], pairs_per[s]) for s in range(n)]
    ).astype(np.int32)  # an index column narrower than the int64 numbering
    return PartitionData(
        p,
        ids=np.arange(n) + 100 * p,
        split=np.zeros(n, np.int8),
        rows={
            "structures": Rows(np.arange(n + 1), {"energy": rng.normal(size=n)}),
            "atoms": Rows(atom_off, {"forces": rng.normal(size=(int(atom_off[-1]), 3))}),
            "pairs": Rows(
                pair_off,
                {"first": first, "dG_dr": rng.normal(size=(len(first), 5, 3)).astype(np.float32)},
                refs={"first": "atoms"},
            ),
        },
    )


def _assembled_row_by_row(items) -> dict[str, dict[str, np.ndarray]]:  # noqa: ANN001
    """The reference: each structure's rows copied one by one, partitions in first-seen
    order, an index column mapped through a dict of local → batch rows."""
    order: dict[int, list] = {}
    for part, s in items:
        order.setdefault(part.p, [part, []])[1].append(s)
    out: dict[str, dict[str, list]] = {}
    base: dict[str, int] = {}
    for part, structures in order.values():
        where: dict[str, dict[int, int]] = {}
        for name, table in part.rows.items():
            where[name] = {}
            for s in structures:
                for r in range(int(table.offsets[s]), int(table.offsets[s + 1])):
                    where[name][r] = base.get(name, 0) + len(where[name])
            for col, values in table.columns.items():
                for r in where[name]:
                    ref = table.refs.get(col)
                    row = where[ref][int(values[r])] if ref else values[r]
                    out.setdefault(name, {}).setdefault(col, []).append(row)
            base[name] = base.get(name, 0) + len(where[name])
    return {n: {c: np.asarray(v) for c, v in cols.items()} for n, cols in out.items()}


@pytest.mark.parametrize("threads", [1, 3])
def test_columns_gathered_into_place_equal_a_row_by_row_copy(monkeypatch, threads) -> None:  # noqa: ANN001
    """Gathers split into many small tasks on several threads, a float32 column cast to
    float64 on the way, on the host and on a device: every column equals the reference."""
    from dparallel.train import gather_ops
    from dparallel.train.batch import assemble
    from dparallel.train.feed import _held
    from dparallel.train.gather_ops import DeviceOps, HostOps

    monkeypatch.setattr(gather_ops, "GATHER_TASK_BYTES", 100)  # tasks of a row or two
    rng = np.random.default_rng(11)
    parts = [_random_partition(rng, p, n) for p, n in enumerate((7, 1, 12))]
    items = [(parts[p], int(s)) for p, s in ((2, 5), (0, 3), (2, 0), (1, 0), (0, 6), (2, 11),
                                             (0, 0), (2, 7))]  # fmt: skip
    expected = _assembled_row_by_row(items)
    ops = HostOps(threads)
    for dtype in (None, torch.float64):
        got = assemble(items, ops, dtype)
        assert list(got.ids) == [205, 200, 211, 207, 3, 6, 0, 100]  # by partition, in order
        for name, cols in expected.items():
            for col, want in cols.items():
                have = np.asarray(got.tables[name][col])
                assert have.shape == want.shape, (name, col)
                stored = parts[0].rows[name].columns[col].dtype
                floating = np.issubdtype(stored, np.floating)
                assert have.dtype == (np.float64 if dtype and floating else stored)
                np.testing.assert_array_equal(have, want.astype(have.dtype), err_msg=col)
    ops.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("dparallel-gather")]
    device_ops = DeviceOps(torch.device("cpu"))
    held = {id(part): _held(part, device_ops, torch.float64) for part in parts}
    device = assemble([(held[id(part)], s) for part, s in items], device_ops, None)
    for name, cols in expected.items():
        for col, want in cols.items():
            np.testing.assert_array_equal(device.tables[name][col].numpy(), want, err_msg=col)


def test_small_gathers_stay_in_the_calling_thread_and_large_ones_go_in_bins() -> None:
    """Handing a small batch's many tiny gathers to threads cost more than the gathers
    (Kalman's batches of a few structures): under two tasks' bytes they run here, in order;
    above, on the gather threads, tasks packed into bins of at most GATHER_TASK_BYTES."""
    from unittest.mock import patch

    from dparallel.train import gather_ops
    from dparallel.train.gather_ops import GATHER_TASK_BYTES, Gather, HostOps

    ran: list[tuple[int, str]] = []

    def tasks(sizes: list[int]) -> list[Gather]:
        def task(k: int) -> Gather:
            return Gather(lambda: ran.append((k, threading.current_thread().name)), sizes[k])

        return [task(k) for k in range(len(sizes))]

    ops = HostOps(3)
    here = threading.current_thread().name
    ops.run(tasks([100] * 80))  # a small batch's 80 columns
    assert ran == [(k, here) for k in range(80)]
    ran.clear()
    big = GATHER_TASK_BYTES // 2
    ops.run(tasks([big] * 8))  # 32 MB: four bins of two tasks
    assert sorted(k for k, _ in ran) == list(range(8))
    assert all(name.startswith("dparallel-gather") for _, name in ran)
    names = dict(ran)
    assert all(names[2 * b] == names[2 * b + 1] for b in range(4))  # a bin is one thread's
    ran.clear()
    bins: list[list[int]] = []
    with patch.object(gather_ops, "_run_all", lambda b: bins.append([t.nbytes for t in b])):
        ops.run(tasks([GATHER_TASK_BYTES - 1] * 3))  # a column cut evenly: a bin each
    assert sorted(bins) == [[GATHER_TASK_BYTES - 1]] * 3
    ops.close()


def test_a_column_promoted_to_a_dtype_no_partition_stores_is_allocated_in_it() -> None:
    """int32 in one partition and uint32 in another concatenate to int64, which neither
    stores: the column is allocated in int64 (it fell back to the first's int32, where
    uint32 values over 2**31 wrap)."""
    from dparallel.train.batch import _widest

    got = _widest([np.zeros((3, 2), np.int32), np.full((4, 2), 2**31 + 5, np.uint32)])
    assert got.dtype == np.int64 and got.shape[1:] == (2,)
    assert _widest([np.zeros(2, np.float32), np.ones(1)]).dtype == np.float64
    assert _widest([torch.zeros(2), torch.ones(1, dtype=torch.float64)]).dtype == torch.float64


@pytest.mark.parametrize("threads", [1, 3])
def test_partitions_of_other_dtypes_assemble_as_a_concatenation_promotes(
    monkeypatch,  # noqa: ANN001
    threads,  # noqa: ANN001
) -> None:
    """A column stored in float32 by one partition and float64 by another (an index column
    in int32 and int64) is gathered into the wider dtype, as the concatenation did: the
    first partition's dtype cut the float64 rows to float32 (and would have cut int64
    rows to int32)."""
    from dparallel.train import gather_ops
    from dparallel.train.batch import Rows, assemble
    from dparallel.train.gather_ops import DeviceOps, HostOps

    monkeypatch.setattr(gather_ops, "GATHER_TASK_BYTES", 100)
    rng = np.random.default_rng(5)
    parts = [_random_partition(rng, p, n) for p, n in enumerate((4, 5, 3))]
    wide = parts[1].rows["pairs"].columns
    wide["dG_dr"] = wide["dG_dr"].astype(np.float64) + 1e-12  # not a float32 number
    wide["first"] = wide["first"].astype(np.int64)
    items = [(parts[p], s) for p, s in ((0, 1), (1, 0), (2, 2), (1, 4), (0, 3), (1, 2))]
    expected = _assembled_row_by_row(items)  # numpy promotes the rows it stacks
    assert expected["pairs"]["dG_dr"].dtype == np.float64
    ops = HostOps(threads)
    got = assemble(items, ops, None)
    ops.close()
    device_ops = DeviceOps(torch.device("cpu"))
    held = {  # on the device as stored
        id(p): PartitionData(p.p, p.ids, p.split, {
            name: Rows(t.offsets, {c: device_ops.tensor(a) for c, a in t.columns.items()}, t.refs)
            for name, t in p.rows.items()
        })
        for p in parts
    }  # fmt: skip
    on_device = assemble([(held[id(p)], s) for p, s in items], device_ops, None)
    for tables in (got.tables, on_device.tables):
        for col, want in expected["pairs"].items():
            have = np.asarray(tables["pairs"][col])
            assert have.dtype == want.dtype, col
            np.testing.assert_array_equal(have, want, err_msg=col)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (pinned memory)")
def test_pinned_assembly_gives_page_locked_columns_equal_to_the_host_ones() -> None:
    from dparallel.train.batch import assemble
    from dparallel.train.gather_ops import PinnedOps

    rng = np.random.default_rng(2)
    parts = [_random_partition(rng, p, 6) for p in range(2)]
    items = [(parts[p], s) for p in (1, 0) for s in range(6)]
    expected = _assembled_row_by_row(items)
    got = assemble(items, PinnedOps(2), None)
    for name, cols in expected.items():
        for col, want in cols.items():
            assert got.tables[name][col].is_pinned()
            np.testing.assert_array_equal(got.tables[name][col].numpy(), want, err_msg=col)
