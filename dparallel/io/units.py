"""Names of the unit systems a structure file may be in (no numpy, no ASE: the CLI's
option parser needs only the names; the factors are :data:`dparallel.io.UNITS`)."""

from __future__ import annotations

__all__ = ["UNIT_SYSTEMS"]

#: ``--units`` choices: ASE's own (Å, eV), its alias, and n2p2/RuNNer atomic units.
UNIT_SYSTEMS = ("ase", "angstrom-ev", "bohr-hartree")
