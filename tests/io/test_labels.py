"""Labels an extxyz file holds under keys dparallel does not read: said once, with the fix."""

from __future__ import annotations

import logging
import re

import ase.io
import numpy as np
import pytest

from dparallel.io import open_source

_FRAME = "2\n{comment}\nO 0 0 0{f}\nH 0 0 0.97{f}\n"
_P = "Properties=species:S:1:pos:R:3"


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    ("comment", "said"),
    [
        (f"{_P}:forces:R:3 free_energy=-1.5", r"free_energy=-1.5 is not read as the energy"),
        (f"{_P}:forces:R:3 dft_energy=-1.5", r"dft_energy=-1.5 is not read as the energy"),
        (f"{_P}:forces:I:3 dft_energy=-1.5", r"dft_energy=-1.5 is not read"),  # ASE's path
        (f"{_P}:force:R:3 energy=-1.5", r"column 'force' is not read as the forces"),
        (f"{_P}:dft_forces:R:3 energy=-1.5", r"column 'dft_forces' is not read as the forces"),
        (
            f"{_P}:REF_forces:R:3 energy=-1.2 REF_energy=-1.5",
            r"both energy=-1.2 and REF_energy=-1.5: dparallel reads energy",
        ),
    ],
)
def test_an_unread_label_is_said_once_naming_file_line_and_fix(tmp_path, caplog, comment, said):
    """ASE leaves these labels out too (``get_potential_energy`` fails, ``get_forces`` is
    absent), so the structures are stored without them; a user whose reference energies are
    under another key learnt that only from training on nothing."""
    path = tmp_path / "labels.xyz"
    path.write_text(_FRAME.format(comment=comment, f=" 1 2 3") * 3)
    with caplog.at_level(logging.WARNING, logger="dparallel.io"):
        batch = open_source(path).read()
        open_source(path).read(1, 3)  # the same file again in this process: not repeated
    for k, atoms in enumerate(ase.io.read(path, ":")):  # stored: what ASE reads as labels
        results = atoms.calc.results if atoms.calc else {}
        assert np.isnan(batch.energy[k]) == ("energy" not in results)
        if "REF_forces" not in comment:
            assert np.isnan(batch.forces[2 * k]).all() == ("forces" not in results)
    said_here = [m for m in _warnings(caplog) if "not read" in m or "both" in m]
    assert len(said_here) == 1, said_here
    assert said_here[0].startswith(f"{path}, line 2, structure 0: "), said_here
    assert re.search(said, said_here[0]), said_here
    assert "rename" in said_here[0]
    assert batch.n_structures == 3


@pytest.mark.parametrize(
    "comment",
    [
        f"{_P}:forces:R:3 energy=-1.5 free_energy=-1.6",  # ASE's own writing of a calculator
        f"{_P}:REF_forces:R:3 REF_energy=-1.5 MACE_energy=-1.4",  # a model's beside the reference
        f"{_P}:REF_forces:R:3 energy=-1.5 REF_energy=-1.5",
        "plain xyz comment",  # no labels at all: nothing to say
    ],
)
def test_labels_read_as_meant_are_not_reported(tmp_path, caplog, comment):
    path = tmp_path / "fine.xyz"
    path.write_text(_FRAME.format(comment=comment, f="" if "plain" in comment else " 1 2 3"))
    with caplog.at_level(logging.WARNING, logger="dparallel.io"):
        batch = open_source(path).read()
    assert _warnings(caplog) == []
    assert np.isfinite(batch.energy).all() == ("energy" in comment)


def test_opening_the_file_says_it_in_the_process_that_opens_it(tmp_path, caplog):
    """``featurize`` reads in Dask workers, whose warnings go to the log file only: opening
    the source (in the process that starts the run) looks at the first structure."""
    path = tmp_path / "labels.xyz"
    path.write_text(_FRAME.format(comment=f"{_P}:forces:R:3 dft_energy=-1.5", f=" 1 2 3"))
    with caplog.at_level(logging.WARNING, logger="dparallel.io"):
        open_source(path)
    assert any("dft_energy=-1.5 is not read" in m for m in _warnings(caplog))
