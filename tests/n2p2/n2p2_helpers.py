"""Shared steps of the n2p2 tests: run n2p2's tools on files and compare with dparallel."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import numpy as np
from ase.data import atomic_numbers

from dparallel.n2p2 import InputNN, format_scaling_data, read_input_nn, write_weights
from dparallel.n2p2.binaries import read_output_data, run_tool, stage

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from dparallel.types import StructureBatch


def nnp_scaling(workdir: Path, input_nn: Path | str, input_data: Path | str) -> Path:
    """n2p2's scaling.data (and log) for ``input_nn`` on ``input_data``, in ``workdir``."""
    stage(workdir, {"input.nn": input_nn, "input.data": input_data})
    run_tool("nnp-scaling", workdir, ["1"])
    return workdir / "scaling.data"


def nnp_dataset(workdir: Path) -> tuple[np.ndarray, list[np.ndarray]]:
    """n2p2's energies (S,) and forces [(N_s, 3)] of ``workdir/input.data`` (file units)."""
    run_tool("nnp-dataset", workdir, ["0"])
    return read_output_data(workdir / "output.data")


def random_weights(directory: Path, inp: InputNN | None = None, seed: int = 0, scale=0.4) -> None:
    """Uniform random weights in n2p2's weights.XXX.data format for every element."""
    inp = inp or read_input_nn(directory / "input.nn")
    rng = np.random.default_rng(seed)
    for e in inp.elements:
        sizes = [inp.n_symmetry_functions[e], *inp.networks[e].nodes, 1]
        layers = [
            (rng.uniform(-scale, scale, (b, a)), rng.uniform(-scale, scale, b))
            for a, b in itertools.pairwise(sizes)
        ]
        write_weights(directory / f"weights.{atomic_numbers[e]:03d}.data", layers)


def energy_offsets(inp: InputNN, batch: StructureBatch) -> np.ndarray:
    """Σ atom_energy + N·mean_energy per structure (file units): what the networks do not give."""
    from ase.data import chemical_symbols

    per_atom = np.array([inp.atom_energy[chemical_symbols[z]] for z in batch.numbers])
    if inp.normalization is not None:
        per_atom = per_atom + inp.normalization.mean_energy
    return np.bincount(batch.structure_index, per_atom, batch.n_structures)


def assert_same(
    energy: np.ndarray,
    forces: np.ndarray,
    ref_energy: np.ndarray,
    ref_forces: list[np.ndarray],
    offsets: np.ndarray | float = 0.0,
    rtol: float = 1e-8,
) -> Mapping[str, float]:
    """Energies (without ``offsets``) and forces equal within ``rtol`` on every structure.

    Forces: per structure, max |ΔF| ≤ rtol · max |F_ref|. Returns the worst ratios.
    """
    e_nn, ref_nn = energy - offsets, ref_energy - offsets
    e_rel = np.abs(e_nn - ref_nn) / np.maximum(np.abs(ref_nn), 1e-300)
    assert e_rel.max() <= rtol, f"energy off by {e_rel.max():.2e} (relative)"
    worst = 0.0
    start = 0
    for s, f_ref in enumerate(ref_forces):
        f = forces[start : start + len(f_ref)]
        start += len(f_ref)
        scale = np.abs(f_ref).max()
        rel = np.abs(f - f_ref).max() / scale if scale > 0 else np.abs(f).max()
        assert rel <= rtol, f"structure {s}: forces off by {rel:.2e} (relative to max |F|)"
        worst = max(worst, rel)
    assert start == len(forces)
    return {"energy": float(e_rel.max()), "forces": worst}


