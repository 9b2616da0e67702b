"""Bypass ACSF's parameter check in tests (issue 13 makes ACSF accept what n2p2 accepts).

n2p2 takes any real ζ (also < 1, 0, negative integers), any real λ and η; the kernels
implement that, but ``ACSF`` still refuses ζ < 1, λ ≠ ±1 and η < 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import dparallel.descriptors.acsf as acsf_module

if TYPE_CHECKING:
    import pytest


def allow_any_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let ACSF build features with any finite ζ, λ, η for the rest of the test."""
    original = acsf_module._feature

    def feature(type_, center, neighbors, eta, rs, rc, cutoff, alpha, zeta=None, lambda_=None):  # noqa: ANN001, ANN202
        angular = (1.0, 1.0) if type_ != 2 else ()
        f = original(type_, center, neighbors, 0.0, rs, rc, cutoff, alpha, *angular)
        f["eta"] = float(eta)
        if type_ != 2:
            f["zeta"], f["lambda"] = float(zeta), float(lambda_)
        return f

    monkeypatch.setattr(acsf_module, "_feature", feature)
