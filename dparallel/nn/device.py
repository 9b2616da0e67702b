"""Where a network runs: a ``device`` setting resolved to a :class:`torch.device`.

``device: auto | cpu | cuda | cuda:N`` (``auto`` = CUDA when ``torch.cuda.is_available()``)
is resolved here, once, for training (:mod:`dparallel.train.device`) and for the deployed
model (:class:`dparallel.deploy.DeployedModel`); a CUDA device that is absent is a
:class:`~dparallel.errors.DeviceError` naming it and what is available.
"""

from __future__ import annotations

import torch

from dparallel.config import check_device
from dparallel.errors import DeviceError


def available_devices() -> str:
    """What this process can use, in words: ``"cpu"`` or ``"cpu, cuda:0 (NVIDIA H200)"``."""
    names = ["cpu"]
    if torch.cuda.is_available():
        names += [
            f"cuda:{i} ({torch.cuda.get_device_name(i)})" for i in range(torch.cuda.device_count())
        ]
    return ", ".join(names)


def resolve_device(name: str | torch.device) -> torch.device:
    """The :class:`torch.device` of a ``device`` setting (``auto`` picks CUDA when present).

    Raises
    ------
    DeviceError
        A CUDA device asked for but absent (no CUDA, or fewer devices); names what is.
    """
    text = check_device(str(name), DeviceError)
    if text == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(text)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only torch build" if torch.version.cuda is None else "no CUDA device"
            raise DeviceError(
                f"device {text!r} asked for, but this process sees {build} "
                f"(torch {torch.__version__}); available: {available_devices()}. "
                "Use the device 'cpu' or 'auto' (--device cpu; device: auto in a workflow; "
                "Calculator(device='cpu'))"
            )
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise DeviceError(
                f"device {text!r} asked for, but there are {torch.cuda.device_count()} CUDA "
                f"devices; available: {available_devices()}"
            )
    return device
