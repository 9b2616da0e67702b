"""Run a workflow end to end: dataset → featurize → train → export, skipping finished stages.

A stage is skipped when its output is complete and made from the same inputs: the dataset
file exists; the store is current (:func:`~dparallel.workflow.featurize.featurize_status`,
the predicate by which ``featurize`` resumes or refuses a store); the model directory holds
``model.pt`` trained with the same spec from the same store (else a sibling directory,
:mod:`~dparallel.workflow.run_dirs`); ``deployed.pt`` is newer than ``model.pt``. One
cluster serves featurization and stays attached during training (the dashboard shows both).
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel.workflow.run_dirs import choose_model_dir
from dparallel.workflow.spec import OVERWRITE_SETTING

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from dparallel.io.location import Location
    from dparallel.workflow.featurize import FeaturizeOptions
    from dparallel.workflow.spec import WorkflowSpec

__all__ = ["WorkflowResult", "run_workflow"]

log = logging.getLogger(__name__)


@dataclass
class WorkflowResult:
    """What a run produced and which stages it ran or skipped."""

    dataset: Path | Location  # a local path, or where a URL is
    store: Path | Location
    model_dir: Path | None
    stages: dict[str, str] = field(default_factory=dict)  # stage → "ran" | "skipped"
    metrics: dict[str, Any] = field(default_factory=dict)  # split → error metrics
    files: dict[str, str] = field(default_factory=dict)  # what → path
    notes: list[str] = field(default_factory=list)  # what the user must know (a new run dir)


def _shown(location: Location, given: str) -> Path | Location:
    """A local path as the user wrote it (a :class:`Path`), a URL as its location."""
    return Path(given) if location.local is not None else location


@contextlib.contextmanager
def _interruption(doing: str | Callable[[], str], kept: str | Callable[[], str]) -> Iterator[None]:
    """Ctrl-C (or SIGTERM) in this block: one :class:`RunInterruptedError` that says what
    the run was doing (``doing``, or ``doing()`` at that moment) and what is kept (the same
    of ``kept``) and what a rerun of the same command does (the finished stages are
    skipped)."""
    from dparallel.errors import RunInterruptedError

    try:
        yield
    except KeyboardInterrupt:
        said = kept if isinstance(kept, str) else kept()
        now = doing if isinstance(doing, str) else doing()
        raise RunInterruptedError(f"interrupted while {now}; {said}") from None


def _training_kept(model_dir: Path) -> str:
    """What an interrupted training stage leaves, for :func:`_interruption`."""
    from dparallel.train.model_dir import kept_checkpoint

    checkpoint = kept_checkpoint(model_dir)
    if checkpoint is None:
        return "no epoch had finished: rerun the same command to train"
    return f"{checkpoint} (the last finished epoch) is kept: rerun the same command to resume it"


def _dataset(spec: WorkflowSpec, say: Callable[[str], None]) -> tuple[Location, str]:
    location = spec.dataset_location()
    if location.exists():
        return location, "skipped"
    if spec.dataset.generate is None or location.local is None:
        from dparallel.errors import SourceNotFoundError

        why = (
            "generate writes local files only" if location.local is None else "no 'generate' is set"
        )
        raise SourceNotFoundError(f"dataset.path {location} does not exist ({why})")
    path = location.local
    from dparallel.datasets import write_emt_cu, write_emt_molecules

    gen = spec.dataset.generate
    what, write = {
        "emt_cu": ("EMT Cu structures", write_emt_cu),
        "emt_molecules": ("EMT-labelled molecules", write_emt_molecules),
    }[gen.kind]
    say(f"dataset: generating {gen.n_structures} {what} → {Path(spec.dataset.path)}")
    with _interruption(
        f"generating {spec.dataset.path}", "nothing of it is written: rerun the same command"
    ):
        write(path, n_structures=gen.n_structures, seed=gen.seed)
    return location, "ran"


#: How featurize's messages name its options in a workflow (run has no --overwrite flag).
_OPTION_NAMES = {
    "overwrite": OVERWRITE_SETTING,
    "partition_atoms": "partitioning.atoms",
    "memory_limit": "cluster.memory_limit",
}


def _featurize_options(spec: WorkflowSpec) -> FeaturizeOptions:
    """How the workflow's dataset is read and partitioned (what its store is compared on)."""
    from dparallel.workflow.featurize import FeaturizeOptions

    return FeaturizeOptions(
        format=spec.dataset.format,
        units=spec.dataset.units,
        on_error=spec.dataset.on_error,
        energy_key=spec.dataset.energy_key,
        forces_key=spec.dataset.forces_key,
        partition_atoms=spec.partitioning.atoms,
        option_names=_OPTION_NAMES,
    )


