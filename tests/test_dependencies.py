"""pyproject.toml's lower bounds: the floors install together, and .ci/lowest.txt (the set
tested together, README) pins exactly them."""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def _floors() -> dict[str, Version]:
    """Each core and ``s3`` dependency's lower bound (``>=``), by canonical name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floors = {}
    for line in [*project["dependencies"], *project["optional-dependencies"]["s3"]]:
        req = Requirement(line)
        (low,) = [Version(s.version) for s in req.specifier if s.operator == ">="]
        floors[canonicalize_name(req.name)] = low
    return floors


def test_each_floor_admits_the_others():
    """A dependency installed at its floor accepts every other floor (its own metadata):
    zarr 3.1.6 requires numpy>=2.0, so numpy>=1.26 was a floor nothing could install."""
    floors = _floors()
    at_floor = []
    for name, floor in floors.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(dist.version).public != floor.public:
            continue  # a newer release's requirements say nothing about the floor's
        at_floor.append(name)
        for line in dist.requires or []:
            req = Requirement(line)
            other = canonicalize_name(req.name)
            if other not in floors or (req.marker and not req.marker.evaluate({"extra": ""})):
                continue
            assert req.specifier.contains(floors[other], prereleases=True), (
                f"{name} {floor} (pyproject's floor) requires {req}, which refuses "
                f"{other} {floors[other]} (pyproject's floor): raise one of the two"
            )
    if not at_floor:
        pytest.skip("no dependency is installed at its floor here (.ci/lowest.txt makes one)")


def test_the_tested_set_is_the_floors():
    pins = {}
    for line in (ROOT / ".ci" / "lowest.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (pin,) = [Version(s.version) for s in req.specifier if s.operator == "=="]
            pins[canonicalize_name(req.name)] = pin
    floors = _floors()
    del floors["torch"]  # only torch 2.13.0 installs on these machines
    assert pins == floors
