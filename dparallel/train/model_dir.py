"""A model directory: ours or refused, one training run at a time, one store per model.

:func:`claim_model_dir` is what :func:`~dparallel.train.train` does first
(docs/reliability.md): the folder must be new, empty, or carry :data:`MARKER` (or be an
older model directory of only :data:`MODEL_FILES`); the run holds its lease
(:class:`~dparallel.store.StoreLease`); a run that does not resume removes every file of
the older model; the store's identity is recorded in the marker and compared on
``--resume`` and every epoch (:func:`check_store_unchanged`). A run that fails before
training starts and made the folder leaves no folder behind.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel._files import check_claimable, claim_directory, remove_file, write_file
from dparallel.config import read_json_object
from dparallel.errors import CheckpointMismatchError, TrainingError
from dparallel.nn.folders import DATA_UNITS_JSON, model_fingerprint, model_folder
from dparallel.store import StoreLease, current_identity, held_lease, store_identity

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from dparallel.store import Store

#: The file that makes a folder a dparallel model directory (JSON: kind, store identity).
MARKER = ".dparallel-model.json"
#: Every file a training run or ``dparallel export`` writes into a model directory.
MODEL_FILES = (
    "checkpoint.pt",
    "best.pt",
    "model.pt",
    "spec.json",
    "metrics.csv",
    "metrics.json",
    DATA_UNITS_JSON,
    "store.json",  # which store, as `dparallel run` recorded it before the marker did
    "*.png",
    "deployed.pt",
    "export.json",
    "potential.pt2",
    "potential_aoti.pt2",
    "potential.ts",
    "atomic_energy_*.pt2",
    "lammps.model",
    "*.partial",
    ".*.partial*",
)
#: The default n2p2 export folder (``dparallel export --format n2p2``) and its files.
_N2P2 = "n2p2"
_N2P2_FILES = ("input.nn", "scaling.data", "weights.*.data", ".dparallel-n2p2.json", "*.partial")


def _known(name: str, patterns: tuple[str, ...] = MODEL_FILES) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _legacy(folder: Path, entries: set[str]) -> bool:
    """A model directory written before markers: only its files, spec.json and a model."""
    files = entries - {_N2P2}
    if _N2P2 in entries and not _n2p2_export(folder / _N2P2):
        return False
    has_model = bool({"checkpoint.pt", "model.pt", "best.pt"} & files)
    return all(_known(n) for n in files) and "spec.json" in files and has_model


def _n2p2_export(folder: Path) -> bool:
    """Whether ``folder`` is a plain folder holding only n2p2 export files."""
    if not folder.is_dir() or folder.is_symlink():
        return False
    return all(_known(n, _N2P2_FILES) for n in os.listdir(folder))


def _read_marker(model_dir: Path) -> dict[str, Any]:
    return read_json_object(model_dir / MARKER)


def trained_from(model_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The identity (:func:`~dparallel.store.store_identity`) of the store the model in
    ``model_dir`` is trained from, as its marker records it; ``None`` where it records none
    (no marker, or one written before identities were recorded)."""
    recorded = _read_marker(Path(model_dir)).get("store")
    identity = recorded.get("identity") if isinstance(recorded, dict) else None
    return identity if isinstance(identity, dict) else None


def started_from(model_dir: str | os.PathLike[str]) -> str | None:
    """The :func:`~dparallel.nn.folders.model_fingerprint` of the model (``init_from``) the
    model in ``model_dir`` started from, as its marker records it; ``None`` where none."""
    fingerprint = _read_marker(Path(model_dir)).get("init_from")
    return fingerprint if isinstance(fingerprint, str) else None


def kept_checkpoint(model_dir: str | os.PathLike[str]) -> Path | None:
    """The checkpoint of the last finished epoch that a stopped run leaves in
    ``model_dir`` (resumed by ``--resume``, or by rerunning ``dparallel run``), if any."""
    checkpoint = Path(model_dir) / "checkpoint.pt"
    return checkpoint if checkpoint.exists() else None


def _remove_old_model(model_dir: Path) -> None:
    """Every file of an earlier model in ``model_dir`` (see module docstring)."""
    for entry in os.scandir(model_dir):
        if entry.name != MARKER and _known(entry.name) and not entry.is_dir(follow_symlinks=False):
            remove_file(model_dir / entry.name, root=model_dir)
    if _n2p2_export(model_dir / _N2P2):
        shutil.rmtree(model_dir / _N2P2)


def _describe(identity: dict[str, Any] | None) -> str:
    if identity is None:
        return "no store"
    return f"identity {identity.get('identity')}, created {identity.get('created')}"


def _judge(how: Callable[..., bool], path: Path, protect: list[str | os.PathLike[str]]) -> bool:
    """``how`` (:func:`claim_directory` or :func:`check_claimable`) applied to a model
    folder: our marker, earlier dparallel's model folders adopted, the run's inputs
    ``protect`` (the local store folder, ``init_from``'s model) protected."""
    return how(path, MARKER, "model", protect=protect, adopt=lambda names: _legacy(path, names))


