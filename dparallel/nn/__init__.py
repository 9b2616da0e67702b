"""dparallel.nn: the network itself, below training, deployment and n2p2 interop.

The Behler-Parrinello :class:`HDNNP`, its activations (n2p2's included) and descriptor
scaling, the model file (:func:`load_model`) and safe torch files (weights only, atomic
writes). It imports only from the layers below (errors, descriptors): ``train/``,
``deploy/`` and ``n2p2/`` build on it.
"""

from __future__ import annotations

from dparallel.nn.activations import ACTIVATIONS, N2P2_EXPRESSIBLE, make_activation
from dparallel.nn.files import load_exported_program, load_torch_file, save_torch_file
from dparallel.nn.folders import is_n2p2_potential, n2p2_files_missing
from dparallel.nn.model import (
    HDNNP,
    MODEL,
    MODEL_FORMAT,
    SCALING_MODES,
    DivideBy,
    file_not_model_dir,
    load_model,
    model_file,
    not_a_torch_file,
    resume_hint,
    scaling_from_statistics,
    scaling_parameters,
)

__all__ = [
    "ACTIVATIONS",
    "HDNNP",
    "MODEL",
    "MODEL_FORMAT",
    "N2P2_EXPRESSIBLE",
    "SCALING_MODES",
    "DivideBy",
    "file_not_model_dir",
    "is_n2p2_potential",
    "load_exported_program",
    "load_model",
    "load_torch_file",
    "make_activation",
    "model_file",
    "n2p2_files_missing",
    "not_a_torch_file",
    "resume_hint",
    "save_torch_file",
    "scaling_from_statistics",
    "scaling_parameters",
]
