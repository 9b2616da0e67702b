"""Run Triton kernels on CPU in tests: TRITON_INTERPRET=1 before triton is first imported.

``triton.jit`` reads the variable when a kernel (and triton's own library) is defined, so
it must be set before triton is imported. A test module calls :func:`setup` from a
module-scoped fixture (at run time, not at collection, so other modules collected in the
same session see the environment as it was) and :func:`restore` after it; :func:`setup`
says whether Triton kernels can run in this process. Where they cannot (something
imported triton earlier in the session without the variable), the module re-runs itself
in a child process (:func:`run_in_child`). Test modules check that triton is installed
with ``importlib.util.find_spec`` rather than importing it at collection.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

from dparallel.config import restore_environ

SKIP_REASON = "triton was imported without TRITON_INTERPRET: runs in a child process"
_state: dict[str, str | None] = {}
_interpreted: list[bool] = []  # [True] once triton may have been imported under the variable


def skip_without_triton() -> None:
    """Skip the calling test module when triton is not installed (without importing it)."""
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton not installed", allow_module_level=True)


def setup() -> bool:
    """Set TRITON_INTERPRET=1 if there is no CUDA device and triton is not yet imported;
    whether Triton kernels can run in this process."""
    _state["before"] = os.environ.get("TRITON_INTERPRET")
    if torch.cuda.is_available():
        return True
    if "triton" not in sys.modules or _interpreted:  # (again, for an earlier module)
        os.environ["TRITON_INTERPRET"] = "1"
        _interpreted[:] = [True]
    return os.environ.get("TRITON_INTERPRET") == "1"


def restore() -> None:
    """TRITON_INTERPRET as it was before :func:`setup` (triton stays as loaded)."""
    restore_environ({"TRITON_INTERPRET": _state.get("before")})


#: The test that re-runs its module in a child process where the kernels cannot run here.
CHILD_TEST = "test_module_in_child_process"


def skip_unless_here(request: pytest.FixtureRequest, in_process: bool) -> None:
    """Skip a test of a module whose kernels cannot run in this process (all but the
    module's :data:`CHILD_TEST`, which runs them in a child: :func:`module_in_child`)."""
    if not in_process and request.node.name != CHILD_TEST:
        pytest.skip(SKIP_REASON)


def module_in_child(path: str, in_process: bool) -> None:
    """The module's :data:`CHILD_TEST`: its tests again in a child process, unless they ran
    in this one."""
    if in_process:
        pytest.skip("the tests above ran in this process")
    run_in_child(path)


def run_in_child(path: str) -> None:
    """Run the test module ``path`` in a child process with TRITON_INTERPRET=1; assert it passes."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-m", "pytest", path, "-q", "-x", "-p", "no:cacheprovider"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