def check_model_dir(
    model_dir: str | os.PathLike[str],
    store: str | os.PathLike[str] | None,
    init_from: str | os.PathLike[str] | None = None,
) -> None:
    """Raise :class:`~dparallel.errors.UnsafePathError` where :func:`claim_model_dir`
    would refuse ``model_dir`` (a file, a folder of someone else's, one that is, holds or
    lies inside the local ``store`` folder or ``init_from``'s model; ``store`` ``None``: a
    URL store); nothing is written."""
    protect = [p for p in (store, _folder(init_from)) if p is not None]
    _judge(check_claimable, Path(model_dir).expanduser(), protect)


def _folder(init_from: str | os.PathLike[str] | None) -> Path | None:
    """The folder of the model ``init_from`` names (its ``model.pt`` or ``input.nn``
    stands for it)."""
    if init_from is None:
        return None
    return model_folder(Path(init_from).expanduser())


def _other_start(doc: dict[str, Any], init_from: str | os.PathLike[str] | None) -> str:
    """How the model a resumed run would continue started otherwise than the run says."""
    if init_from is None:
        why = "started from a model (init_from), this run from none"
    elif doc.get("init_from") is None:
        why = f"started without init_from, this run from {init_from}"
    else:
        why = (
            f"started from another model than {init_from} is now (it was trained or exported "
            "again since, or init_from names another)"
        )
    return f"{why}: train anew (without --resume) or into a new MODEL_DIR"


@contextlib.contextmanager
def claim_model_dir(
    model_dir: str | os.PathLike[str],
    store: Store,
    *,
    resume: bool = False,
    init_from: str | os.PathLike[str] | None = None,
) -> Iterator[Path]:
    """Hold ``model_dir`` for one training run (see module docstring); yields its path.
    ``init_from``: the model the run starts from, protected as the store; its
    :func:`~dparallel.nn.folders.model_fingerprint` is recorded (:func:`started_from`).

    Raises
    ------
    UnsafePathError
        The folder is not ours, or it is, holds or lies inside the store or ``init_from``.
    StoreBusyError
        Another run trains into it.
    TrainingError
        ``resume`` and the store, or ``init_from``'s model, is not the one the checkpoint
        was trained from.
    """
    path = Path(model_dir).expanduser()
    local = [store.path] if store.is_local else []  # a URL store cannot alias a folder
    source_folder = _folder(init_from)
    protect: list[str | os.PathLike[str]] = [*local]
    if source_folder is not None:
        protect.append(source_folder)
    created = _judge(claim_directory, path, protect)
    try:
        with StoreLease(
            path, command="dparallel train", readers="evaluating it (evaluate, the ASE calculator)"
        ):
            doc = _read_marker(path)
            now = store_identity(store)
            recorded = doc.get("store")
            if resume and isinstance(recorded, dict) and recorded.get("identity") != now:
                raise CheckpointMismatchError(
                    f"--resume: {path} was trained from another store than {store.location} "
                    f"is now (then: {_describe(recorded.get('identity'))}; now: "
                    f"{_describe(now)}): it was featurized again or overwritten. Train anew "
                    "(without --resume) or into a new MODEL_DIR"
                )
            if not resume:
                _remove_old_model(path)
            source = None if init_from is None else model_fingerprint(init_from)
            if resume and doc.get("init_from") != source:  # before the marker is rewritten
                raise CheckpointMismatchError(f"--resume: {path} {_other_start(doc, init_from)}")
            doc["store"] = {"location": str(store.location), "identity": now}
            doc.pop("init_from", None)
            if init_from is not None:
                doc["init_from"] = source
            write_file(path / MARKER, json.dumps(doc, indent=1) + "\n", root=path, durable=True)
            yield path
    except BaseException:
        with contextlib.suppress(OSError):
            if created and os.listdir(path) == [MARKER]:  # failed before anything of a
                (path / MARKER).unlink()  # model was written: no folder left
                path.rmdir()
        raise


def check_store_unchanged(store: Store, model_dir: Path) -> None:
    """Raise :class:`TrainingError` if the store changed since the run began (another
    identity, or gone) or the model directory's lease was lost; once per epoch."""
    lease = held_lease(model_dir)
    if lease is not None:
        lease.check()
    recorded = _read_marker(model_dir).get("store")
    if not isinstance(recorded, dict):
        return
    then = recorded.get("identity")
    now = current_identity(store)
    if now != then:
        raise TrainingError(
            f"the store {store.location} changed under this run (then: {_describe(then)}; "
            f"now: {_describe(now)}): it was featurized again, overwritten or removed. The "
            f"checkpoint of the last full epoch on the old data is kept in {model_dir}; "
            "train anew (without --resume) to train on the new data"
        )
