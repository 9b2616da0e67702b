"""``dparallel evaluate MODEL_DIR DATA``: energy/force errors of a model on a structure file."""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from dparallel.cli._options import (
    add_json_argument,
    add_label_arguments,
    device_option,
    local_argument,
    whole_number,
)

if TYPE_CHECKING:
    import argparse

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> None:
    """Register the ``evaluate`` sub-command."""
    from dparallel.io.units import UNIT_SYSTEMS

    p = subparsers.add_parser(
        "evaluate",
        help="energy and force RMSE/MAE of a deployed model on a structure file",
        description="Predict every structure of DATA with MODEL_DIR/deployed.pt and print "
        "energy (per atom) and force-component RMSE and MAE.",
    )
    p.add_argument(
        "model_dir",
        type=local_argument("the model directory"),
        help="directory with deployed.pt (`dparallel export`) or an n2p2 potential "
        "(input.nn, scaling.data, weights.XXX.data)",
    )
    p.add_argument(
        "data",
        help="structure file (extxyz, n2p2, each also .gz, .bz2 or .xz; any ASE format): a path "
        "or a URL",
    )
    p.add_argument("--format", help="format of DATA (default: guess)")
    p.add_argument(
        "--units",
        choices=sorted(UNIT_SYSTEMS),
        help="units of DATA (as for ingest; default: those of the data MODEL_DIR was "
        "trained from, as it records them, else ase)",
    )
    p.add_argument(
        "--potential-units",
        choices=sorted(UNIT_SYSTEMS),
        help="units of an n2p2 potential directory (default: those its input.nn declares, "
        "else those of DATA, --units)",
    )
    add_label_arguments(p, first="the key MODEL_DIR's training data was read with, else ")
    p.add_argument(
        "--batch",
        type=whole_number(1, "structure"),
        default=64,
        help="structures per prediction batch (default 64)",
    )
    p.add_argument(
        "--device",
        type=device_option,
        default="cpu",
        help="where the model predicts: auto (CUDA when present), cpu (default), cuda or cuda:N",
    )
    p.add_argument(
        "--split",
        choices=("test", "validation"),
        help="only the structures of DATA (the file MODEL_DIR's store was made from) that "
        "MODEL_DIR/metrics.json names in this split (test_ids, validation_ids); default: all",
    )
    add_json_argument(p, "the errors (meV, the unit in each name)")
    p.set_defaults(func=run)


def _data_units(model_dir: str, data: str, format: str | None, units: str | None) -> str:
    """DATA's units: as given (a warning when not the recorded ones), else those the
    model's training data came in (a warning when DATA is another format and those are not
    ASE's), else ase."""
    from dparallel.io.units import same_units
    from dparallel.train.data_units import recorded_data_format, recorded_data_units

    recorded = recorded_data_units(model_dir)
    if units is None:
        trained_from = recorded_data_format(model_dir)
        if recorded is not None and trained_from is not None and not same_units(recorded, "ase"):
            from dparallel.io import StructureSource

            if (kind := StructureSource(data, format).format) != trained_from:
                log.warning(
                    "%s: read in %s, the units of %s's training data (format %s); this file's "
                    "format is %s: if its numbers are in Å and eV, give --units ase",
                    data, recorded, model_dir, trained_from, kind,
                )  # fmt: skip
        return recorded or "ase"

    if recorded is not None and not same_units(units, recorded):
        log.warning(
            "%s was trained from %s data, DATA is read as %s (--units): if DATA is the same "
            "kind of file, drop --units",
            model_dir,
            recorded,
            units,
        )
    return units


def _recorded_keys(
    model_dir: str, data: str, format: str | None, given: dict[str, str | None]
) -> dict[str, str]:
    """The label keys DATA is read under that are not ``given``: those the model's
    training data was read with (``data_units.json``), except in an n2p2 file (whose
    labels have fixed places); ``{}``: the defaults."""
    from dparallel.train.data_units import recorded_label_keys

    recorded = {k: v for k, v in recorded_label_keys(model_dir).items() if given[k] is None}
    if not recorded:
        return {}
    from dparallel.io import StructureSource

    if StructureSource(data, format).format == "n2p2":
        return {}
    log.info("%s: labels read under %s, as %s's training data was", data, recorded, model_dir)
    return recorded


