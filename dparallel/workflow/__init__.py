"""dparallel.workflow: planning (pure), ingest and (later) distributed runs."""

from __future__ import annotations

from dparallel.workflow.plan import Plan, Slots, plan_partitions

__all__ = ["Plan", "Slots", "plan_partitions"]
