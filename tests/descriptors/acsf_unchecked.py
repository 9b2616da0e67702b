"""Bypass ACSF's parameter check in tests of the kernels' semantics.

n2p2's formulas take any real ζ, λ and η and the kernels implement that; ``ACSF`` refuses
λ ≠ ±1 and η < 0 (issue 29: outside the domain the functions have a meaning in), so the
kernel tests that cover those values build their ACSF through this bypass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dparallel.descriptors.acsf as acsf_module

if TYPE_CHECKING:
    import pytest


def allow_any_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let ACSF build features with any finite ζ, λ, η for the rest of the test."""
    original = acsf_module.feature_spec

    def feature(center, neighbors, f, lenient=False):  # noqa: ANN001, ANN202
        angular = int(f["type"]) != 2
        checked = {**f, "eta": 0.0, **({"zeta": 1.0, "lambda": 1.0} if angular else {})}
        out = original(center, neighbors, checked)
        out["eta"] = float(f["eta"])
        if angular:
            out["zeta"], out["lambda"] = float(f["zeta"]), float(f["lambda"])
        return out

    monkeypatch.setattr(acsf_module, "feature_spec", feature)