def _read(source: Any, a: int, b: int, recorded: dict[str, str], model_dir: str) -> Any:
    """``source.read(a, b)``; a structure without a key taken from the model's record
    is refused saying where that key came from."""
    from dparallel.errors import InputFormatError

    try:
        return source.read(a, b)
    except InputFormatError as exc:
        taken = [f"{k} {v!r}" for k, v in recorded.items() if f"{k} {v!r}" in exc.reason]
        if not taken:
            raise
        why = f"{exc.reason} ({taken[0]}: the key {model_dir}'s training data was read with)"
        raise InputFormatError(why, path=exc.path, line=exc.line, frame=exc.frame) from None


def _groups(n: int, size: int, ids: list[int] | None) -> list[list[tuple[int, int]]]:
    """Batches of at most ``size`` structures, each a list of ``[a, b)`` ranges read
    together: all ``n`` in order, or the runs of ``ids`` (a split's, scattered over the
    file: one prediction per batch, not per run)."""
    if ids is None:
        return [[(a, min(n, a + size))] for a in range(0, n, size)]
    import numpy as np

    unique = np.unique(np.asarray(ids, dtype=np.int64))
    runs = np.split(unique, np.flatnonzero(np.diff(unique) != 1) + 1) if unique.size else []
    groups: list[list[tuple[int, int]]] = [[]]
    room = size
    for run in runs:
        a, stop = int(run[0]), int(run[-1]) + 1
        while a < stop:
            if room == 0:
                groups.append([])
                room = size
            b = min(stop, a + room)
            groups[-1].append((a, b))
            room -= b - a
            a = b
    return [g for g in groups if g]


def _split_ids(model_dir: str, split: str, data: str, n: int) -> list[int]:
    """The structures of DATA in ``split`` (``metrics.json``); DATA must be the file the
    model's store was made from, as far as its length tells."""
    from dparallel.train.reporting import split_ids

    if split not in ("test", "validation"):
        from dparallel.errors import ConfigError

        raise ConfigError(f"split {split!r}: test or validation (metrics.json's test_ids, ...)")
    ids, held = split_ids(model_dir, split)
    if not ids:
        from dparallel.errors import InputError

        raise InputError(
            f"{model_dir}: its {split} split is empty ({split}_fraction 0, or it drew none of "
            "the structures: metrics.json's splits), so there is nothing to evaluate"
        )
    if (held is not None and held != n) or any(not 0 <= i < n for i in ids):
        from dparallel.errors import InputError

        raise InputError(
            f"{data}: {n} structures, but {model_dir}'s {split}_ids are indices of the file its "
            f"store was made from ({held} structures): give that file as DATA for --split"
        )
    return ids


