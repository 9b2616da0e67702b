"""One answer to "does numba run here?" for every switch, and one error for unknown names.

A numba that is installed but fails to import (a fake package raising ImportError stands
in for a numba built against another numpy) used to make the neighbor sums fall back while
ACSF's ``auto`` chose numba (its check only looked for the package) and raised the raw
ImportError; now every switch asks :mod:`dparallel.kernels._backends.availability`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import ase
import numpy as np
import pytest
import torch

from dparallel.descriptors import ACSF
from dparallel.descriptors.registry import descriptor_kind
from dparallel.errors import BackendUnavailableError
from dparallel.kernels import neighbor_sums as ns
from dparallel.kernels._backends import availability
from dparallel.neighbors import neighbor_list
from dparallel.types import StructureBatch

ROOT = Path(__file__).resolve().parents[2]
BROKEN = "ImportError: numba is broken here (numpy version mismatch)"


def _acsf() -> ACSF:
    return ACSF.uniform(
        ["H", "O"], 3.5, radial=[(0.5, 0.0), (1.0, 1.0)], narrow=[(0.1, 1.0, -1.0, 0.0)]
    )


def _structures() -> list[ase.Atoms]:
    rng = np.random.default_rng(7)
    water = ase.Atoms("OH2H2O", positions=rng.uniform(0, 3.0, (6, 3)))
    crystal = ase.Atoms("OH3", positions=rng.uniform(0, 3.2, (4, 3)), cell=[3.2] * 3, pbc=True)
    return [water, crystal]


SCRIPT = """
import logging, sys
import numpy as np
logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
sys.path.insert(0, {tests!r})
from test_numba_unavailable import _acsf, _structures
from dparallel.errors import BackendUnavailableError
from dparallel.kernels import neighbor_sums as ns
acsf = _acsf()
print("AUTO", acsf.resolve_backend("auto"))
out = acsf.compute(_structures(), derivatives=True)
out = acsf.compute(_structures(), derivatives=True)  # the warning is logged once
np.savez({npz!r}, **{{e: out[e].values.numpy() for e in acsf.elements}})
try:
    acsf.compute(_structures(), backend="numba")
except BackendUnavailableError as exc:
    print("EXPLICIT", exc)
print("SUMS", ns.available_backends())
"""


def test_broken_numba_turns_every_compiled_route_off(tmp_path: Path) -> None:
    fake = tmp_path / "fake" / "numba"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(f"raise ImportError({BROKEN.split(': ', 1)[1]!r})\n")
    npz = tmp_path / "values.npz"
    script = SCRIPT.format(tests=str(Path(__file__).parent), npz=str(npz))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(ROOT)])}
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert "AUTO torch" in lines
    assert sum("numba cannot be imported (" + BROKEN in line for line in lines) == 1
    explicit = next(line for line in lines if line.startswith("EXPLICIT"))
    assert explicit == (
        f"EXPLICIT ACSF backend 'numba' needs numba, which cannot be imported here ({BROKEN}); "
        "reinstall numba (pip install --force-reinstall numba) or use backend='torch' or 'auto'"
    )
    assert "'numba'" not in next(line for line in lines if line.startswith("SUMS"))
    # the same numbers as here, where numba runs (small-cell neighbour list, compiled kernel)
    acsf = _acsf()
    expected = acsf.compute(_structures(), backend="numba")
    got = np.load(npz)
    for e in acsf.elements:
        np.testing.assert_allclose(got[e], expected[e].values, rtol=1e-12, atol=1e-12)


def test_every_switch_asks_the_one_probe(monkeypatch, caplog) -> None:
    """In process: a failed probe makes ACSF 'auto' torch, drops the registry's compiled
    route, the neighbor sums' numba backend and the compiled neighbour list."""
    monkeypatch.setitem(availability.PROBED, "numba", BROKEN)
    monkeypatch.setattr(ns, "_selected", None)
    monkeypatch.setattr(ns, "_modules", {})
    monkeypatch.setattr(ns, "_import_errors", {})
    monkeypatch.delenv(ns.ENV_VAR, raising=False)
    assert ACSF.resolve_backend("auto") == "torch"
    kind = descriptor_kind("acsf")
    assert kind.numpy_route is not None and not kind.numpy_route()
    assert "numba" not in ns.available_backends()
    assert ns.get_backend() == "chunked"
    with pytest.raises(BackendUnavailableError, match=r"kernel backend 'numba'.*numba is broken"):
        ns.set_backend("numba")
    with pytest.raises(BackendUnavailableError, match=r"needs numba, which cannot be imported"):
        ACSF.resolve_backend("numba")
    batch = StructureBatch.from_ase(_structures())
    monkeypatch.setattr("dparallel.neighbors._small_cells._compiled", _no_numba)
    assert neighbor_list(batch, 3.5).n_pairs > 0  # vesin: the compiled path is not called


def _no_numba() -> None:
    raise AssertionError("the compiled small-cell path ran without numba")


def test_unknown_backend_names_one_error_shape() -> None:
    with pytest.raises(BackendUnavailableError) as acsf_error:
        _acsf().compute(_structures(), backend="cuda")
    with pytest.raises(BackendUnavailableError) as sums_error:
        ns.envsum(torch.zeros(1, 1), torch.zeros(2, 1), torch.tensor([0]), torch.tensor([1]),
                  backend="cuda")  # fmt: skip
    assert str(acsf_error.value) == (
        "unknown ACSF backend 'cuda' (from backend= argument); "
        "expected one of 'auto', 'torch', 'numba', 'triton'"
    )
    from dparallel.deploy import DeployedModel
    from dparallel.train import HDNNP

    acsf = _acsf()
    net = HDNNP(acsf.elements, {e: acsf.n_features(e) for e in acsf.elements}, hidden=(4,))
    with pytest.raises(BackendUnavailableError) as deployed_error:
        DeployedModel(acsf, net.double(), torch.float64).predict(
            StructureBatch.from_ase(_structures()), backend="cuda"
        )
    assert str(deployed_error.value) == str(acsf_error.value)
    assert str(sums_error.value) == (
        "unknown kernel backend 'cuda' (from backend= argument); "
        "expected one of 'auto', 'torch', 'chunked', 'numba', 'triton'"
    )
