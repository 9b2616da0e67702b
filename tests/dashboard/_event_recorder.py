"""A stand-in for a Dask worker or client that records the events published to it."""

from __future__ import annotations


class EventRecorder:
    """Has ``log_event`` and ``address`` as the dashboard's publish helpers need."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.address = "tcp://w:1"

    def log_event(self, topic: str, msg: dict) -> None:
        self.events.append((topic, msg))
