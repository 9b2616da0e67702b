"""float32 training and prediction on data with large absolute energies.

An all-electron code (FHI-aims, ORCA, Gaussian) gives a heavy element 1e4–5e5 eV per atom
(Au ≈ −5.2e5 eV), so a 16-atom CuAu cell has ~−4e6 eV, which float32 spaces by 0.25–0.5 eV.
Training is invariant under a constant energy per atom of each element (the reference
energies are fitted), so everything a float32 run computes on EMT CuAu shifted by −5e4 eV
per Cu and −5e5 eV per Au must be what it computes on EMT CuAu itself, to the float32
rounding of the unshifted problem; and the energies predicted on the shifted data are
those of the unshifted model plus the exact shift.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import ase.io
import numpy as np
import pytest
import torch
from _store_fixture import build_store, write_emt_alloy
from ase.calculators.singlepoint import SinglePointCalculator

from dparallel.descriptors import ACSF
from dparallel.store import open_store
from dparallel.train import TrainingSpec, predict_batch
from dparallel.train.data import BatchPlan, PartitionReader
from dparallel.train.device import Target
from dparallel.train.feed import HeldData
from dparallel.train.kalman import observations
from dparallel.train.objective import loss
from dparallel.train.preparation import build_model, prepare
from dparallel.train.structure_data import StructureReader

if TYPE_CHECKING:
    from pathlib import Path

    from dparallel.nn import HDNNP
    from dparallel.train.batch import Batch

#: eV per atom added to each element's energies (forces unchanged): all-electron sizes.
SHIFT = {29: -5.0e4, 79: -5.0e5}


def _shifted(atoms: ase.Atoms) -> ase.Atoms:
    """``atoms`` with its energy + SHIFT of each atom, the same forces."""
    out = atoms.copy()
    energy = atoms.get_potential_energy() + sum(SHIFT[int(z)] for z in atoms.numbers)
    out.calc = SinglePointCalculator(out, energy=energy, forces=atoms.get_forces())
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """EMT CuAu (16-atom cells) and the same with shifted energies, as files and stores."""
    root = tmp_path_factory.mktemp("f32")
    plain = write_emt_alloy(root / "plain.xyz", 30, seed=5, repeat=(2, 2, 1))
    ase.io.write(root / "shifted.xyz", [_shifted(a) for a in ase.io.read(plain, ":")])
    acsf = ACSF.uniform(
        ["Cu", "Au"], r_cut=4.0,
        radial=[(0.05, 0.0), (2.0, 2.5), (2.0, 3.0), (2.0, 3.5)],
        narrow=[(0.01, 1.0, -1.0, 0.0), (0.01, 1.0, 1.0, 0.0)],
    )  # fmt: skip
    out = {}
    for name in ("plain", "shifted"):
        out[name] = root / f"{name}.xyz"
        build_store(out[name], root / f"{name}.zarr", acsf, partition_atoms=160)
        out[f"{name}_store"] = root / f"{name}.zarr"
    return out


def _float32_model_and_batch(store_path: Path, engine: str | None) -> tuple[HDNNP, Batch]:
    """The freshly built float32 model of a run on ``store_path`` and one batch of all its
    structures (stored descriptors, or ``engine``'s computed ones; ``"held"``: the
    training structures from data held on the device, here the CPU)."""
    spec = TrainingSpec(dtype="float32", force_weight=1.0, seed=3, device="cpu")
    store = open_store(store_path)
    prep = prepare(store, spec)
    model = build_model(prep, spec, Target.of(spec))
    reader: PartitionReader = PartitionReader(
        store, spec.descriptor, prep.elements, prep.index, True
    )
    if engine == "held":
        held = HeldData.load(reader, torch.device("cpu"), torch.float32, None)
        assert held is not None
        return model, next(held.batches(BatchPlan(prep.index, "train", 1000, shuffle=False)))
    if engine is not None:
        reader = StructureReader(
            store, spec.descriptor, prep.descriptor_spec or {}, prep.elements, prep.index,
            True, 0, engine,
        )  # fmt: skip
    items = [
        (reader.get(p), s) for p in prep.index.partitions for s in range(len(prep.index.ids[p]))
    ]
    return model, reader.batch(items, torch.float32)


@pytest.mark.parametrize("engine", [None, "held", "graph", "kernel"])
def test_float32_losses_and_kalman_rows_are_those_of_the_unshifted_data(
    data: dict[str, Path], engine: str | None
) -> None:
    """Same seed, same data but for a constant energy per atom of each element: the float32
    models differ only in their (fitted) reference energies, and every quantity training
    uses — energy errors, the loss, the Kalman filter's rows — is the same, to the float32
    rounding of the unshifted problem (1e-5 relative: its values are O(1) in eV/atom and
    units of the energy scale); the reference energies float64 wherever they live.
    Stored descriptors, and computed ones (``descriptor_source: computed``: the torch
    graph and the kernel); batches streamed and assembled from data held on a device."""
    got = {}
    for name in ("plain", "shifted"):
        model, batch = _float32_model_and_batch(data[f"{name}_store"], engine)
        assert next(model.parameters()).dtype == torch.float32
        energy, forces = predict_batch(model, batch, True)
        errors = ((energy - batch.energy) / batch.atom_counts).detach()
        row = {"errors": errors, "loss": loss(energy, forces, batch, 1.0).detach()}
        if engine in (None, "held"):  # the Kalman filter trains from stored descriptors
            spec = TrainingSpec(dtype="float32", force_weight=1.0, optimizer="kalman")
            pick = torch.arange(0, 3 * batch.n_atoms, 7)
            obs = observations(model, list(model.parameters()), batch, spec, True, pick)
            row["xi"] = obs.xi.double()
        got[name] = row
    scale = float(got["plain"]["errors"].abs().max())
    assert scale > 1e-3  # an untrained model: errors to compare
    for key, plain in got["plain"].items():
        shifted = got["shifted"][key]
        tol = 1e-5 * float(plain.abs().max())
        assert float((shifted - plain).abs().max()) <= tol, key
    assert batch.energy.dtype == torch.float64  # the labels, never rounded to float32


def test_a_float32_model_adds_the_reference_in_float64() -> None:
    """A float32 model keeps its reference energies float64 (moved, cast, saved and loaded)
    and its energies are float64: ``s · MLP`` (float32) + the reference, exact to float64."""
    from dparallel.nn import HDNNP

    model = HDNNP(["Cu", "Au"], {"Cu": 3, "Au": 3}, hidden=[4]).double()
    ref = torch.tensor([-50000.123456789, -520000.987654321], dtype=torch.float64)
    model.ref_energy.copy_(ref)
    single = copy.deepcopy(model).float()
    assert single.ref_energy.dtype == torch.float64 and torch.equal(single.ref_energy, ref)
    loaded = HDNNP.from_state(single.config(), single.state_dict(), torch.float32)
    assert torch.equal(loaded.ref_energy, ref)
    g = torch.rand(5, 3, dtype=torch.float32)
    energies = loaded.atomic_energies({"Au": g})["Au"]
    assert energies.dtype == torch.float64
    model.ref_energy.zero_()
    relative = model.atomic_energies({"Au": g.double()})["Au"]  # float64 network, no reference
    got = (energies - ref[1]).detach().numpy()
    np.testing.assert_allclose(got, relative.detach().numpy(), atol=1e-5)


@pytest.mark.slow
def test_float32_training_evaluate_and_export_on_shifted_energies(
    data: dict[str, Path], tmp_path: Path
) -> None:
    """A few float32 epochs (same seed) on the shifted and the unshifted data give the same
    energy and force RMSEs, as float32 and float64 on the unshifted data do (1e-4 relative
    covers both; before the reference energies stayed float64 the shifted run's energy
    RMSE was 20–30 % off); ``evaluate`` of the float32 export (``deployed.pt``) against
    the shifted labels (EMT + shift) gives the unshifted model's errors against EMT; the
    float32 ``potential.pt2`` gives the energy of the float64 ``Calculator`` to float32
    rounding of the unshifted energy, not of −4e6 eV (0.25–0.5 eV)."""
    from dparallel.ase import Calculator
    from dparallel.cli.evaluate import evaluate_file
    from dparallel.deploy.probes import inputs_from_atoms
    from dparallel.nn import load_exported_program
    from dparallel.train import train
    from dparallel.train.export import export_model

    def run(name: str, dtype: str) -> list[float]:
        spec = TrainingSpec(
            epochs=3, seed=1, dtype=dtype, batch_size=4, force_weight=1.0, device="cpu"
        )
        result = train(data[f"{name}_store"], tmp_path / f"{name}_{dtype}", spec)
        keys = ("energy_rmse", "force_rmse")
        return [
            r[f"{s}_{k}"] for r in result.history for s in ("train", "validation") for k in keys
        ]

    plain, shifted, double = (
        run("plain", "float32"),
        run("shifted", "float32"),
        run("plain", "float64"),
    )
    np.testing.assert_allclose(plain, double, rtol=1e-4)  # float32's own noise: below this
    np.testing.assert_allclose(shifted, plain, rtol=1e-4)

    errors = {}
    for name in ("plain", "shifted"):
        model_dir = tmp_path / f"{name}_float32"
        export_model(model_dir, dtype=torch.float32, artifacts=name == "shifted")
        errors[name] = evaluate_file(str(model_dir), str(data[name]))
    for key in ("energy_rmse", "energy_mae", "force_rmse"):
        assert errors["shifted"][key] == pytest.approx(errors["plain"][key], rel=1e-4), key

    model_dir = tmp_path / "shifted_float32"
    atoms = ase.io.read(data["shifted"], -1)  # the most Au
    exact = Calculator(model_dir, dtype=torch.float64).get_potential_energy(atoms)
    assert abs(exact) > 2e6
    single = Calculator(model_dir, dtype=torch.float32).get_potential_energy(atoms)
    program = load_exported_program(model_dir / "potential.pt2")
    outputs = program.module()(*inputs_from_atoms(atoms, 4.0, torch.float32))
    for energy in (single, float(outputs[0])):
        assert abs(energy - exact) < 1e-3  # float32 spaces −4e6 eV by 0.25–0.5 eV
