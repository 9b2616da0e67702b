"""A one-line terminal progress bar with throughput and ETA (no dependency)."""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["ProgressBar"]


class ProgressBar:
    """Progress over ``total`` units of work, counting structures for throughput.

    Draws on ``stream`` only when it is a terminal (or ``force=True``) and at most
    every ``min_interval`` seconds; :meth:`close` always prints the final line.
    """

    def __init__(
        self,
        total: int,
        *,
        label: str = "featurize",
        unit: str = "structures",
        stream: TextIO | None = None,
        force: bool = False,
        min_interval: float = 0.2,
        width: int = 30,
    ) -> None:
        self.total = max(int(total), 0)
        self.label, self.unit, self.width = label, unit, width
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = force or bool(getattr(self.stream, "isatty", lambda: False)())
        self.min_interval = min_interval
        self.done = 0
        self.units = 0
        self._t0 = time.perf_counter()
        self._last = 0.0

    def update(self, parts: int = 1, units: int = 0) -> None:
        """Count ``parts`` finished pieces of work that held ``units`` structures."""
        self.done += parts
        self.units += units
        now = time.perf_counter()
        if self.enabled and (now - self._last >= self.min_interval or self.done >= self.total):
            self._last = now
            self.stream.write("\r" + self.line())
            self.stream.flush()

    def line(self) -> str:
        """The current status line."""
        elapsed = max(time.perf_counter() - self._t0, 1e-9)
        fraction = self.done / self.total if self.total else 1.0
        filled = round(fraction * self.width)
        rate = self.units / elapsed
        eta = (elapsed / self.done) * (self.total - self.done) if self.done else float("nan")
        eta_text = "--:--" if eta != eta else f"{int(eta) // 60:02d}:{int(eta) % 60:02d}"
        return (
            f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] "
            f"{self.done}/{self.total} {rate:,.0f} {self.unit}/s ETA {eta_text}"
        )

    def close(self) -> None:
        """Print the final line (also when not on a terminal)."""
        self.stream.write(("\r" if self.enabled else "") + self.line() + "\n")
        self.stream.flush()
