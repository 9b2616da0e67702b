"""``data_units.json``: the units and label keys of a model's training data."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from dparallel.errors import TrainingError
from dparallel.train.data_units import recorded_data_units, recorded_label_keys

if TYPE_CHECKING:
    from pathlib import Path


def test_a_torn_record_is_an_error_not_ase_units(tmp_path: Path) -> None:
    """A ``data_units.json`` cut short was read as none: a model of Bohr/Hartree data was
    evaluated on its data read as Å/eV, silently (found by fuzzing model directories).
    No file still means ASE's units and the default keys."""
    assert recorded_data_units(tmp_path) is None and recorded_label_keys(tmp_path) == {}
    record = tmp_path / "data_units.json"
    text = '{\n "data_units": "bohr-hartree",\n "energy_key": "dft_energy"\n}\n'
    record.write_text(text)
    assert recorded_data_units(tmp_path) == "bohr-hartree"
    for torn in (text[:20], "", "[1, 2]"):
        record.write_text(torn)
        with pytest.raises(TrainingError, match=rf"^{record}: not the JSON object dparallel"):
            recorded_data_units(tmp_path / "deployed.pt")
        with pytest.raises(TrainingError, match="truncated or corrupt"):
            recorded_label_keys(tmp_path)
