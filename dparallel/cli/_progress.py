"""Terminal output of the commands: progress bars (tqdm), error lines and closing lines.

Bars draw only on a terminal (tqdm's ``disable=None``) and never with ``--quiet``; logs are
written either way. The featurization rate and ETA are
:func:`~dparallel.dashboard.state.throughput` — the function the dashboard page uses — fed
the start event and each partition's report as they reach this process.
"""

from __future__ import annotations

import math
import shlex
import time
from typing import TYPE_CHECKING, Any, TextIO

from tqdm import tqdm

from dparallel.dashboard.state import Finished, Throughput, throughput

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Sequence

    from dparallel.descriptors.descriptor_set import DescriptorSet

__all__ = [
    "EpochProgress",
    "FeaturizeProgress",
    "clock_text",
    "closing_lines",
    "error_line",
    "milli",
    "store_line",
    "store_summary",
    "train_options",
]


def clock_text(seconds: float | None) -> str:
    """``mm:ss`` (``h:mm:ss`` past an hour); ``--:--`` when unknown."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "--:--"
    s = round(seconds)
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m:02d}:{s % 60:02d}"


def _disable(quiet: bool, force: bool) -> bool | None:
    return True if quiet else (False if force else None)  # None: tqdm draws on a TTY only


class FeaturizeProgress:
    """``progress(event, done, total)`` callback of :func:`dparallel.workflow.featurize`.

    The bar counts atoms; its postfix shows partitions done, atoms/s, structures/s and
    the ETA from :meth:`throughput`.
    """

    def __init__(
        self,
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        force: bool = False,
        clock: Callable[[], float] = time.time,
        min_interval: float = 0.1,
    ) -> None:
        self.quiet, self.stream, self.force, self.clock = quiet, stream, force, clock
        self.min_interval = min_interval
        self.started: float | None = None
        self.structures_total: int | None = None
        self.finished: list[Finished] = []
        self.bar: tqdm | None = None

    def __call__(self, event: dict[str, Any], done: int, total: int) -> None:
        if event.get("kind") == "start":
            self.started = self.clock()
            self.structures_total = int(event.get("n_structures", 0))
            self.finished = []
            self.bar = tqdm(
                total=int(event.get("n_atoms", 0)) or None,
                desc="featurize",
                unit="atom",
                file=self.stream,
                disable=_disable(self.quiet, self.force),
                mininterval=self.min_interval,
                miniters=1,
                bar_format="{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} atoms "
                "[{elapsed}{postfix}]",
                dynamic_ncols=True,
            )
            return
        self.finished.append(
            Finished(
                self.clock(),
                float(event.get("seconds", 0.0)),
                int(event.get("n_structures", 0)),
                int(event.get("n_atoms", 0)),
                int(event.get("n_skipped", 0)),  # of the total, not done: not left either
            )
        )
        if self.bar is not None:
            rate = self.throughput()
            self.bar.set_postfix_str(
                f"{done}/{total} partitions, {rate.atoms_per_second or 0:,.0f} atoms/s, "
                f"{rate.structures_per_second or 0:,.1f} structures/s, "
                f"ETA {clock_text(rate.eta_seconds)}",
                refresh=False,
            )
            self.bar.update(self.finished[-1].n_atoms)
            if done >= total:
                self.bar.close()

    def throughput(self) -> Throughput:
        """Rates and ETA so far, as the dashboard computes them."""
        return throughput(self.started, self.finished, self.structures_total)


class EpochProgress:
    """Training progress: a bar over epochs with each epoch's time, rate and the ETA.

    Times come from the rows, not the bar's clock (it may be made late); ``update(row)`` takes a row
    of the training history (``epoch``, ``seconds``, ``train_structures``, RMSEs in
    eV/atom and eV/Å). The ETA is the mean epoch time × the epochs left.
    """

    def __init__(
        self,
        epochs: int,
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        force: bool = False,
        min_interval: float = 0.1,
    ) -> None:
        self.epochs = int(epochs)
        self.bar = tqdm(
            total=self.epochs,
            desc="train",
            unit="epoch",
            file=stream,
            disable=_disable(quiet, force),
            mininterval=min_interval,
            miniters=1,
            bar_format="{desc} {n_fmt}/{total_fmt} epochs |{bar}| [{elapsed}{postfix}]",
            dynamic_ncols=True,
        )
        self.seconds: list[float] = []

    def update(self, row: dict[str, Any]) -> None:
        """Count one finished epoch (``row["epoch"]`` is 0-based)."""
        self.seconds.append(float(row.get("seconds", 0.0)))
        self.bar.set_postfix_str(self.postfix(row), refresh=False)
        self.bar.update(int(row.get("epoch", 0)) + 1 - self.bar.n)  # resumed runs jump ahead

    def postfix(self, row: dict[str, Any]) -> str:
        """Epoch time, structures/s, ETA and validation RMSEs (meV) of ``row``."""
        sec = self.seconds[-1]
        n = row.get("train_structures")
        rate = f", {n / sec:,.1f} structures/s" if n and sec > 0 else ""
        left = self.epochs - int(row.get("epoch", 0)) - 1
        eta = clock_text(left * sum(self.seconds) / len(self.seconds))
        return (
            f"epoch {sec:.2f} s{rate}, ETA {eta}, val E "
            f"{milli(row.get('validation_energy_rmse'))} meV/atom F "
            f"{milli(row.get('validation_force_rmse'))} meV/Å"
        )

    def close(self) -> None:
        """End the bar (leaves the last line on the terminal)."""
        self.bar.close()


def milli(x: float | None) -> str:
    """``x`` × 1000 with two decimals (eV → meV); ``nan`` when missing or not finite."""
    return "nan" if x is None or not math.isfinite(x) else f"{1e3 * x:.2f}"


def store_summary(result: Any, verb: str, done_now: int) -> dict[str, Any]:
    """What an ingest or featurize ``result``'s store holds and what the run did (``verb``:
    what it did to ``done_now`` partitions, ``written`` or ``computed``): ``--json``'s
    object."""
    store = result.store
    return {
        "store": str(store.target),
        "n_structures": store.n_structures,
        "n_atoms": store.n_atoms,
        "n_partitions": store.n_partitions,
        f"partitions_{verb}": done_now,
        "partitions_already_done": result.partitions_already_done,
        "n_skipped": len(store.skipped()),
        "seconds": result.seconds,
    }


def store_line(result: Any, verb: str, done_now: int, as_json: bool = False) -> str:
    """:func:`store_summary` as one line of text, or as JSON (``as_json``)."""
    s = store_summary(result, verb, done_now)
    if as_json:
        from dparallel._files import strict_json

        return strict_json(s, indent=1)
    return (
        f"{s['store']}: {s['n_structures']} structures, {s['n_atoms']} atoms, "
        f"{s['n_partitions']} partitions ({done_now} {verb}, {s['partitions_already_done']} "
        f"already done), {s['n_skipped']} skipped, {s['seconds']:.2f} s"
    )


def refuse_all_skipped(result: Any, source: str) -> None:
    """An :class:`InputError` when an ingest or featurize ``result``'s store holds no
    structure because every one of ``source`` was skipped (the store is kept: its skip
    records say why)."""
    store = result.store
    if store.n_structures == 0 and store.skipped():
        from dparallel.errors import InputError

        raise InputError(
            f"every structure of {source} was skipped ({len(store.skipped())}): "
            f"{store.target} holds none; `dparallel info {store.target}` says why"
        )


def error_line(split: str, m: dict[str, Any]) -> str:
    """One split's final errors (``m`` in eV/atom, eV/Å) in meV, as run and train print them."""
    return (
        f"{split}: energy RMSE {milli(m.get('energy_rmse'))} meV/atom "
        f"(MAE {milli(m.get('energy_mae'))}), force RMSE {milli(m.get('force_rmse'))} "
        f"meV/Å (MAE {milli(m.get('force_mae'))})"
    )


