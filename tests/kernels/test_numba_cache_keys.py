"""numba's on-disk cache is keyed on the source file of each compiled function only, not on
the numba code it calls in other files (that code is compiled into the caller's cache
entry). Each kernel module that calls into another therefore records the digests of the
kernel modules it imports (``_CALLEE_DIGESTS``), so that its own source, and with it its
cache key, changes whenever one of them does; this test keeps those digests current."""

from __future__ import annotations

import ast
import hashlib
import importlib
from pathlib import Path

import pytest

import dparallel.kernels

KERNELS = Path(dparallel.kernels.__file__).parent
COMPILED = ["acsf_numba", "acsf_angular_numba", "acsf_force_numba", "acsf_radial_numba",
            "mlp_numba"]  # fmt: skip


def digest(module: str) -> str:
    """First 12 hex digits of the sha256 of a kernel module's source file."""
    return hashlib.sha256((KERNELS / f"{module}.py").read_bytes()).hexdigest()[:12]


def kernel_imports(module: str) -> set[str]:
    """The ``dparallel.kernels`` modules that ``module`` imports, anywhere in its source."""
    tree = ast.parse((KERNELS / f"{module}.py").read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "dparallel.kernels."
        ):
            found.add(node.module.split(".")[2])
    return found


@pytest.mark.parametrize("module", COMPILED)
def test_callee_digests_name_every_imported_kernel_module_and_match_its_source(module) -> None:  # noqa: ANN001
    pytest.importorskip("numba")
    recorded = importlib.import_module(f"dparallel.kernels.{module}")._CALLEE_DIGESTS
    assert set(recorded) == kernel_imports(module)
    current = {name: digest(name) for name in recorded}
    assert recorded == current, (
        f"update _CALLEE_DIGESTS in dparallel/kernels/{module}.py to {current} "
        "(a kernel module it calls changed; numba would reuse stale compiled code)"
    )


def test_every_kernel_module_with_cross_module_numba_calls_is_checked() -> None:
    compiled = {p.stem for p in KERNELS.glob("*.py") if "_CALLEE_DIGESTS" in p.read_text()}
    assert compiled == set(COMPILED)
