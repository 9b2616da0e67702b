"""Run Triton kernels on CPU in tests: TRITON_INTERPRET=1 before triton is first imported.

``triton.jit`` reads the variable when a kernel (and triton's own library) is defined, so
it must be set before triton is imported. Importing this helper sets it when there is no
CUDA device and triton is not yet imported; :data:`IN_PROCESS` says whether Triton kernels
can run in this process. Where they cannot (something imported triton earlier in the
session), a test module re-runs itself in a child process (:func:`run_in_child`).
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

ENV_BEFORE = os.environ.get("TRITON_INTERPRET")
ON_GPU = torch.cuda.is_available()
if not ON_GPU and "triton" not in sys.modules:
    os.environ["TRITON_INTERPRET"] = "1"
#: Whether Triton kernels can run in this process.
IN_PROCESS = ON_GPU or os.environ.get("TRITON_INTERPRET") == "1"
SKIP_REASON = "triton was imported without TRITON_INTERPRET: runs in a child process"


def restore_environment() -> None:
    """TRITON_INTERPRET as it was before this helper (triton stays as loaded)."""
    if ENV_BEFORE is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = ENV_BEFORE


def run_in_child(path: str) -> None:
    """Run the test module ``path`` in a child process with TRITON_INTERPRET=1; assert it passes."""
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    cmd = [sys.executable, "-m", "pytest", path, "-q", "-x", "-p", "no:cacheprovider"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout
