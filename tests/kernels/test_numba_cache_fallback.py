"""numba caches a ``cache=True`` function beside its source or in ``~/.cache/numba``; an
install whose site-packages and home are both read-only (a container, a shared venv) has
neither, and numba then refuses to compile the function at all. dparallel's functions fall
back to dparallel's cache folder (:func:`cache_anywhere`), and a second process loads them
from there instead of compiling again."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pathlib import Path

pytest.importorskip("numba")

# numba's own locators that write beside the sources and in the home folder are taken out:
# what a read-only site-packages and a read-only home leave (root writes through modes)
RUN = """import warnings
warnings.simplefilter("always")
from numba.core import caching
impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl
impl._locator_classes[:] = [
    c for c in impl._locator_classes if "InTree" not in c.__name__ and "UserWide" not in c.__name__
]
import numpy as np
from dparallel.kernels._numba_jit import _reduce_dot
a = np.arange(5.0)
print(_reduce_dot(a, a, 5), sum(_reduce_dot.stats.cache_hits.values()))
"""


def _run(tmp_path: Path, cache: str) -> tuple[float, int, str]:
    """The kernel's result, numba's cache hits and stderr in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=os.pathsep.join(sys.path), DPARALLEL_CACHE_DIR=cache)
    env["TMPDIR"] = str(tmp_path / "tmp")
    out = subprocess.run(
        [sys.executable, "-c", RUN], capture_output=True, text=True, timeout=300, env=env,
        check=True,
    )  # fmt: skip
    value, hits = out.stdout.split()
    return float(value), int(hits), out.stderr


@pytest.mark.slow
def test_kernels_cache_in_dparallels_folder_when_numba_has_none(tmp_path: Path) -> None:
    own = tmp_path / "own"
    assert _run(tmp_path, str(own))[:2] == (30.0, 0)  # Σ q² for q < 5, compiled
    value, hits, err = _run(tmp_path, str(own))
    assert (value, hits > 0, "warning" in err.lower()) == (30.0, True, False)
    assert list((own / "numba").rglob("*.nbi"))


@pytest.mark.slow
def test_the_temporary_folder_serves_last_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "tmp").mkdir()
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # DPARALLEL_CACHE_DIR under a file: cannot be made
    _run(tmp_path, str(blocked / "cache"))
    value, hits, err = _run(tmp_path, str(blocked / "cache"))
    assert (value, hits > 0) == (30.0, True)
    folder = tmp_path / "tmp" / f"dparallel-{os.getuid()}" / "numba"
    assert list(folder.rglob("*.nbi"))
    assert err.count(f"cached in {folder} (set DPARALLEL_CACHE_DIR") == 1
