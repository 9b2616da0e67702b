"""numba's import-time BLAS check answers without importing ``scipy.linalg`` (~0.2 s of CPU
on the path to the first featurize worker), with numba's own answer; numba code that does
use BLAS still compiles and computes as numpy does."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("numba")

from dparallel.kernels import _numba_blas

RUN = """import json, sys
import numpy as np
from dparallel.kernels._numba_jit import _reduce_dot
a = np.arange(5.0)
_reduce_dot(a, a, 5)  # numba's CPU target in use: its BLAS check has run
import numba
from numba.np import arraymath
out = {"linalg_imported": "scipy.linalg" in sys.modules, "have_blas": arraymath._HAVE_BLAS}
try:
    import scipy.linalg.cython_blas  # numba's own question, asked in full
    out["reference"] = True
except ImportError:
    out["reference"] = False

@numba.njit
def uses_blas(x, y, m):
    return np.dot(x, y), np.correlate(x, y), m @ m

x, y = np.linspace(0.1, 2.0, 7), np.cos(np.arange(7.0))
m = np.arange(9.0).reshape(3, 3) / 7
d, c, mm = uses_blas(x, y, m)
out["dot"] = [float(d), float(np.dot(x, y))]
out["correlate"] = [c.tolist(), np.correlate(x, y).tolist()]
out["matmul"] = [mm.tolist(), (m @ m).tolist()]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh() -> dict:
    """What a fresh interpreter that ran a dparallel kernel, then BLAS code, reports."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", RUN], capture_output=True, text=True, timeout=300, env=env,
        check=True,
    )  # fmt: skip
    return json.loads(done.stdout)


def test_a_kernel_leaves_scipy_linalg_unimported(fresh: dict) -> None:
    assert not fresh["linalg_imported"]
    assert fresh["have_blas"] == fresh["reference"]


def test_blas_code_still_computes_as_numpy(fresh: dict) -> None:
    if not fresh["reference"]:
        pytest.skip("no scipy.linalg.cython_blas: numba compiles no BLAS code")
    for name in ("dot", "correlate", "matmul"):
        ours, numpys = fresh[name]
        np.testing.assert_allclose(ours, numpys, rtol=1e-13, atol=1e-15)


def test_cython_blas_found_without_import(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    assert _numba_blas.cython_blas_present() == (
        importlib.util.find_spec("scipy.linalg.cython_blas") is not None
    )
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)  # no scipy
    assert not _numba_blas.cython_blas_present()
