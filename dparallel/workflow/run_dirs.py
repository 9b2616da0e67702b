"""Where ``dparallel run`` trains: never over a finished model of another configuration.

A model directory holding a finished model (``model.pt`` and final metrics) trained with
another training spec, or from another store, is kept; the run trains into the first
sibling ``<model_dir>-2``, ``-3``, … that is free, or reuses one that already holds a
model of this very configuration. Which store a model is trained from is the store
identity (:func:`dparallel.store.store_identity`: a uuid new with every store made) that
training records in the model directory's marker
(:func:`dparallel.train.model_dir.trained_from`); a finished model whose marker records
none (made by an older dparallel) counts as trained from another store. A model that
started from another one (``init_from``) counts as another configuration once that model
changed (its :func:`~dparallel.nn.folders.model_fingerprint`, recorded in the marker).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["ModelTarget", "choose_model_dir", "finished_model"]


@dataclass(frozen=True)
class ModelTarget:
    """The directory to use, whether it needs training and, if moved, why."""

    path: Path
    train: bool
    reason: str = ""


def _read(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def finished_model(model_dir: Path) -> bool:
    """Whether ``model_dir`` holds a finished model (``model.pt`` and final metrics)."""
    metrics = _read(model_dir / "metrics.json")
    return (model_dir / "model.pt").exists() and isinstance(metrics, dict) and "final" in metrics


def _changed(old: Any, new: Any) -> list[str]:
    from dparallel.config import differences

    return [f"{key}: {a!r} → {b!r}" for key, a, b in differences(old, new)]


#: Training keys that say where or how fast a model trained, not what: a change does not
#: retrain it.
_WHERE_TRAINED = dict.fromkeys(
    ("device", "data_on_device", "batch_prefetch", "prefetch", "threads")
)


def _what_trained(spec: Any) -> Any:
    return {**spec, **_WHERE_TRAINED} if isinstance(spec, dict) else spec


def _mismatch(model_dir: Path, training: dict[str, Any], store: dict[str, Any] | None) -> str:
    """Why the finished model in ``model_dir`` is not of this configuration ("" if it is)."""
    saved = _what_trained(_read(model_dir / "spec.json"))
    training = _what_trained(training)
    if saved != training:
        return "training " + ", ".join(_changed(saved, training)[:4] or ["spec unreadable"])
    from dparallel.train.model_dir import trained_from  # here: it loads torch

    recorded = trained_from(model_dir)
    if recorded is None:
        return "it records no store identity (trained by an older dparallel)"
    if recorded != store:
        return "it was trained from another store (featurized again since)"
    return _source_changed(model_dir, training.get("init_from"))


def _source_changed(model_dir: Path, init_from: Any) -> str:
    """Why the model in ``model_dir`` did not start from the model now at ``init_from``
    ("" if it did, or the spec names none): that model was trained or exported again."""
    if init_from is None:
        return ""
    from dparallel.config import resolve_path
    from dparallel.nn.folders import model_fingerprint
    from dparallel.train.model_dir import started_from

    if started_from(model_dir) != model_fingerprint(resolve_path(init_from)):
        return f"the model it started from (init_from {init_from}) changed since"
    return ""


def choose_model_dir(
    model_dir: Path, training: dict[str, Any], store: dict[str, Any] | None, refeaturized: bool
) -> ModelTarget:
    """The directory this run trains into (or whose model it reuses), never discarding one.

    ``training``: the training spec (``to_dict()``); ``store``: the
    :func:`~dparallel.store.store_identity` of the store it trains from (``None`` where
    there is none yet); ``refeaturized``: the store is being made again this run (no
    existing model can be of it).
    """
    if not finished_model(model_dir):
        return ModelTarget(model_dir, train=True)
    why = "it was trained from the store featurized again now" if refeaturized else ""
    why = why or _mismatch(model_dir, training, store)
    if not why:
        return ModelTarget(model_dir, train=False)
    k = 2
    while True:
        sibling = model_dir.with_name(f"{model_dir.name}-{k}")
        if not finished_model(sibling):
            break
        if not refeaturized and not _mismatch(sibling, training, store):
            return ModelTarget(sibling, train=False, reason=_kept(model_dir, why, sibling, False))
        k += 1
    return ModelTarget(sibling, train=True, reason=_kept(model_dir, why, sibling, True))


def _kept(model_dir: Path, why: str, sibling: Path, train: bool) -> str:
    action = f"this run trains into {sibling}" if train else f"this run uses {sibling}"
    return (
        f"{model_dir} holds a finished model of another configuration ({why}); it is kept, {action}"
    )
