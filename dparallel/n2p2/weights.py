"""n2p2 ``weights.XXX.data``: one element's network weights and biases, one per line.

XXX is the atomic number (3 digits). n2p2 (``NeuralNetwork::setConnections``) reads the
first column of every non-empty line not starting with ``#`` (a line of blanks is a NaN
there, the ``\\r`` of a Windows line end a 0: refused here) and fills, layer by layer,
first the weights — for each neuron j of the previous layer, for each neuron k of this layer,
W[k, j] — then the biases of that layer. For a torch ``Linear`` (weight (out, in)) that is
``weight.T.flatten()`` followed by ``bias``.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dparallel._files import write_file
from dparallel.errors import InputFormatError
from dparallel.n2p2._text import finite_number, text_lines

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["read_weights", "weights_file_name", "write_weights"]


def weights_file_name(atomic_number: int) -> str:
    """``weights.XXX.data`` for an element (n2p2's ``weights.%03zu.data``)."""
    return f"weights.{atomic_number:03d}.data"


def read_weights(path: str | Path, sizes: Sequence[int]) -> list[tuple[np.ndarray, np.ndarray]]:
    """(weight (out, in), bias (out,)) per layer of a network with layer ``sizes``.

    ``sizes`` = [inputs, hidden..., 1]. The file must hold exactly the number of
    connections of that network (n2p2 does not check; a wrong count means the file
    belongs to another network). Every value must be a finite number, and the file
    text (a binary or non-UTF-8 file is refused, naming the line).
    """
    p = Path(path)
    values: list[float] = []
    for lineno, line in enumerate(text_lines(p, "weights"), start=1):
        words = line.split()
        if line and not words:  # n2p2 skips only empty lines: this is a connection there
            raise InputFormatError(
                "a line of blanks only, which n2p2 reads as a connection (NaN; 0 for a '\\r', "
                "a blank line with a Windows line end), shifting all later ones; remove the line",
                path=p,
                line=lineno,
            )
        if words and not line.startswith("#"):
            values.append(finite_number(words[0], p, lineno))
    need = sum(a * b + b for a, b in itertools.pairwise(sizes))
    if len(values) != need:
        raise InputFormatError(
            f"{len(values)} connections, but the network {list(sizes)} of input.nn needs {need}",
            path=p,
        )
    flat, out, k = np.array(values), [], 0
    for n_in, n_out in itertools.pairwise(sizes):
        w = flat[k : k + n_in * n_out].reshape(n_in, n_out).T  # file order: in-major
        k += n_in * n_out + n_out
        out.append((np.ascontiguousarray(w), flat[k - n_out : k].copy()))
    return out


def write_weights(path: str | Path, layers: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    """Write ``layers`` as n2p2 does (value, a/b, index, from layer/neuron, to layer/neuron)."""
    lines = [
        "#" * 80,
        "# Neural network connection values (weights and biases), written by dparallel.",
        "#" * 80,
        f"#{'connection':>23} t {'index':>9} {'l_s':>5} {'n_s':>5} {'l_e':>5} {'n_e':>5}",
        "#" * 80,
    ]
    count = 0
    for layer, (w, b) in enumerate(layers, start=1):
        w = np.asarray(w, np.float64)
        for j in range(w.shape[1]):
            for k in range(w.shape[0]):
                count += 1
                lines.append(
                    f"{w[k, j]:24.16E} a {count:9d} {layer - 1:5d} {j + 1:5d} {layer:5d} {k + 1:5d}"
                )
        for k, value in enumerate(np.asarray(b, np.float64).reshape(-1).tolist()):
            count += 1
            lines.append(f"{value:24.16E} b {count:9d} {layer:5d} {k + 1:5d}")
    write_file(path, "\n".join(lines) + "\n", durable=True)