def evaluate_file(
    model_dir: str,
    data: str,
    format: str | None = None,
    units: str | None = None,
    batch: int = 64,
    potential_units: str | None = None,
    device: str = "cpu",
    **options: str | None,
) -> dict[str, float]:
    """Errors of the deployed model (or n2p2 potential) on ``data`` (eV/atom, eV/Å).

    ``units=None``: the units of the data the model was trained from (``data_units.json``)
    or ``ase``. ``potential_units=None``: the units an n2p2 potential's ``input.nn``
    declares, else ``units``; a contradicting ``potential_units`` is a ``ConfigError``.
    ``device``: where the model predicts (auto, cpu, cuda, cuda:N). ``options``: ``split``,
    ``test`` or ``validation``: only the structures of ``data`` (the file the model's store
    was made from) that ``metrics.json`` names in that split; ``None``: all. And
    ``energy_key``, ``forces_key``, where DATA keeps its reference labels (as for ingest);
    ``None`` or not given: the key the model's training data was read with, if one was
    given then.
    """
    unknown = set(options) - {"energy_key", "forces_key", "split"}
    if unknown:
        raise TypeError(f"evaluate_file() got unexpected keyword arguments {sorted(unknown)}")
    import numpy as np
    import torch

    from dparallel.deploy import DeployedModel, load_deployed
    from dparallel.io import open_source
    from dparallel.n2p2 import load_potential
    from dparallel.n2p2.declared_units import potential_units as resolve
    from dparallel.nn import is_n2p2_potential
    from dparallel.train.reporting import Metrics
    from dparallel.types import StructureBatch

    units = _data_units(model_dir, data, format, units)
    if is_n2p2_potential(model_dir):  # an n2p2 potential: its declared units, else DATA's
        chosen = resolve(model_dir, potential_units, units)
        model = DeployedModel(*load_potential(model_dir, units=chosen), device=device)
    else:
        if potential_units is not None:
            from dparallel.errors import ConfigError

            raise ConfigError(
                f"--potential-units is for an n2p2 potential directory; {model_dir} is a "
                "dparallel model, whose units are its own (give DATA's with --units)"
            )
        model = load_deployed(model_dir, device=device)
    given = {k: options.get(k) for k in ("energy_key", "forces_key")}
    recorded = _recorded_keys(model_dir, data, format, given)
    energy_key, forces_key = (recorded.get(k, given[k]) for k in ("energy_key", "forces_key"))
    source = open_source(data, format, units=units, energy_key=energy_key, forces_key=forces_key)
    metrics = Metrics()
    n_s = 0
    split = options.get("split")
    ids = None if split is None else _split_ids(model_dir, split, data, len(source))
    for group in _groups(len(source), batch, ids):
        parts = [_read(source, a, stop, recorded, model_dir) for a, stop in group]
        b = parts[0] if len(parts) == 1 else StructureBatch.concatenate(parts)
        out = _predict(model, b, group, data)
        de = (out["energy"] - b.energy) / np.maximum(b.atom_counts, 1)
        # NaN references (structures without an energy, atoms without forces) are left out
        metrics.add_errors(torch.as_tensor(de), torch.as_tensor(out["forces"] - b.forces))
        n_s += b.n_structures
    summary = metrics.summary()
    del summary["loss"]  # no loss here: errors only
    if np.isnan(summary["energy_rmse"]) and np.isnan(summary["force_rmse"]):
        from dparallel.errors import InputError

        raise InputError(
            f"{data}: no energies and no forces to compare the model with ({n_s} structures "
            "read; keys other than energy/forces: --energy-key, --forces-key; docs/io.md)"
        )
    return {"n_structures": n_s, **summary}


def _predict(model: Any, b: Any, group: list[tuple[int, int]], data: str) -> dict[str, Any]:
    """``model``'s energies and forces for the batch ``b`` of the ranges ``group`` of
    ``data``; an unknown element or a non-finite prediction names its structure's index
    in the file."""
    import numpy as np

    from dparallel.deploy.finite import check_finite_predictions
    from dparallel.errors import UnknownElementError

    index = np.concatenate([np.arange(a, stop) for a, stop in group])
    try:
        out = model.predict(b, forces=True)
    except UnknownElementError as exc:  # its structure named in the file, not the batch
        raise UnknownElementError(int(index[exc.structure]), exc.detail, f"{data}: ") from None
    check_finite_predictions(out, b, index=index, where=f"{data}: ")
    return out


def run(args: argparse.Namespace) -> int:
    """Evaluate and print a table (or JSON, the unit in each error's name, meV)."""
    res = evaluate_file(
        args.model_dir,
        args.data,
        args.format,
        args.units,
        args.batch,
        args.potential_units,
        args.device,
        energy_key=args.energy_key,
        forces_key=args.forces_key,
        split=args.split,
    )
    if args.json:
        from dparallel._files import strict_json
        from dparallel.train.metric_units import with_units

        print(strict_json(with_units(res), what="evaluate --json", missing=True))
        return 0
    print(f"{res['n_structures']} structures")
    print(f"{'':8s} {'RMSE':>10s} {'MAE':>10s}")
    for name, unit, labels in (("energy", "meV/atom", "energies"), ("force", "meV/Å", "forces")):
        rmse, mae = res[f"{name}_rmse"], res[f"{name}_mae"]
        if math.isnan(rmse):  # DATA holds none of these labels
            print(f"{name:8s} {'—':>10s} {'—':>10s} {unit} (no {labels} in {args.data})")
        else:
            print(f"{name:8s} {1e3 * rmse:10.3f} {1e3 * mae:10.3f} {unit}")
    return 0
