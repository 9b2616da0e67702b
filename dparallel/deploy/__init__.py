"""dparallel.deploy: the trained potential as a plain-torch artifact (torch.export, TorchScript)."""

from dparallel.deploy.potential import INPUT_NAMES, OUTPUT_NAMES, PotentialModule

__all__ = ["INPUT_NAMES", "OUTPUT_NAMES", "PotentialModule"]
