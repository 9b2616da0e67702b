"""End this process at once: flush logging and the standard streams, then ``os._exit``.

For processes whose remaining work is only interpreter teardown (the ``dparallel``
command after it returned, a worker after a normal close, the workers' forkserver).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

__all__ = ["exit_now"]


def exit_now(code: int = 0) -> NoReturn:
    """Flush logging and stdout/stderr (errors ignored), then ``os._exit(code)``."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # closed or None
            stream.flush()
    os._exit(code)
