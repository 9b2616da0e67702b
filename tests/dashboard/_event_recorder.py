"""A stand-in for a Dask worker or client that records the events published to it, and
the arguments ``dparallel train`` parses (for tests of what it publishes)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from pathlib import Path

    import pytest

    from dparallel.dashboard import DashboardState


class EventRecorder:
    """Has ``log_event`` and ``address`` as the dashboard's publish helpers need."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict]] = []
        self.address = "tcp://w:1"

    def log_event(self, topic: str, msg: dict) -> None:
        self.events.append((topic, msg))


def cli_train_args(output: Path, *, resume: bool) -> argparse.Namespace:
    """``dparallel train store.zarr -o OUTPUT [--resume] -q`` as the CLI's own parser reads
    it (a hand-made namespace fell behind each new option), without a cluster."""
    from dparallel.cli.main import build_parser

    argv = ["train", "store.zarr", "-o", str(output), "-q", *(["--resume"] if resume else [])]
    return build_parser().parse_args(argv)


def shown_page(page_cls_name: str, s: DashboardState, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The page ``dparallel.dashboard.pages.<page_cls_name>`` as it shows ``s``."""
    import pytest

    pytest.importorskip("bokeh")
    import dparallel.dashboard.pages as pages

    monkeypatch.setattr(pages, "state_of", lambda scheduler: s)
    page = getattr(pages, page_cls_name)(None)
    page.update()
    return page
