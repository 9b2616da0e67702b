"""n2p2 files in and out: ``input.nn`` (:func:`read_input_nn`, :func:`acsf_from_input_nn`),
``scaling.data``, ``weights.XXX.data``, ``input.data`` and whole potentials
(:func:`load_potential`, :func:`write_potential`); :mod:`dparallel.n2p2.binaries` finds and
runs the n2p2 tools (tests, benchmarks). See docs/n2p2.md. The potential functions (torch)
load on first use.
"""

from typing import TYPE_CHECKING

from dparallel._lazy import lazy_getattr
from dparallel.n2p2.input_data import write_input_data
from dparallel.n2p2.input_nn import (
    ACTIVATION_CODES,
    SCALING_TYPES,
    InputNN,
    Network,
    Normalization,
    Scaling,
    read_input_nn,
)
from dparallel.n2p2.scaling_data import format_scaling_data, read_scaling_data, write_scaling_data
from dparallel.n2p2.settings import read_settings
from dparallel.n2p2.symmetry_functions import acsf_from_input_nn
from dparallel.n2p2.weights import read_weights, write_weights

if TYPE_CHECKING:
    from dparallel.n2p2.potential import (
        export_model_dir,
        load_potential,
        n2p2_problems,
        write_potential,
    )

__all__ = [
    "ACTIVATION_CODES",
    "SCALING_TYPES",
    "InputNN",
    "Network",
    "Normalization",
    "Scaling",
    "acsf_from_input_nn",
    "export_model_dir",
    "format_scaling_data",
    "load_potential",
    "n2p2_problems",
    "read_input_nn",
    "read_scaling_data",
    "read_settings",
    "read_weights",
    "write_input_data",
    "write_potential",
    "write_scaling_data",
    "write_weights",
]

__getattr__ = lazy_getattr(
    __name__,
    dict.fromkeys(
        (
            "export_model_dir",
            "load_potential",
            "n2p2_problems",
            "write_potential",
        ),
        "potential",
    ),
)
