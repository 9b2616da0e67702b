"""Run an exported potential with plain torch: ``python plain_torch_runner.py KIND FILE IN OUT``.

Executed in a subprocess by tests/deploy/test_artifacts.py. Importing dparallel is made
impossible (a meta-path finder refuses it), and the script checks at the end that it is
not in ``sys.modules``. KIND is ``export``, ``torchscript`` or ``aoti``; IN is an ``.npz``
with the seven inputs of each structure under ``<name>/<input>``; OUT receives the four
outputs under ``<name>/<output>``.
"""

from __future__ import annotations

import sys


class _RefuseDparallel:
    """Meta-path finder that makes ``import dparallel`` fail."""

    def find_spec(self, name, path=None, target=None):  # noqa: ANN001, ANN201
        if name == "dparallel" or name.startswith("dparallel."):
            raise ImportError(f"{name} must not be imported by a plain-torch user")
        return None


sys.meta_path.insert(0, _RefuseDparallel())

import numpy as np  # noqa: E402
import torch  # noqa: E402

INPUTS = ("positions", "numbers", "cell", "pbc", "pair_first", "pair_second", "shifts")
OUTPUTS = ("energy", "forces", "stress", "energies")


def load(kind: str, path: str):  # noqa: ANN201
    """The callable potential of one artifact file."""
    if kind == "export":
        return torch.export.load(path).module()
    if kind == "torchscript":
        return torch.jit.load(path)
    if kind == "aoti":
        return torch._inductor.aoti_load_package(path)
    raise SystemExit(f"unknown kind {kind}")


def main() -> None:
    kind, path, inp, out = sys.argv[1:5]
    potential = load(kind, path)
    data = np.load(inp)
    names = sorted({k.split("/")[0] for k in data.files})
    results = {}
    for name in names:
        args = [torch.from_numpy(data[f"{name}/{k}"]) for k in INPUTS]
        for key, value in zip(OUTPUTS, potential(*args), strict=True):
            results[f"{name}/{key}"] = value.detach().numpy()
    assert "dparallel" not in sys.modules
    np.savez(out, **results)


if __name__ == "__main__":
    main()
