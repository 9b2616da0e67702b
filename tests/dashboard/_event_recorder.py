"""A stand-in for a Dask worker or client that records the events published to it, and
the arguments ``dparallel train`` parses (for tests of what it publishes)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path


class EventRecorder:
    """Has ``log_event`` and ``address`` as the dashboard's publish helpers need."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.address = "tcp://w:1"

    def log_event(self, topic: str, msg: dict) -> None:
        self.events.append((topic, msg))


def cli_train_args(output: Path, *, resume: bool) -> argparse.Namespace:
    """``dparallel train store.zarr -o OUTPUT [--resume] -q`` as parsed, without a cluster."""
    return argparse.Namespace(
        overrides=[], allow_incomplete=False, device=None, descriptor_source=None,
        config=None, store="store.zarr", descriptors=None, quiet=True, scheduler=None,
        output=str(output), resume=resume,
    )  # fmt: skip
