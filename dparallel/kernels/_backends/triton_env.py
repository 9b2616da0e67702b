"""Whether Triton runs its kernels in the CPU interpreter; importable without triton.

``TRITON_INTERPRET=1`` must be set before triton is first imported, so the modules that
decide whether a Triton backend can run ask here before they import it.
"""

from __future__ import annotations

import os

__all__ = ["interpreting"]


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
