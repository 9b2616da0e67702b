"""Reading the symmetry functions of an n2p2 input.nn into an ACSF (n2p2's rules; n2p2 itself:
test_input_nn.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import ase
import numpy as np
import pytest
from descriptors.acsf_reference import reference  # tests/descriptors (tests/ is on sys.path)

from dparallel.descriptors import ACSF
from dparallel.errors import InputFormatError, SourceNotFoundError
from dparallel.n2p2 import acsf_from_input_nn

if TYPE_CHECKING:
    from pathlib import Path

INPUT_NN = """\
# n2p2 input.nn excerpt
number_of_elements 2
elements O H                       # element order: n2p2 sorts by atomic number
cutoff_type 6 0.2
global_hidden_layers_short 2       ! '!' starts a comment too
symfunction_short H 2 H 0.5 0.0 6.0
symfunction_short H 2 O 0.3 0.9 6.0
symfunction_short H 3 O H 0.05 -1.0 2.0 6.0
symfunction_short H 9 H O 0.02 1.0 4.0 5.0 0.7
symfunction_short O 2 H 0.5 0.8 6.0
symfunction_short O 3 H H 0.05 -1.0 2.0 6.0 1.0
symfunction O 9 H H 0.05 -1.0 2.0 6.0     # 'symfunction' is n2p2's alias
"""
HEAD = "number_of_elements 1\nelements H\ncutoff_type 1\n"


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "input.nn"
    path.write_text(text)
    return str(path)


def test_parse_metadata_sorted_order_and_values(tmp_path: Path) -> None:
    acsf = acsf_from_input_nn(
        _write(tmp_path, INPUT_NN.replace("symfunction_short", "symfunction"))
    )
    assert acsf.elements == ["H", "O"] and acsf.r_cut == 6.0 and acsf.order == "n2p2"
    assert acsf.n_features("H") == 4 and acsf.n_features("O") == 3
    h = acsf.features("H")
    # n2p2 order: type, cutoff, alpha, rc, eta, rs, zeta, lambda, neighbours by Z
    assert [(f["type"], f["eta"], f["neighbors"]) for f in h] == [
        (2, 0.3, ["O"]),
        (2, 0.5, ["H"]),
        (3, 0.05, ["H", "O"]),
        (9, 0.02, ["H", "O"]),
    ]
    assert h[2] == {
        "type": 3,
        "center": "H",
        "neighbors": ["H", "O"],
        "eta": 0.05,
        "rs": 0.0,
        "zeta": 2.0,
        "lambda": -1.0,
        "rc": 6.0,
        "cutoff": "poly2",
        "alpha": 0.2,
    }
    assert h[3]["rs"] == 0.7 and h[3]["rc"] == 5.0 and h[3]["zeta"] == 4.0
    assert acsf.features("O")[1]["rs"] == 1.0 and acsf.features("O")[2]["type"] == 9
    given = acsf_from_input_nn(str(tmp_path / "input.nn"), order="given")
    assert [f["eta"] for f in given.features("H")] == [0.5, 0.3, 0.05, 0.02]
    assert given.n2p2_order("H") == [1, 0, 2, 3]
    assert ACSF.from_dict(acsf.to_dict()) == acsf and acsf.to_dict()["order"] == "n2p2"
    water = ase.Atoms("OHH", positions=[[0, 0, 0], [0.9572, 0, 0], [-0.2399872, 0.9266272, 0]])
    out = acsf.compute([water])
    for e, res in out.items():
        for row, atom in enumerate(res.atom_index.tolist()):
            np.testing.assert_allclose(
                res.values[row].numpy(), reference(water, acsf._features[e], atom), rtol=1e-12
            )


def test_unit_conversion(tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD + "symfunction_short H 2 H 0.5 2.0 10.0\n")
    bohr = 0.529177
    f = acsf_from_input_nn(path, unit=bohr).features("H")[0]
    assert f["rc"] == pytest.approx(10 * bohr) and f["rs"] == pytest.approx(2 * bohr)
    assert f["eta"] == pytest.approx(0.5 / bohr**2) and f["cutoff"] == "cos"
    from ase.units import Bohr

    g = acsf_from_input_nn(path, unit="bohr-hartree").features("H")[0]
    assert g["rc"] == 10 * Bohr and g["eta"] == 0.5 / Bohr**2


def test_angular_parameters_n2p2_accepts(tmp_path: Path) -> None:
    """ζ < 1, negative integer ζ, λ ≠ ±1 and η < 0 are read (n2p2 accepts them)."""
    lines = [
        "symfunction_short H 3 H H 0.05 0.5 0.5 6.0",
        "symfunction_short H 3 H H 0.05 2.0 -2 6.0",
        "symfunction_short H 9 H H -0.01 -3.0 0.0 6.0",
    ]
    acsf = acsf_from_input_nn(_write(tmp_path, HEAD + "\n".join(lines) + "\n"))
    params = sorted((f["eta"], f["zeta"], f["lambda"]) for f in acsf.features("H"))
    assert params == [(-0.01, 0.0, -3.0), (0.05, -2.0, 2.0), (0.05, 0.5, 0.5)]


@pytest.mark.parametrize(
    "text,message",
    [
        (HEAD + "symfunction_short H 4 H 0.5 0.0 6.0", "line 4: symmetry function type 4 is not"),
        (HEAD + "symfunction_short H 2 C 0.5 0.0 6.0", "line 4: element 'C' is not in the elem"),
        (HEAD + "symfunction_short H 3 H H 0.5 1.0 6.0", "line 4: type 3 expects"),
        (HEAD + "symfunction_short H 2 H x 0.0 6.0", "line 4: could not read a number"),
        (HEAD + "symfunction_short H 2 H 0.5 0.0 -1", "line 4: cutoff radius must be positive"),
        (HEAD + "symfunction_short H 2 H 0.5 0.0 60", "line 4: cutoff rc = 60 Å is beyond 50"),
        (HEAD + "symfunction_short H 12 0.5 0.0 6.0", "line 4: symmetry function type 12 is no"),
        (HEAD + "symfunction_short H 2.0 H 0.5 0.0 6.0", "line 4: symmetry function type must"),
        (HEAD + "symfunction_short H 2 H 1.0d0 0.0 6.0", "line 4: could not read a number"),
        (HEAD + "symfunction_short * 2 H 0.5 0.0 6.0", "line 4: element '\\*' is not in the"),
        ("number_of_elements 1\nelements H\ncutoff_type 1.5\n", "line 3: expected 'cutoff_type"),
        ("number_of_elements 1\nelements H\ncutoff_type 1 -0.1\n", "line 3: cutoff alpha must"),
        (HEAD + "symfunction_short H 20 H 1.0 6.0 p2", "line 4: symmetry function type 20 is no"),
        ("number_of_elements 1\nelements H\ncutoff_type 12\n", "line 3: cutoff_type 12 unknown"),
        ("number_of_elements 1\nelements H\ncutoff_type 1 1.0\n", "line 3: cutoff alpha must"),
        ("number_of_elements 2\nelements H\ncutoff_type 1\n", "line 1: says 2 elements"),
        ("number_of_elements 1\nelements Hx\ncutoff_type 1\n", "line 2: 'Hx' is not a chem"),
        ("number_of_elements 1\nelements H\n", "keyword 'cutoff_type' not found"),
        ("number_of_elements 1\ncutoff_type 1\n", "keyword 'elements' not found"),
        ("elements H\ncutoff_type 1\n", "keyword 'number_of_elements' not found"),
        (HEAD + "cutoff_type 2\n", "line 4: n2p2 stops on this file.*'cutoff_type' appears 2"),
        (
            HEAD + "symfunction H 2 H 0.5 0.0 6.0\nsymfunction_short H 2 H 0.4 0.0 6.0\n",
            "'symfunction' and 'symfunction_short' are two spellings",
        ),
        (
            HEAD + "symfunction_short H 2 H 0.5 0.0 6.0\nsymfunction_short H 2 H 0.4 0.0 6.0\n"
            "symfunction_short H 2 H 0.50 0 6\n",
            r"line 6: the same symmetry function as line 4 \(type 2 of H\).*remove one; got "
            "'symfunction_short H 2 H 0.50 0 6'",
        ),
        (
            "number_of_elements 2\nelements H O\ncutoff_type 1\n"
            "symfunction_short H 9 O H 0.05 -1.0 2.0 6.0\n"
            "symfunction_short H 9 H O 0.05 -1 2 6.0 0.0\n",
            r"line 5: the same symmetry function as line 4 \(type 9 of H\)",
        ),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputFormatError, match=message) as info:
        acsf_from_input_nn(path)
    assert str(info.value).startswith(path)


def test_keywords_are_case_sensitive_and_unknown_ones_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """n2p2 reads 'Elements' as an unknown keyword (warning), so 'elements' is missing."""
    path = _write(tmp_path, "number_of_elements 1\nElements H\ncutoff_type 1\n")
    with caplog.at_level(logging.WARNING), pytest.raises(InputFormatError, match="'elements'"):
        acsf_from_input_nn(path)
    assert "'Elements' (line 2)" in caplog.text


def test_extra_words_are_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, HEAD + "symfunction_short H 2 H 0.5 0.0 6.0 7.0\n")
    with caplog.at_level(logging.WARNING):
        acsf = acsf_from_input_nn(path)
    assert acsf.features("H")[0]["rc"] == 6.0
    assert "line 4: 1 extra words ignored" in caplog.text


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SourceNotFoundError, match="not found"):
        acsf_from_input_nn(str(tmp_path / "nope.nn"))


def test_keywords_dparallel_does_not_use_are_listed_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = (
        HEAD
        + "kalman_lambda_short 0.96\nsymfunction_short H 2 H 0.5 0.0 6.0\nwrite_trainlog\n"
        + "epochs 3\n"
    )
    with caplog.at_level(logging.WARNING):
        acsf_from_input_nn(path := _write(tmp_path, text))
        acsf_from_input_nn(path)  # read again (train --config input.nn, then its init_from)
    found = [r.getMessage() for r in caplog.records if "no counterpart" in r.getMessage()]
    assert len(found) == 1 and found[0].endswith("not used: kalman_lambda_short write_trainlog")