def alloy_structures(n: int = 6, seed: int = 0, small: bool = False) -> list:
    """Rattled Cu/Ag/Au fcc cells and one cluster, EMT labels.

    Cells are at least 7.5 Å wide (more than every cutoff used here); ``small`` gives 4- and
    8-atom cells narrower than the cutoff, where an atom's own images are its neighbours.
    """
    from ase.build import bulk
    from ase.calculators.emt import EMT

    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        reps = ((2, 1, 1) if k % 2 else (1, 1, 1)) if small else (2, 2, 2)
        atoms = bulk("Cu", "fcc", a=3.9, cubic=True).repeat(reps)
        atoms.set_chemical_symbols(rng.choice(["Cu", "Ag", "Au"], len(atoms)).tolist())
        atoms.rattle(0.15, seed=int(rng.integers(1 << 30)))
        atoms.set_cell(atoms.cell * rng.uniform(0.97, 1.03), scale_atoms=True)
        out.append(atoms)
    cluster = bulk("Ag", "fcc", a=4.0, cubic=True).repeat((2, 1, 1))
    cluster.set_chemical_symbols(rng.choice(["Cu", "Ag", "Au"], len(cluster)).tolist())
    cluster.pbc = False
    cluster.rattle(0.1, seed=1)
    out.append(cluster)
    for atoms in out:
        atoms.calc = EMT()
    return out


#: Symmetry functions of the general test potentials (file order deliberately unsorted).
ALLOY_SYMFUNCTIONS = """\
symfunction_short Cu 2 Ag 0.8 2.6 5.2
symfunction_short Cu 2 Cu 0.05 0.0 5.2
symfunction_short Cu 2 Au 0.8 2.8 4.9
symfunction_short Cu 2 Cu 1.2 2.5 5.2
symfunction_short Cu 3 Au Cu 0.02 1.0 1.0 5.2
symfunction_short Cu 3 Ag Au 0.01 -1.0 2.5 5.2 0.4
symfunction_short Cu 9 Cu Cu 0.03 0.6 0.5 5.2
symfunction_short Cu 9 Ag Cu 0.02 -1.0 4.0 4.9 0.3
symfunction_short Ag 2 Cu 0.5 2.7 5.2
symfunction_short Ag 2 Au 0.05 0.0 5.2
symfunction_short Ag 2 Ag 0.9 2.9 5.0
symfunction_short Ag 3 Ag Cu 0.03 0.5 -1.0 5.2
symfunction_short Ag 9 Au Au 0.01 1.0 2.0 5.2 0.2
symfunction_short Au 2 Au 0.6 2.8 5.2
symfunction_short Au 2 Cu 0.05 0.0 5.0
symfunction_short Au 9 Cu Ag 0.02 1.0 1.0 5.2
symfunction_short Au 3 Au Au 0.04 -1.0 1.5 5.2 0.5
"""


def alloy_input_nn(
    cutoff: str = "6 0.1",
    scaling: str = "scale_symmetry_functions\nscale_min_short -1.0\nscale_max_short 1.0",
    activations: str = "t s l",
    extra: str = "",
) -> str:
    """An input.nn for Cu/Ag/Au (elements listed out of atomic-number order)."""
    return (
        "number_of_elements 3\n"
        "elements Au Cu Ag\n"
        "atom_energy Cu -3.5\natom_energy Ag -2.25\natom_energy Au 1.75\n"
        f"cutoff_type {cutoff}\n{scaling}\n"
        "global_hidden_layers_short 2\nglobal_nodes_short 7 5\n"
        f"global_activation_short {activations}\n"
        "use_short_forces\nrandom_seed 12345\n"
        f"{extra}\n{ALLOY_SYMFUNCTIONS}"
    )


def n2p2_potential(directory: Path) -> Path:
    """A Cu/Ag/Au n2p2 potential directory made without n2p2: made-up scaling.data (with
    normalisation), random weights."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "input.nn").write_text(
        alloy_input_nn(extra="mean_energy -0.5\nconv_energy 2.0\nconv_length 1.0")
    )
    inp = read_input_nn(directory / "input.nn")
    made_up_scaling(directory, inp, seed=1)
    random_weights(directory, inp, seed=4, scale=0.3)
    return directory


def made_up_scaling(directory: Path, inp: InputNN, seed: int) -> None:
    """``directory/scaling.data`` of made-up statistics for ``inp``'s functions (minimum
    in [0, 1), maximum one above, mean between, sigma 0.3), without running n2p2."""
    rng = np.random.default_rng(seed)
    tables = []
    for e in inp.elements:
        lo = rng.uniform(0, 1, inp.n_symmetry_functions[e])
        tables.append(np.stack([lo, lo + 1, lo + 0.5, lo * 0 + 0.3], 1))
    (directory / "scaling.data").write_text(format_scaling_data(tables))
