"""The Python example at the top of docs/training.md runs as written (on a small store,
with fewer epochs): train, then the ASE calculator on the model directory."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from _store_fixture import small_store
from ase.build import bulk

if TYPE_CHECKING:
    import pytest

DOCS = Path(__file__).parents[2] / "docs" / "training.md"


def test_the_first_python_example_trains_and_calculates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # it trained into "model" and set Calculator("model") at once: "model holds no
    # deployed.pt: run `dparallel export model` first"
    text = DOCS.read_text()
    start = text.index("```python")
    example = text[start + len("```python") : text.index("```", start + 3)]
    assert 'train("cu.zarr", "model", TrainingSpec(epochs=300))' in example
    store = small_store(tmp_path, n=8)
    example = example.replace('"cu.zarr"', repr(str(store.path)))
    example = re.sub(r"epochs=300", "epochs=2, hidden=(4,), batch_size=4", example)
    monkeypatch.chdir(tmp_path)
    atoms = bulk("Cu", "fcc", a=3.6, cubic=True)
    namespace = {"atoms": atoms}
    exec(compile(example, str(DOCS), "exec"), namespace)  # our own docs
    assert np.isfinite(atoms.get_potential_energy())
    assert atoms.get_forces().shape == (4, 3)


def test_every_training_key_is_in_the_configuration_table() -> None:
    # weight_decay, plateau_factor and plateau_patience were keys without a row
    from dparallel.train import TrainingSpec

    text = DOCS.read_text()
    table = text[text.index("## Configuration (`TrainingSpec`") : text.index("## EMT Cu accuracy")]
    rows = {
        key
        for cell in re.findall(r"^\| ([^|]+) \|", table, re.M)
        for key in re.findall(r"`(\w+)`", cell)
    }
    assert set(TrainingSpec.model_fields) <= rows, set(TrainingSpec.model_fields) - rows
    assert rows <= set(TrainingSpec.model_fields), rows - set(TrainingSpec.model_fields)
