"""dparallel.deploy: the trained potential at run time and as plain-torch files.

:class:`DeployedModel` (``MODEL_DIR/deployed.pt``, :func:`load_deployed`) is what the ASE
calculator and ``dparallel evaluate`` run; :class:`PotentialModule` is what ``dparallel
export`` traces into ``potential.pt2`` / ``potential.ts`` (:mod:`dparallel.deploy.artifacts`).
Both reach the descriptor only through the descriptor registry's protocol.
"""

from dparallel.deploy.artifacts import export_atomic_energies, load_atomic_energies
from dparallel.deploy.deployed import DEPLOYED, ENGINES, DeployedModel, load_deployed
from dparallel.deploy.potential import INPUT_NAMES, OUTPUT_NAMES, PotentialModule

__all__ = [
    "DEPLOYED",
    "ENGINES",
    "INPUT_NAMES",
    "OUTPUT_NAMES",
    "DeployedModel",
    "PotentialModule",
    "export_atomic_energies",
    "load_atomic_energies",
    "load_deployed",
]
