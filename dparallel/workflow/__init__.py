"""dparallel.workflow: ingest, featurize (task + driver), statistics, workflow spec and run.

``Plan`` and ``plan_partitions`` live in :mod:`dparallel.store.plan` (a store is laid out
by its plan); they are re-exported here for existing imports.
"""

from __future__ import annotations

from dparallel.store.plan import Plan, Slots, plan_partitions

__all__ = ["Plan", "Slots", "plan_partitions"]
