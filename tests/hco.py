"""A small H/C/O workload for the store tests: an ACSF set and random structures written
as extxyz. No pytest here."""

from __future__ import annotations

from typing import TYPE_CHECKING

import ase.io
import numpy as np

from dparallel.descriptors import ACSF
from dparallel.descriptors.descriptor_set import DescriptorSet
from dparallel.io.synthetic import random_structures

if TYPE_CHECKING:
    from pathlib import Path


def hco_descriptors(derivatives: bool = True) -> DescriptorSet:
    """One radial and one narrow angular function per element pair, r_cut 3 Å."""
    acsf = ACSF.uniform(["H", "C", "O"], r_cut=3.0, cutoff="cos", radial=[(0.5, 0.0)],
                        narrow=[(0.1, 1.0, 1.0, 0.0)], wide=[])  # fmt: skip
    return DescriptorSet(acsf=acsf, derivatives=derivatives)


def write_hco_structures(path: Path, seed: int, n: int = 12) -> Path:
    """``n`` random H/C/O structures of 3-10 atoms (seeded) written to ``path``."""
    frames = random_structures(n, np.random.default_rng(seed), min_atoms=3, max_atoms=10,
                               elements=(1, 6, 8))  # fmt: skip
    ase.io.write(path, frames, format="extxyz")
    return path


def featurized_hco(folder: Path, seed: int = 3) -> Path:
    """``folder/data.xyz`` (:func:`write_hco_structures`) featurized in this process into
    ``folder/f.zarr`` (:func:`hco_descriptors`); returns the store."""
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = write_hco_structures(folder / "data.xyz", seed=seed)
    featurize_in_process(data, folder / "f.zarr", hco_descriptors(), FeaturizeOptions())
    return folder / "f.zarr"
