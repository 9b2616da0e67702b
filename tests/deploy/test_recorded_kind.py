"""The descriptor type of a model or deployed file: one reading (``registry.recorded_kind``),
with one default for files written before they named it, and every reader builds the
descriptor through the registry, never through a class it names itself."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch
from _deploy_models import hco_acsf, write_model_dir

from dparallel.deploy import load_deployed
from dparallel.descriptors import ACSF
from dparallel.descriptors.registry import (
    LEGACY_KIND,
    current_spec_keys,
    descriptor_kind,
    recorded_kind,
    register,
)
from dparallel.n2p2.potential import export_model_dir
from dparallel.train.export import export_model

ROOT = Path(__file__).resolve().parents[2]


def _drop_kind(path: Path) -> None:
    data = torch.load(path, weights_only=False)
    del data["descriptor_kind"]
    torch.save(data, path)


def test_recorded_kind_defaults_to_the_legacy_type() -> None:
    assert recorded_kind({}).name == LEGACY_KIND == "acsf"
    assert recorded_kind({"descriptor_kind": None}).name == "acsf"
    assert recorded_kind({"descriptor_kind": "neighbor_sum"}).name == "neighbor_sum"


def test_the_legacy_kind_key_reads_as_type() -> None:
    spec = hco_acsf().to_dict()
    legacy = {("kind" if k == "type" else k): v for k, v in spec.items()}
    assert current_spec_keys(legacy) == spec
    assert ACSF.from_dict(legacy).to_dict() == spec
    other = {"kind": "gaussian", "r_cut": 4.0}  # a neighbor_sum's cutoff kind: not the type
    assert current_spec_keys(other) is other


def test_a_model_file_without_descriptor_kind_exports_as_acsf(tmp_path: Path) -> None:
    """export and the deployed model agree on a file that names no type: it is ACSF
    (export read it as the type 'None' and refused it)."""
    model_dir = write_model_dir(tmp_path / "m", hco_acsf())
    _drop_kind(model_dir / "model.pt")
    report = export_model(model_dir, artifacts=False)
    assert report["descriptor"] == "acsf"
    _drop_kind(model_dir / "deployed.pt")
    assert isinstance(load_deployed(model_dir / "deployed.pt").descriptor, ACSF)
    assert (Path(export_model_dir(model_dir)["directory"]) / "input.nn").is_file()


def test_n2p2_export_builds_the_descriptor_through_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built: list[object] = []

    class Traced(ACSF):
        @classmethod
        def from_dict(cls, spec: dict) -> ACSF:
            built.append(spec)
            return ACSF.from_dict(spec)

    acsf = descriptor_kind("acsf")
    register(dataclasses.replace(acsf, load=lambda: Traced), replace=True)
    try:
        model_dir = write_model_dir(tmp_path / "m", hco_acsf())
        export_model_dir(model_dir)
    finally:
        register(acsf, replace=True)
    assert built, "the n2p2 export built its ACSF without the registry"


def test_no_module_outside_descriptors_builds_acsf_from_a_dict() -> None:
    """``descriptor_kind(name).from_dict`` is the seam; ``ACSF.from_dict`` bypasses it."""
    for path in (ROOT / "dparallel").rglob("*.py"):
        if path.parent.name == "descriptors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "from_dict"
                and isinstance(node.value, ast.Name)
                and node.value.id == "ACSF"
            ):
                pytest.fail(f"{path}:{node.lineno} calls ACSF.from_dict")
