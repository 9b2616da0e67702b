"""ASE calculator for exported dparallel models: ``Calculator(MODEL_DIR)``.

This module is ``dparallel.ase``; it imports the ``ase`` package absolutely.
"""

from __future__ import annotations

import operator
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ase
import ase.calculators.calculator as _calc
import numpy as np
import torch
from ase.stress import full_3x3_to_voigt_6_stress

from dparallel.deploy import DEPLOYED, DeployedModel, load_deployed
from dparallel.deploy.finite import check_finite_predictions
from dparallel.deploy.identical import identical
from dparallel.deploy.verlet import VerletList
from dparallel.errors import ConfigError, InvalidStructureError
from dparallel.types import StructureBatch

if TYPE_CHECKING:
    import os
    from collections.abc import Iterator

__all__ = ["Calculator"]


class Calculator(_calc.Calculator):
    """Energy, forces and stress (3-D periodic cells) from ``MODEL_DIR/deployed.pt``.

    Built for MD: the neighbour list is kept with a ``skin`` and rebuilt only when an atom
    moved more than skin/2 (or cell, pbc or atomic numbers changed), and the descriptor
    kernels are compiled (numba) when the calculator is made, not on the first step.
    Per step it keeps its copy of the atoms (``calc.atoms``) and its input batch and
    refreshes them in place rather than rebuilding them.

    Parameters
    ----------
    model_dir
        Directory written by ``dparallel train`` and ``dparallel export`` (or the
        ``deployed.pt`` file itself).
    device
        Where the networks run: ``"cpu"`` (default; ACSF through the compiled numba
        engine, ``dparallel.deploy.deployed.ENGINES``), ``"cuda"``/``"cuda:N"`` (for large
        cells: descriptors on the CPU, networks, forces and virial on the GPU, block by
        block of centre atoms, ``calc.model.block_bytes`` of ∂G/∂r each) or ``"auto"``. A
        model trained on any device works.
    dtype
        ``torch.float64`` (default) or ``torch.float32``.
    backend
        The descriptor's backend: ``"auto"`` or one its registered type lists
        (``DescriptorKind.backends``; ACSF: ``"numba"``, ``"torch"``, ``"triton"``).
    skin
        Neighbour-list skin in Å (0 = a fresh list on every call).
    threads
        torch intra-op threads during a call (restored afterwards), an integer ≥ 1;
        ``None`` keeps torch's setting; anything else is a ``ConfigError``. One thread is
        the default: the per-atom networks are far too small to gain from more, and on a
        busy machine waiting for an OpenMP team made a call on a small cell many times
        slower in our measurements (docs/deploy.md).
    units
        For an n2p2 potential directory (``input.nn``, ``scaling.data``,
        ``weights.XXX.data``): the units it was made in (``"ase"`` or ``"bohr-hartree"``).
        Default: those its ``input.nn`` declares (dparallel exports do), else ``"ase"``;
        a value contradicting the declaration is a ``ConfigError``. A dparallel model
        works in Å and eV whatever units its data came in: ``None``, ``"ase"`` or
        ``"angstrom-ev"``; any other value is a ``ConfigError``.
    """

    # ASE declares it an instance attribute, so it cannot be a ClassVar here.
    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]  # noqa: RUF012

    def __init__(
        self,
        model_dir: str | os.PathLike[str],
        dtype: torch.dtype = torch.float64,
        backend: str = "auto",
        skin: float = 0.5,
        threads: int | None = 1,
        units: str | None = None,
        device: str = "cpu",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._lock = threading.RLock()  # one call at a time: the atoms, results, list are shared
        self.threads = _thread_count(threads)
        skin = _skin(skin)
        if dtype not in (torch.float64, torch.float32):  # "float32" went on as a device
            raise ConfigError(
                f"Calculator: dtype={dtype!r}; give torch.float64 (the default) or torch.float32"
            )
        path = Path(model_dir)
        from dparallel.n2p2 import load_potential
        from dparallel.nn import is_n2p2_potential

        if is_n2p2_potential(path):  # an n2p2 potential: (ACSF, HDNNP) from its files
            from dparallel.n2p2.declared_units import potential_units

            chosen = potential_units(path, units, "ase")  # its declaration wins over a default
            self.model = DeployedModel(*load_potential(path, units=chosen), dtype, device)
        else:
            _check_model_units(path, units)
            model_file = path if path.suffix == ".pt" else path / DEPLOYED
            self.model = load_deployed(model_file, dtype, device)
        self.backend = backend
        self.skin = skin
        self.neighbor_list = VerletList(self.model.cutoff, self.skin)
        self._last_batch: StructureBatch | None = None
        self._stress_asked = False  # once True, every call on a periodic cell gives it
        self._warm_up()

    def _warm_up(self) -> None:
        """Run the model once on a small structure of its own elements (compiles kernels)."""
        from dparallel.deploy.probes import probe_atoms

        with self._threads():
            for atoms in probe_atoms(self.model.model.elements):
                self.model.predict(atoms, stress=True, backend=self.backend)

    @contextmanager
    def _threads(self) -> Iterator[None]:
        """Run a block with ``self.threads`` torch threads, then restore the setting."""
        previous = torch.get_num_threads()
        if self.threads is not None and self.threads != previous:
            torch.set_num_threads(self.threads)
        try:
            yield
        finally:
            if torch.get_num_threads() != previous:
                torch.set_num_threads(previous)

    def check_state(self, atoms: ase.Atoms, tol: float = 1e-15) -> list[str]:
        """Changes since the last calculation of what the model depends on (positions,
        atomic numbers, cell, pbc), compared exactly: ASE's comparison of every per-atom
        array with a tolerance is a noticeable part of an MD step (docs/deploy.md)."""
        old = self.atoms
        if old is None or len(old) != len(atoms):
            return list(_calc.all_changes)
        pairs = {
            "positions": (old.arrays["positions"], atoms.arrays["positions"]),
            "numbers": (old.arrays["numbers"], atoms.arrays["numbers"]),
            "cell": (old.cell.array, atoms.cell.array),
            "pbc": (old.pbc, atoms.pbc),
        }
        return [name for name, (a, b) in pairs.items() if not identical(a, b)]

    def __getstate__(self) -> dict[str, Any]:
        """The calculator's state for pickle and ``copy.deepcopy``, without its lock."""
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def get_property(
        self, name: str, atoms: ase.Atoms | None = None, allow_calculation: bool = True
    ) -> Any:
        """As ASE's ``get_property``, but the copy of the atoms kept in ``self.atoms`` is
        refreshed in place (:meth:`_remember`) instead of made anew on every MD step.
        Thread-safe: threads sharing the calculator take turns (each gets its own atoms'
        results, as one after the other)."""
        with self._lock:
            return self._get_property(name, atoms, allow_calculation)

    def _get_property(self, name: str, atoms: ase.Atoms | None, allow_calculation: bool) -> Any:
        if atoms is None or name not in self.implemented_properties:
            return super().get_property(name, atoms, allow_calculation)
        system_changes = self.check_state(atoms)
        if system_changes:
            self.results = {}
        if name not in self.results:
            if not allow_calculation:
                if system_changes:
                    self.atoms = None
                return None
            self._remember(atoms)
            self.calculate(atoms, [name], system_changes)
        if name not in self.results:
            raise _calc.PropertyNotImplementedError(f"{name} not present in this calculation")
        result = self.results[name]
        return result.copy() if isinstance(result, np.ndarray) else result

    def _remember(self, atoms: ase.Atoms) -> None:
        """``self.atoms`` = a copy of ``atoms``: the kept copy overwritten in place when it
        has the same per-atom arrays (names, shapes, dtypes) and neither has constraints,
        else ``atoms.copy()`` (a few % of an MD step: docs/deploy.md)."""
        old = self.atoms
        if (
            old is None
            or old is atoms
            or atoms.constraints
            or old.constraints
            or old.arrays.keys() != atoms.arrays.keys()
            or any(
                a.shape != old.arrays[k].shape or a.dtype != old.arrays[k].dtype
                for k, a in atoms.arrays.items()
            )
        ):
            self.atoms = atoms.copy()
            return
        for k, a in atoms.arrays.items():
            np.copyto(old.arrays[k], a)
        old.cell.array[:] = atoms.cell.array
        old.pbc[:] = atoms.pbc
        old.set_celldisp(atoms.get_celldisp())
        old.info = dict(atoms.info)

    def calculate(
        self,
        atoms: ase.Atoms | None = None,
        properties: list[str] | None = None,
        system_changes: list[str] = _calc.all_changes,
    ) -> None:
        """Compute the requested properties: energy, per-atom energies and forces at once;
        once the stress has been asked for, with every later call on a 3-D periodic cell
        too (its cost: docs/training.md), so that NPT and cell relaxations, which ask for forces and
        stress each step, get both from one call rather than two or three."""
        with self._lock:
            self._calculate(atoms, properties or ["energy"])

    def _calculate(self, atoms: ase.Atoms | None, properties: list[str]) -> None:
        if atoms is not None and (self.atoms is None or self.check_state(atoms)):
            # not the base class's unconditional copy: get_property has just refreshed
            # self.atoms, a second copy is a noticeable cost per MD step (docs/deploy.md)
            self._remember(atoms)
            self.results = {}  # a direct call on changed atoms: no result of the old ones
        assert self.atoms is not None
        periodic = bool(self.atoms.pbc.all())
        if "stress" in properties:
            if not periodic:
                raise _calc.PropertyNotImplementedError("stress needs a 3-D periodic cell")
            self._stress_asked = True
        with_stress = periodic and self._stress_asked
        batch = self._batch(self.atoms)
        with self._threads():
            out = self.model.predict(
                batch,
                forces=True,
                stress=with_stress,
                neighbors=self.neighbor_list.neighbors(batch),
                backend=self.backend,
            )
        check_finite_predictions(out, batch)
        energy = float(out["energy"][0])
        self.results.update(
            energy=energy, free_energy=energy, energies=out["energies"], forces=out["forces"]
        )
        if with_stress:
            self.results["stress"] = full_3x3_to_voigt_6_stress(np.asarray(out["stress"][0]))

    def _batch(self, atoms: ase.Atoms) -> StructureBatch:
        """The batch of ``atoms``: the last one with new positions while atomic numbers,
        cell and pbc are the same (MD), else built and validated anew. Non-finite
        positions or cell entries are refused first (:func:`_check_finite_geometry`)."""
        _check_finite_geometry(atoms)
        last = self._last_batch
        if (
            last is not None
            and identical(last.numbers, atoms.arrays["numbers"])
            and identical(last.cells[0], atoms.cell.array)
            and identical(last.pbc[0], atoms.pbc)
        ):
            batch = last.with_positions(atoms.arrays["positions"])
        else:
            batch = StructureBatch.from_ase(atoms, labels=False)
        self._last_batch = batch
        return batch


def _check_model_units(path: Path, units: str | None) -> None:
    """A :class:`ConfigError` unless ``units`` is ``None`` or names Å and eV: a dparallel
    model (unlike an n2p2 potential directory) has no other units to be loaded in."""
    if units is None:
        return
    from dparallel.io.units import check_units, same_units

    if not same_units(check_units(units, "Calculator: units", ConfigError), "ase"):
        raise ConfigError(
            f"Calculator: {path} is a dparallel model, which works in Å and eV whatever "
            f"units its data came in, not in units={units!r} (the units of an n2p2 potential "
            "directory): drop the units option, or give 'ase'"
        )


def _skin(skin: object) -> float:
    """``skin`` as a float if it is a real number ≥ 0, else a :class:`ConfigError`."""
    try:
        value = float(skin)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = float("nan")
    if isinstance(skin, bool) or not value >= 0:
        raise ConfigError(
            f"Calculator: skin={skin!r}; give the neighbour-list skin in Å, a number >= 0 "
            "(0.5 is the default; 0: a fresh list on every call)"
        )
    return value


def _thread_count(threads: object) -> int | None:
    """``threads`` if it is ``None`` or an integer ≥ 1, else a :class:`ConfigError`."""
    if threads is None:
        return None
    try:
        count = operator.index(threads)  # type: ignore[arg-type]
    except TypeError:
        count = 0
    if isinstance(threads, bool) or count < 1:
        raise ConfigError(
            f"Calculator: threads={threads!r}; give the number of torch threads per call, "
            "an integer >= 1 (1 is the default), or None to keep torch's setting"
        )
    return count


def _check_finite_geometry(atoms: ase.Atoms) -> None:
    """Raise :class:`InvalidStructureError` naming the first atom with a NaN or infinite
    coordinate (or the cell with such an entry): without a position, an atom would drop out
    of the neighbour list unnoticed (its energy then that of an isolated atom). One
    ``np.isfinite`` pass over the positions per call."""
    positions, cell = atoms.arrays["positions"], atoms.cell.array
    if np.isfinite(positions).all() and np.isfinite(cell).all():
        return
    from ase.data import chemical_symbols

    if not np.isfinite(positions).all():
        atom = int(np.flatnonzero(~np.isfinite(positions).all(axis=1))[0])
        element = chemical_symbols[int(atoms.arrays["numbers"][atom])]
        raise InvalidStructureError(
            f"Calculator: atom {atom} ({element}) is at {positions[atom].tolist()} Å, not a "
            "finite position; give every atom finite coordinates (a NaN usually comes from "
            "an MD step that diverged)"
        )
    row = int(np.flatnonzero(~np.isfinite(cell).all(axis=1))[0])
    raise InvalidStructureError(
        f"Calculator: cell vector {row} is {cell[row].tolist()} Å, not finite; give the "
        "atoms a finite cell (zeros where no direction is periodic)"
    )
