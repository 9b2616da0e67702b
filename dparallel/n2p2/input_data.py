"""Write structures as an n2p2 ``input.data`` (the reader is :func:`dparallel.io.open_source`).

One block per structure::

    begin [set=train|set=test]      (from ``atoms.info["set"]``, n2p2's split marker)
    comment <text>
    lattice <ax> <ay> <az>          (three lines; only for 3-D periodic cells)
    atom <x> <y> <z> <element> <charge> 0.0 <fx> <fy> <fz>
    energy <E>
    charge <Q>
    end

Values are written with 17 significant digits in the file's units (``units``, e.g.
``"bohr-hartree"``: lengths / Bohr, energies / Hartree).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dparallel._files import write_file
from dparallel.errors import ConfigError
from dparallel.io.units import unit_factors
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

__all__ = ["write_input_data"]


def write_input_data(
    path: str | os.PathLike[str],
    structures: Sequence,
    units: str = "ase",
) -> Path:
    """Write ``ase.Atoms`` to ``path``, with the energy and forces dparallel reads from
    them (their calculator's, else ``info``/``arrays`` under ``energy``/``REF_energy``,
    ``forces``/``REF_forces``: :meth:`StructureBatch.from_ase`); an absent one as 0.

    n2p2 knows fully periodic and non-periodic structures only; mixed ``pbc`` is refused.
    ``atoms.info["set"]`` ``"train"`` or ``"test"`` (as :meth:`StructureBatch.to_ase` sets
    it from a structure's tag) is written as n2p2 reads it, ``begin set=…``; other values
    are not written (n2p2 refuses any other ``begin`` argument).
    """
    length, energy = unit_factors(units)
    lines: list[str] = []
    for k, atoms in enumerate(structures):
        pbc = np.asarray(atoms.pbc, bool)
        if pbc.any() and not pbc.all():
            raise ConfigError(f"structure {k}: n2p2 needs pbc all True or all False")
        labels = StructureBatch.from_ase(atoms)
        e_value = float(np.where(np.isnan(labels.energy[0]), 0.0, labels.energy[0]))
        forces = np.where(np.isnan(labels.forces), 0.0, labels.forces)  # (n, 3)
        marker = atoms.info.get("set")
        begin = f"begin set={marker}" if marker in ("train", "test") else "begin"
        lines += [begin, f"comment structure {k}"]
        if pbc.all():
            for row in np.asarray(atoms.cell) / length:
                lines.append("lattice " + " ".join(f"{x:.17g}" for x in row))
        pos = atoms.get_positions() / length
        f = forces * length / energy
        for sym, r, fi in zip(atoms.get_chemical_symbols(), pos, f, strict=True):
            lines.append(
                f"atom {r[0]:.17g} {r[1]:.17g} {r[2]:.17g} {sym} 0.0 0.0 "
                f"{fi[0]:.17g} {fi[1]:.17g} {fi[2]:.17g}"
            )
        lines += [f"energy {e_value / energy:.17g}", "charge 0.0", "end"]
    p = Path(path)
    write_file(p, "\n".join(lines) + "\n", durable=True)
    return p
