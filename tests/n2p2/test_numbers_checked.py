"""n2p2 weights and scaling files: finite numbers, text only, file and line named."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytest
from n2p2_helpers import alloy_input_nn

from dparallel.errors import InputFormatError
from dparallel.n2p2 import read_input_nn, read_weights
from dparallel.n2p2.scaling_data import format_scaling_data, read_scaling_data

if TYPE_CHECKING:
    from pathlib import Path

SIZES = [1, 1, 1]  # 4 connections


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "NaN", "1e999"])
def test_a_weight_that_is_not_finite_is_refused_naming_the_line(tmp_path: Path, bad: str) -> None:
    (tmp_path / "w.data").write_text(f"# header\n0.1 a\n{bad} a\n0.3 a\n0.4 b\n")
    with pytest.raises(InputFormatError, match=r"w\.data, line 3: not a finite number"):
        read_weights(tmp_path / "w.data", SIZES)


def test_finite_weights_still_read(tmp_path: Path) -> None:
    (tmp_path / "w.data").write_text("0.1 a\n-1e300 a\n0.3 a\n0.4 b\n")
    layers = read_weights(tmp_path / "w.data", SIZES)
    assert layers[0][0][0, 0] == 0.1 and layers[0][1][0] == -1e300


def test_a_binary_weights_file_is_named_binary(tmp_path: Path) -> None:
    (tmp_path / "w.data").write_bytes(b"0.1 a\n0.2 a\n" + np.arange(4.0).tobytes())
    with pytest.raises(InputFormatError, match=r"w\.data, line 3: a binary file"):
        read_weights(tmp_path / "w.data", SIZES)


def test_a_comment_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    (tmp_path / "w.data").write_bytes(b"# ok\n# caf\xe9\n0.1\n0.2\n0.3\n0.4\n")
    with pytest.raises(InputFormatError, match=r"line 2: not UTF-8 text \(byte 0xe9\)"):
        read_weights(tmp_path / "w.data", SIZES)


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_scaling_value_that_is_not_finite_is_refused(tmp_path: Path, bad: str) -> None:
    text = format_scaling_data([np.ones((2, 4))]).splitlines()
    rows = [k for k, line in enumerate(text) if line and not line.startswith("#")]
    words = text[rows[1]].split()
    words[3] = bad
    text[rows[1]] = " ".join(words)
    (tmp_path / "s.data").write_text("\n".join(text) + "\n")
    with pytest.raises(InputFormatError, match=rf"line {rows[1] + 1}: not a finite number"):
        read_scaling_data(tmp_path / "s.data", {"H": 2})


def test_a_binary_scaling_file_is_named_binary(tmp_path: Path) -> None:
    (tmp_path / "s.data").write_bytes(b"\x00\x01\x02")
    with pytest.raises(InputFormatError, match="line 1: a binary file, not an n2p2 scaling"):
        read_scaling_data(tmp_path / "s.data", {"H": 2})


def test_a_nan_sigma_is_read_only_for_a_constant_function(tmp_path: Path) -> None:
    """n2p2 writes -NAN as sigma where min = max; anywhere else NaN is refused."""
    rows = ["1 1 0.5 0.5 0.5 -NAN", "1 2 0.1 0.9 0.4 0.2"]
    (tmp_path / "s.data").write_text("\n".join(rows) + "\n")
    table = read_scaling_data(tmp_path / "s.data", {"H": 2})["H"]
    assert table[0, 0] == table[0, 1] == 0.5 and np.isnan(table[0, 3])
    rows[1] = "1 2 0.1 0.9 0.4 -NAN"
    (tmp_path / "s.data").write_text("\n".join(rows) + "\n")
    with pytest.raises(InputFormatError, match="line 2: not a finite number: '-NAN'"):
        read_scaling_data(tmp_path / "s.data", {"H": 2})


NORMALISED = "mean_energy -0.5\nconv_energy 2.0\nconv_length 1.0"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("mean_energy -0.5", "mean_energy nan"),
        ("conv_energy 2.0", "conv_energy inf"),
        ("conv_length 1.0", "conv_length NaN"),
        ("atom_energy Cu -3.5", "atom_energy Cu -inf"),
        ("scale_min_short -1.0", "scale_min_short nan"),
        ("scale_max_short 1.0", "scale_max_short 1e999"),
    ],
)
def test_an_input_nn_value_that_is_not_finite_is_refused_naming_the_line(
    tmp_path: Path, old: str, new: str
) -> None:
    """Was loaded: the potential then gave NaN or infinite energies (or features) silently."""
    text = alloy_input_nn(extra=NORMALISED)
    assert old in text
    (tmp_path / "input.nn").write_text(text.replace(old, new))
    line = text.splitlines().index(old) + 1
    with pytest.raises(InputFormatError, match=rf"input\.nn, line {line}: .*finite number"):
        read_input_nn(tmp_path / "input.nn")


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("global_nodes_short 7 5", "global_nodes_short 7 1_0"),  # int('1_0') = 10, atoi: 1
        ("Cu 2 Ag 0.8 2.6 5.2", "Cu 2 Ag 0.8 2.6 5_2"),  # float: 52, atof: 5
        ("atom_energy Ag -2.25", "atom_energy Ag -2_25"),
        ("conv_energy 2.0", "conv_energy \u0663"),  # ARABIC-INDIC DIGIT THREE: float 3, atof 0
        ("cutoff_type 6 0.1", "cutoff_type 6 0.1_5"),
    ],
)
def test_numbers_python_reads_otherwise_than_n2p2_are_refused(
    tmp_path: Path, old: str, new: str
) -> None:
    """Python's int/float read '1_0' as 10 and non-ASCII digits as digits; n2p2's atoi/atof
    stop at the '_' (1) and read such digits as 0: the two would run different potentials."""
    text = alloy_input_nn(extra=NORMALISED)
    assert old in text
    (tmp_path / "input.nn").write_text(text.replace(old, new))
    line = next(k for k, s in enumerate(text.splitlines(), 1) if old in s)
    with pytest.raises(InputFormatError, match=rf"input\.nn, line {line}: "):
        read_input_nn(tmp_path / "input.nn")


@pytest.mark.parametrize("bad", ["1_0", "\u0663", "0x1p3"])
def test_a_weight_python_reads_otherwise_than_n2p2_is_refused(tmp_path: Path, bad: str) -> None:
    (tmp_path / "w.data").write_text(f"0.1 a\n{bad} a\n0.3 a\n0.4 b\n")
    with pytest.raises(InputFormatError, match=r"w\.data, line 2: not a number"):
        read_weights(tmp_path / "w.data", SIZES)
