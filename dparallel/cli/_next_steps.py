"""The closing lines of ``run``, ``featurize`` and ``train``: total time and what to run next."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import os

__all__ = ["closing_lines"]


def _q(path: str | os.PathLike[str]) -> str:
    return shlex.quote(str(path))


def closing_lines(
    seconds: float,
    *,
    store: str | os.PathLike[str] | None = None,
    model: str | os.PathLike[str] | None = None,
    data: str | os.PathLike[str] | None = None,
    exported: bool = False,
) -> list[str]:
    """``done in …`` and the commands a user would run next, one per line."""
    lines = [f"done in {seconds:.1f} s; next:"]
    if model is None and store is not None:
        lines.append(f"  dparallel info {_q(store)}")
        lines.append(f"  dparallel train {_q(store)} -o model/ --set epochs=100")
        return lines
    if model is not None:
        if not exported:
            lines.append(f"  dparallel export {_q(model)}")
        # a file that exists (the data trained from), else a placeholder that says what
        lines.append(f"  dparallel evaluate {_q(model)} {_q(data) if data else 'STRUCTURES_FILE'}")
        lines.append(f"  dparallel export {_q(model)} --format n2p2 -o n2p2-potential/")
        lines.append(
            "  in Python (ASE): from dparallel.ase import Calculator; "
            f"atoms.calc = Calculator({str(model)!r})"
        )
    return lines
