"""weights.XXX.data layout (n2p2's NeuralNetwork::setConnections) and its errors."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
import pytest

from dparallel.errors import InputFormatError
from dparallel.n2p2 import read_weights, write_weights

if TYPE_CHECKING:
    from pathlib import Path


def _set_connections(connections: list[float], sizes: list[int]) -> list:
    """Transcription of n2p2's loop: per layer, for j in previous, for k in this: w[k][j]."""
    out, count = [], 0
    for prev, this in itertools.pairwise(sizes):
        w = [[0.0] * prev for _ in range(this)]
        for j in range(prev):
            for k in range(this):
                w[k][j] = connections[count]
                count += 1
        b = connections[count : count + this]
        count += this
        out.append((np.array(w), np.array(b)))
    return out


def test_layout_is_n2p2s(tmp_path: Path) -> None:
    sizes = [3, 4, 2, 1]
    n = sum(a * b + b for a, b in itertools.pairwise(sizes))
    values = np.random.default_rng(0).normal(size=n)
    (tmp_path / "w.data").write_text("# comment\n" + "\n".join(f"{v!r} a" for v in values.tolist()))
    ours = read_weights(tmp_path / "w.data", sizes)
    for (w, b), (w_ref, b_ref) in zip(ours, _set_connections(values.tolist(), sizes), strict=True):
        np.testing.assert_array_equal(w, w_ref)
        np.testing.assert_array_equal(b, b_ref)
    write_weights(tmp_path / "back.data", ours)
    for (w, b), (w2, b2) in zip(ours, read_weights(tmp_path / "back.data", sizes), strict=True):
        np.testing.assert_array_equal(w, w2)  # 17 digits: the same doubles
        np.testing.assert_array_equal(b, b2)


def test_wrong_count_and_bad_numbers(tmp_path: Path) -> None:
    (tmp_path / "w.data").write_text("0.1\n0.2\n0.3\n")
    with pytest.raises(InputFormatError, match=r"3 connections, but the network \[1, 1, 1\]"):
        read_weights(tmp_path / "w.data", [1, 1, 1])
    (tmp_path / "w.data").write_text("0.1\nx\n")
    with pytest.raises(InputFormatError, match="line 2: not a number"):
        read_weights(tmp_path / "w.data", [1, 1, 1])


def test_a_line_of_blanks_is_refused_as_n2p2_reads_it_as_a_weight(tmp_path: Path) -> None:
    """n2p2 (readColumnsFromFile) skips only empty lines: one of blanks is a NaN connection
    there, shifting every later one (nnp-dataset's energies turn NaN), so it cannot be read
    as n2p2 reads it and is refused, naming the line; an empty line is skipped as n2p2 does."""
    values = "0.1\n0.2\n0.3\n0.4\n"
    (tmp_path / "w.data").write_text("# c\n\n" + values)
    assert [float(w[0, 0]) for w, _ in read_weights(tmp_path / "w.data", [1, 1, 1])] == [0.1, 0.3]
    (tmp_path / "w.data").write_text("# c\n0.1\n  \t\n0.2\n0.3\n0.4\n")
    with pytest.raises(InputFormatError, match=r"w\.data, line 3: .*blanks only.*NaN"):
        read_weights(tmp_path / "w.data", [1, 1, 1])


def test_windows_line_ends_are_read_and_their_blank_lines_refused(tmp_path: Path) -> None:
    """n2p2 splits at '\\n' only: a '\\r' ends each line's last word, which atof ignores, so
    a CRLF file reads as an LF one; but its blank lines are '\\r', which n2p2 reads as a
    connection (atof: 0) shifting every later one (measured: nnp-dataset's energies change
    on a CRLF weights file with one blank line): refused, naming the line."""
    (tmp_path / "w.data").write_bytes(b"# c\r\n0.1 a\r\n0.2 a\r\n0.3 a\r\n0.4 b\r\n")
    assert [float(w[0, 0]) for w, _ in read_weights(tmp_path / "w.data", [1, 1, 1])] == [0.1, 0.3]
    (tmp_path / "w.data").write_bytes(b"# c\r\n0.1 a\r\n\r\n0.2 a\r\n0.3 a\r\n0.4 b\r\n")
    with pytest.raises(InputFormatError, match=r"w\.data, line 3: .*blanks only"):
        read_weights(tmp_path / "w.data", [1, 1, 1])
