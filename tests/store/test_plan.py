"""Pure partition planner: contiguity, bounds, balance; no I/O."""

from __future__ import annotations

import numpy as np
import pytest

from dparallel.errors import ConfigError
from dparallel.store.plan import Plan, Slots, plan_partitions


def _check_invariants(counts, plan, target):
    counts = np.asarray(counts)
    assert plan.starts[0] == 0 and plan.stops[-1] == len(counts)
    np.testing.assert_array_equal(plan.starts[1:], plan.stops[:-1])  # contiguous
    assert (plan.stops > plan.starts).all()
    for s, e, a in zip(plan.starts, plan.stops, plan.atoms, strict=True):
        assert a == counts[s:e].sum()
        assert a <= target or e - s == 1  # only a single oversized structure may exceed
    # greedy packing gives the fewest partitions; the planner never uses more
    greedy, acc = 0, None
    for c in counts:
        if acc is None or acc + c > target:
            greedy, acc = greedy + 1, c
        else:
            acc += c
    assert plan.n_partitions == greedy


def test_hand_example():
    plan = plan_partitions([3, 3, 3, 3, 3, 3], 9)
    assert plan.n_partitions == 2
    np.testing.assert_array_equal(plan.starts, [0, 3])
    np.testing.assert_array_equal(plan.atoms, [9, 9])
    assert plan.slots == Slots(atoms=9, structures=3)


def test_balanced_instead_of_greedy_tail():
    # greedy would give [10, 10, 1]; balanced gives max 7 with 3 partitions
    plan = plan_partitions([1] * 21, 10)
    assert plan.n_partitions == 3
    np.testing.assert_array_equal(plan.atoms, [7, 7, 7])


def test_oversized_structure_alone():
    plan = plan_partitions([2, 50, 2, 2], 10)
    np.testing.assert_array_equal(plan.starts, [0, 1, 2])
    np.testing.assert_array_equal(plan.atoms, [2, 50, 4])
    assert plan.slots.atoms == 50
    assert plan.partition_of(0) == 0 and plan.partition_of(1) == 1 and plan.partition_of(3) == 2


@pytest.mark.parametrize("target", [1, 7, 64, 1000])
def test_random_invariants(rng, target):
    for _ in range(20):
        counts = rng.integers(1, 120, int(rng.integers(1, 300)))
        plan = plan_partitions(counts, target)
        _check_invariants(counts, plan, target)
        assert plan.slots.atoms == plan.atoms.max()
        assert plan.slots.structures == (plan.stops - plan.starts).max()


def test_empty_and_roundtrip():
    plan = plan_partitions(np.zeros(0, np.int64), 10)
    assert plan.n_partitions == 0 and plan.n_structures == 0
    p = plan_partitions([4, 5, 6, 7], 11)
    assert Plan.from_dict(p.to_dict()) == p
    with pytest.raises(AttributeError):
        p.target_atoms = 3  # frozen
    with pytest.raises(ValueError):
        p.starts[0] = 1  # read-only arrays


def test_bad_target():
    with pytest.raises(ConfigError, match="target_atoms must be ≥ 1, got 0"):
        plan_partitions([1, 2], 0)


@pytest.mark.parametrize("workers", [1, 2, 8])
@pytest.mark.parametrize("memory", [700, 3_000, 12_000])
def test_derived_size_stays_within_the_memory_bound(workers, memory):
    """A task's memory bounds the derived size above every other bound, the minimum and
    the growth to whole rounds of the workers included (a large descriptor: 200 functions
    × 100 neighbours is ~250 kB per atom, 20,000 atoms 5 GB)."""
    from dparallel.store.plan import MAX_PARTITION_ATOMS, derived_partition_atoms

    counts = np.full(2_000, 50)  # 100,000 atoms: unbounded 5,000-20,000 per partition
    unbounded = derived_partition_atoms(counts, workers)
    bounded = derived_partition_atoms(counts, workers, memory=memory)
    assert bounded <= memory
    assert bounded == unbounded if unbounded <= memory else bounded > memory // 2
    assert max(plan_partitions(counts, bounded).atoms) <= memory
    assert derived_partition_atoms(counts, workers, memory=MAX_PARTITION_ATOMS) == unbounded