def _q(path: str | os.PathLike[str]) -> str:
    return shlex.quote(str(path))


def train_options(descriptors: DescriptorSet) -> list[str]:
    """What ``dparallel train`` needs besides its defaults on a store of ``descriptors``:
    a type the store holds, and dG/dr computed per mini-batch where it has none (the
    default trains forces)."""
    from dparallel.descriptors.registry import DEFAULT_DESCRIPTOR

    options = []
    if DEFAULT_DESCRIPTOR not in descriptors.by_name:
        options += ["--set", f"descriptor={next(iter(descriptors.by_name))}"]
    if not descriptors.derivatives:
        options += ["--descriptor-source", "computed"]
    return options


def _has_test_split(model: str | os.PathLike[str]) -> bool:
    """Whether the model directory's ``metrics.json`` names test structures."""
    from dparallel.errors import TrainingError
    from dparallel.train.reporting import split_ids

    try:
        return bool(split_ids(model, "test")[0])
    except TrainingError:
        return False


def closing_lines(
    seconds: float,
    *,
    store: str | os.PathLike[str] | None = None,
    model: str | os.PathLike[str] | None = None,
    data: str | os.PathLike[str] | None = None,
    exported: bool = False,
    train_options: Sequence[str] = (),
) -> list[str]:
    """The closing lines of ``run``, ``featurize`` and ``train``: ``done in …`` and the
    commands a user would run next, one per line (``train_options``: what training the
    ``store`` needs besides the defaults; the n2p2 export only for a ``model`` it takes)."""
    lines = [f"done in {seconds:.1f} s; next:"]
    if model is None and store is not None:
        lines.append(f"  dparallel info {_q(store)}")
        options = "".join(f" {_q(o)}" for o in train_options)
        lines.append(f"  dparallel train {_q(store)} -o model/{options} --set epochs=100")
        return lines
    if model is not None:
        if not exported:
            lines.append(f"  dparallel export {_q(model)}")
        # a file that exists (the data trained from; its test structures, where the run
        # held some out: all of it mixes in the training set), else a placeholder
        test = " --split test" if data and _has_test_split(model) else ""
        lines.append(
            f"  dparallel evaluate {_q(model)} {_q(data) if data else 'STRUCTURES_FILE'}{test}"
        )
        from dparallel.n2p2.potential import export_problems  # here: it loads torch

        if not export_problems(model):
            lines.append(f"  dparallel export {_q(model)} --format n2p2 -o n2p2-potential/")
        lines.append(
            "  in Python (ASE): from dparallel.ase import Calculator; "
            f"atoms.calc = Calculator({str(model)!r})"
        )
    return lines