def _store_current(spec: WorkflowSpec, dataset: Location) -> bool:
    """Featurized completely from this very dataset and config (the predicate featurize uses)."""
    from dparallel.workflow.featurize import featurize_status

    status = featurize_status(
        dataset,
        spec.store_location(),
        spec.descriptor_set(),
        _featurize_options(spec),
    )
    if status.kind == "store" and status.differences:
        log.info("store %s is out of date: %s", status.path, "; ".join(status.differences))
    return status.current and "statistics" in status.attrs


def run_workflow(
    spec: WorkflowSpec,
    *,
    connect_to: Mapping[str, Any] | None = None,
    say: Callable[[str], None] = log.info,
    progress: Callable[[dict[str, Any], int, int], None] | None = None,
    on_epoch: Callable[[dict[str, Any]], None] | None = None,
    on_connect: Callable[[Any], None] | None = None,
    protect: Iterable[str | os.PathLike[str]] = (),
) -> WorkflowResult:
    """Run every stage of ``spec`` that is not already complete; returns what was made.

    ``connect_to``: :func:`dparallel.cluster.connect`'s ``client``, ``scheduler`` or
    ``scheduler_file``, instead of the workflow's ``cluster`` section. ``protect``: files
    the store path may never be or hold (the workflow file)."""
    from dparallel.workflow.featurize import featurize

    dataset, dataset_stage = _dataset(spec, say)
    store_path = spec.store_location()
    model_dir = Path(spec.output.model_dir) if spec.output is not None else None
    shown = _shown(store_path, spec.store.path)
    result = WorkflowResult(
        dataset=_shown(dataset, spec.dataset.path), store=shown, model_dir=model_dir
    )
    result.stages["dataset"] = dataset_stage
    featurize_needed = spec.store.overwrite or not _store_current(spec, dataset)
    train_needed = _training_needed(spec, featurize_needed, result, say)
    model_dir = result.model_dir
    statistics = None  # merged by featurize when it runs; else read back only if needed
    untrained = "skipped" if spec.training is not None and model_dir is not None else "off"
    if not (featurize_needed or train_needed):
        result.stages.update(featurize="skipped", train=untrained)
    else:
        stage = ["starting the cluster"]  # what a Ctrl-C outside a stage's own interrupts
        with _cluster(spec, connect_to, featurize_needed, lambda: stage[0]) as handle:
            stage[0] = f"featurizing {shown}" if featurize_needed else "starting training"
            if on_connect is not None:
                on_connect(handle)
            if featurize_needed:
                say(f"featurize: {result.dataset} → {shown}")
                options = replace(
                    _featurize_options(spec),
                    overwrite=spec.store.overwrite,
                    protect=tuple(protect),
                    client=handle.client,
                    torch_threads=spec.cluster.torch_threads,
                    progress=progress,
                )
                descriptors = spec.descriptor_set()
                statistics = featurize(dataset, store_path, descriptors, options).statistics
                result.stages["featurize"] = "ran"
            else:
                result.stages["featurize"] = "skipped"
            stage[0] = "closing the cluster"  # training says what it keeps itself
            if train_needed:
                assert model_dir is not None
                say(f"train: {shown} → {model_dir}")
                from dparallel.cluster.logs import scheduler_loss_said

                with scheduler_loss_said(
                    f"lost the Dask scheduler {handle.client.scheduler.address}: its dashboard "
                    f"shows no more epochs; training goes on here ({model_dir}/metrics.csv)"
                ):
                    result.metrics, resumed = _train(
                        spec, store_path, model_dir, on_epoch, featurize_needed, say
                    )
                result.stages["train"] = "resumed" if resumed else "ran"
            else:
                result.stages["train"] = untrained
    if spec.descriptor_set().acsf is not None:
        scaling = _write_scaling(store_path, spec.scaling_location(), statistics)
        result.files["scaling.data"] = str(
            shown.with_suffix(".scaling.data") if isinstance(shown, Path) else scaling
        )
    if model_dir is not None and spec.training is not None:
        _finish_model(spec, model_dir, result, say)
    result.files["store"] = str(shown)
    return result


@contextlib.contextmanager
def _cluster(
    spec: WorkflowSpec,
    connect_to: Mapping[str, Any] | None,
    featurize_needed: bool,
    doing: Callable[[], str],
) -> Iterator[Any]:
    """The run's cluster (with featurize's preloads when it featurizes), its handle; a
    Ctrl-C while it starts, featurizes or closes says what it did (``doing()``) and that
    the finished stages are kept."""
    from dparallel.cluster import connect
    from dparallel.cluster.worker_exit import FAST_EXIT_PRELOAD
    from dparallel.workflow.featurize_worker_preload import (
        FEATURIZE_FORKSERVER_PRELOAD,
        featurize_preloads,
    )

    with (
        _interruption(doing, "the finished stages are kept: rerun the same command to go on"),
        connect(
            spec.cluster,
            **(connect_to or {}),
            worker_preload=featurize_preloads() if featurize_needed else (FAST_EXIT_PRELOAD,),
            forkserver_preload=(FEATURIZE_FORKSERVER_PRELOAD,) if featurize_needed else (),
        ) as handle,
    ):
        yield handle


