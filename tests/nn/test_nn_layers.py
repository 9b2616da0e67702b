"""The network layer's place in the import order: nn/ below train/, train/ without the dashboard."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dparallel

ROOT = Path(dparallel.__file__).parent
#: What nn/ may import: the bottom layer, io/kernels/datasets, neighbors/, descriptors/, itself.
_NN_MAY_IMPORT = (
    "dparallel.errors", "dparallel.types", "dparallel.config", "dparallel._lazy",
    "dparallel._exit", "dparallel.io", "dparallel.kernels", "dparallel.datasets",
    "dparallel.neighbors", "dparallel.descriptors", "dparallel.nn",
)  # fmt: skip
#: Packages and modules above train/ (they may import it).
_ABOVE_TRAIN = ("train", "workflow", "cli", "ase.py", "__main__.py")


def _imports(path: Path) -> set[str]:
    """Every dparallel module ``path`` imports, at module level, in functions or for types."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m == "dparallel" or m.startswith("dparallel.")}


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _files(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (ROOT / part).rglob("*.py"))


@pytest.mark.parametrize("path", _files("nn"), ids=lambda p: p.name)
def test_nn_imports_only_lower_layers(path: Path) -> None:
    bad = sorted(m for m in _imports(path) if m != "dparallel" and not _within(m, _NN_MAY_IMPORT))
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_nothing_below_train_imports_train() -> None:
    below = [p for p in ROOT.rglob("*.py") if p.relative_to(ROOT).parts[0] not in _ABOVE_TRAIN]
    assert any(p.parts[-2] == "n2p2" for p in below)  # the walk found the lower layers
    bad = {
        str(p.relative_to(ROOT)): sorted(m for m in _imports(p) if _within(m, ("dparallel.train",)))
        for p in below
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_train_reports_through_callbacks_not_the_dashboard() -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(
            m
            for m in _imports(p)
            if _within(m, ("dparallel.dashboard", "dparallel.workflow", "dparallel.cli"))
        )
        for p in _files("train")
    }
    assert {k: v for k, v in bad.items() if v} == {}


def test_kalman_takes_the_public_loss_not_the_loop() -> None:
    imports = _imports(ROOT / "train" / "kalman.py")
    assert "dparallel.train.objective" in imports
    assert not any(_within(m, ("dparallel.train.loop",)) for m in imports)