def _training_needed(
    spec: WorkflowSpec, featurize_needed: bool, result: WorkflowResult, say: Callable[[str], None]
) -> bool:
    """Whether the training stage runs; sets ``result.model_dir`` to the folder it writes
    (``choose_model_dir``: the configured one, or a new one beside it)."""
    if spec.training is not None and result.model_dir is None:
        # trains nothing: the stage reads "off", not "skipped" (which says "it is current")
        say("train: off (the workflow has no output.model_dir to train into)")
    if spec.training is None or result.model_dir is None:
        return False
    target = choose_model_dir(
        result.model_dir,
        spec.training.to_dict(),
        None if featurize_needed else _identity(spec.store_location()),
        featurize_needed,
    )
    result.model_dir = target.path
    if target.reason:
        result.notes.append(target.reason)
        say(f"train: {target.reason}")
    return target.train


def _identity(store: Location) -> dict[str, Any]:
    """The identity of the (current) store at ``store``, as training records it."""
    from dparallel.store import open_store, store_identity

    return store_identity(open_store(store))


def _write_scaling(store: Location, scaling: Location, statistics: Any) -> Location:
    """n2p2 ``scaling.data`` at ``scaling`` (:meth:`WorkflowSpec.scaling_location`),
    unless it is there and the store was not featurized now; uploaded for a URL."""
    from dparallel.store import open_store
    from dparallel.workflow.featurize import write_scaling_data

    if statistics is None and scaling.exists():
        return scaling
    write_scaling_data(open_store(store), scaling, statistics=statistics)
    return scaling


def _train(
    spec: WorkflowSpec,
    store_path: Location,
    model_dir: Path,
    on_epoch: Callable[[dict[str, Any]], None] | None,
    refeaturized: bool,
    say: Callable[[str], None],
) -> tuple[dict[str, Any], bool]:
    """Train from the store into ``model_dir``: the validation and test metrics, and
    whether an interrupted run's checkpoint there was resumed (the store not made again,
    the same training configuration; else it trains afresh, as before)."""
    with _interruption(f"training {model_dir}", lambda: _training_kept(model_dir)):
        # torch's import (seconds) included
        from dparallel.dashboard import epoch_publisher
        from dparallel.errors import CheckpointMismatchError
        from dparallel.store import open_store
        from dparallel.train import train
        from dparallel.train.model_dir import kept_checkpoint
        from dparallel.train.reporting import read_history

        assert spec.training is not None

        def trained_with(history: list[dict[str, Any]], resume: bool) -> Any:
            # a resumed run's dashboard curves go on from its earlier epochs; its end is shown
            publisher = epoch_publisher(spec.name, history)
            with publisher.ending():  # on the page from here: a store it cannot open is shown
                opened = open_store(store_path)
                callbacks: list[Callable[[dict[str, Any]], Any]] = [publisher]
                callbacks += [on_epoch] if on_epoch else []
                return train(opened, model_dir, spec.training, callback=callbacks, resume=resume)

        resume = not refeaturized and kept_checkpoint(model_dir) is not None
        try:
            trained = trained_with(read_history(model_dir) if resume else [], resume)
        except CheckpointMismatchError as exc:  # anything else is no reason to start again
            if not resume:
                raise
            say(f"train: the checkpoint in {model_dir} is not resumed ({exc}); training afresh")
            resume = False
            trained = trained_with([], resume)
    return {"validation": trained.validation, "test": trained.test}, resume


def _finish_model(spec: WorkflowSpec, model_dir: Path, result: WorkflowResult, say: Any) -> None:
    """Export (unless current) and collect metrics and plot paths."""
    assert spec.output is not None
    if spec.output.export and spec.training is not None:
        from dparallel.train.export import describe_report, export_model, export_needed

        why = export_needed(model_dir)  # the completion record export.json, not deployed.pt
        if why is None:
            result.stages["export"] = "skipped"
        else:
            fresh = result.stages.get("train") in ("ran", "resumed")  # exported as usual
            say(f"export: {model_dir}" if fresh else f"export: {model_dir} ({why})")
            with _interruption(
                f"exporting {model_dir}",
                "the trained model is kept: rerun the same command to export it",
            ):
                report = export_model(model_dir)
            for line in describe_report(report):
                say(f"  {line}")
            result.stages["export"] = "ran"
    else:
        result.stages["export"] = "off"
    from dparallel.train.metric_units import without_units

    if not result.metrics:
        metrics_file = model_dir / "metrics.json"
        if metrics_file.exists():
            data = json.loads(metrics_file.read_text())
            result.metrics = {k: without_units(m) for k, m in data.get("final", {}).items()}
    result.files["model_dir"] = str(model_dir)
    for name in sorted(p.name for p in model_dir.glob("*") if not p.name.startswith(".")):
        if name.endswith((".png", ".csv", ".json", ".pt", ".pt2", ".ts")):
            result.files[name] = str(model_dir / name)
