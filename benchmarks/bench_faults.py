"""Reliability suite: what dparallel does with kills, full disks, rivals and bad files.

Run: ``PYTHONPATH=. python benchmarks/bench_faults.py [--only GROUP ...] [--list]``.
Every probe builds its own files in a temporary directory, provokes one fault and
compares what happened with what must happen; the table lists probe / expected /
observed, and the exit code is 1 when any probe did not hold. Groups: ``store`` (kills,
full disk, concurrent writers, ``--overwrite`` safety), ``input`` (every bad-input
class), ``model`` (weights and scaling files, malicious pickles and YAML tags), ``units``,
``rerun`` and ``cli`` (one-line errors, a closed pipe, warnings), and from
benchmarks/faults_safety.py ``write`` (the one write path: links, full disks, batched
syncs), ``log``, ``own`` (model and export folders), ``ident`` (store and input
identity), ``numbers`` (non-finite weights, predictions, JSON, hyperparameters) and
``config``. Nothing needs a cluster or trains a model.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import json
import os
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

import dparallel.workflow.ingest as ingest_module
from dparallel.errors import (
    ConfigError,
    DParallelError,
    InputFormatError,
    StoreBusyError,
    StoreMismatchError,
)
from dparallel.io import open_source
from dparallel.io.synthetic import random_structures
from dparallel.n2p2 import read_weights
from dparallel.n2p2.declared_units import potential_units
from dparallel.n2p2.scaling_data import read_scaling_data
from dparallel.workflow.ingest import IngestOptions, ingest
from dparallel.workflow.run_dirs import choose_model_dir

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[1]


def _beside(name: str):  # noqa: ANN202 - a module loaded from a file
    """The module ``name``.py beside this file (benchmarks/ is no package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


#: issue 29's probes, and the helpers both files use (benchmarks/faults_safety.py)
_SAFETY = _beside("faults_safety")
raises, run_cli = _SAFETY.raises, _SAFETY.run_cli
GOOD = '2\nProperties=species:S:1:pos:R:3 energy=-1.5 pbc="F F F"\nH 0 0 0\nH 0 0 0.74\n'


@dataclass
class Probe:
    """One fault: its group, name, what must happen and the function that tries it."""

    group: str
    name: str
    expected: str
    run: Callable[[Path], tuple[bool, str]]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _data(tmp: Path, n: int = 30) -> Path:
    import ase.io

    path = tmp / "in.extxyz"
    rng = np.random.default_rng(0)
    ase.io.write(path, random_structures(n, rng, max_atoms=8), format="extxyz")
    return path


# ---------------------------------------------------------------------------- store
def _kill_then_resume(tmp: Path) -> tuple[bool, str]:
    data = _data(tmp)
    clean = _snapshot(
        ingest(data, tmp / "clean.zarr", IngestOptions(partition_atoms=40)).store.path
    )
    real = ingest_module.ingest_partition

    def killed(source, store, p):  # noqa: ANN001, ANN202
        if p == 2:
            raise KeyboardInterrupt
        return real(source, store, p)

    ingest_module.ingest_partition = killed
    try:
        with contextlib.suppress(KeyboardInterrupt):
            ingest(data, tmp / "s.zarr", IngestOptions(partition_atoms=40))
    finally:
        ingest_module.ingest_partition = real
    result = ingest(data, tmp / "s.zarr", IngestOptions(partition_atoms=40))
    after = _snapshot(result.store.path)
    same = {k: v for k, v in after.items() if "zarr.json" not in k} == {
        k: v for k, v in clean.items() if "zarr.json" not in k
    }
    return same, f"resumed {result.partitions_written} partitions; arrays equal: {same}"


def _disk_full_in_overwrite(tmp: Path) -> tuple[bool, str]:
    data = _data(tmp)
    old = ingest(data, tmp / "s.zarr", IngestOptions(partition_atoms=40)).store
    before = _snapshot(old.path)
    real = ingest_module.ingest_partition

    def full(source, store, p):  # noqa: ANN001, ANN202
        if p == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(source, store, p)

    ingest_module.ingest_partition = full
    try:
        with contextlib.suppress(OSError):
            ingest(data, tmp / "s.zarr", IngestOptions(partition_atoms=50, overwrite=True))
    finally:
        ingest_module.ingest_partition = real
    kept = _snapshot(old.path) == before
    return kept, f"old store byte-identical: {kept}"


def _foreign_deep(tmp: Path) -> tuple[bool, str]:
    data = _data(tmp)
    ingest(data, tmp / "s.zarr", IngestOptions(partition_atoms=40))
    notes = tmp / "s.zarr" / "structures" / "NOTES.txt"
    notes.write_text("mine")
    ok, seen = raises(
        lambda: ingest(data, tmp / "s.zarr", IngestOptions(overwrite=True)),
        StoreMismatchError,
        "NOTES.txt",
    )
    return ok and notes.exists(), seen + ("; file kept" if notes.exists() else "; FILE GONE")


_KILLED_MID_WRITE = """
import os, signal, sys
from pathlib import Path
import numpy as np
from dparallel.store import open_store

real = os.replace

def replace(src, dst):
    if Path(dst).name == "zarr.json" and Path(dst).parent.name == "values":
        os.kill(os.getpid(), signal.SIGKILL)  # the chunk is written, the metadata not yet
    return real(src, dst)

os.replace = replace
block = {"values": np.ones((3, 4)), "atom_index": np.arange(3)}
open_store(sys.argv[1], mode="r+").write_features(1, {"acsf": {"H": block}})
"""


def _killed_partition_overwrite(tmp: Path) -> tuple[bool, str]:
    data = _data(tmp)
    store = ingest(data, tmp / "s.zarr", IngestOptions(partition_atoms=40)).store.path
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_MID_WRITE, str(store)],
        env=env, capture_output=True, timeout=300,
    )  # fmt: skip
    leftover = store / "parts/1/features/acsf/H/values"
    if killed.returncode != -9 or (leftover / "zarr.json").exists():
        return False, f"no half-written partition (rc {killed.returncode})"
    try:
        result = ingest(data, store, IngestOptions(partition_atoms=50, overwrite=True))
    except DParallelError as exc:
        return False, f"{type(exc).__name__}: {' '.join(str(exc).split())[:100]}"
    return result.store.is_complete, "chunk without zarr.json left by SIGKILL; replaced"


def _named_like_ours(tmp: Path) -> tuple[bool, str]:
    data = _data(tmp)
    ingest(data, tmp / "s.zarr", IngestOptions(partition_atoms=40))
    mine = tmp / "s.zarr" / "structures" / "c.0"  # a chunk key, but in a group
    mine.write_text("mine")
    ok, seen = raises(
        lambda: ingest(data, tmp / "s.zarr", IngestOptions(overwrite=True)),
        StoreMismatchError,
        "structures/c.0",
    )
    return ok and mine.exists(), seen + ("; file kept" if mine.exists() else "; FILE GONE")


def _rival_writer(tmp: Path) -> tuple[bool, str]:
    data = _data(tmp)
    code = (
        "import sys,time; from dparallel.store import StoreLease\n"
        f"with StoreLease({str(tmp / 's.zarr')!r}, command='rival'):\n"
        "    print('held', flush=True); time.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rival = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert rival.stdout is not None
        rival.stdout.readline()
        return raises(lambda: ingest(data, tmp / "s.zarr"), StoreBusyError, "rival")
    finally:
        rival.kill()
        rival.wait()


def _root_output(tmp: Path) -> tuple[bool, str]:
    code, err = run_cli(["ingest", str(_data(tmp)), "-o", "/", "--overwrite", "-q"])
    return code == 2 and len(err.splitlines()) == 1 and "filesystem root" in err, err


def _home_output(tmp: Path) -> tuple[bool, str]:
    code, err = run_cli(["ingest", str(_data(tmp)), "-o", "~", "--overwrite", "-q"])
    return code == 2 and len(err.splitlines()) == 1 and "home directory" in err, err


# ---------------------------------------------------------------------------- input
def _bad_input(frame: str, cls: type[BaseException], must: str, skip: bool = False):  # noqa: ANN202
    def probe(tmp: Path) -> tuple[bool, str]:
        path = tmp / "in.extxyz"
        path.write_text(GOOD + frame + GOOD)
        if skip:
            result = open_source(path, on_error="skip").read_checked()
            ok = result.indices.tolist() == [0, 2] and must in result.skipped[0][1]
            return ok, f"kept {result.indices.tolist()}, skipped: {result.skipped[0][1][:90]}"
        return raises(lambda: open_source(path).read(), cls, must)

    return probe


def _frame(*atoms: str, head: str = 'pbc="F F F"', n: int | None = None) -> str:
    count = len(atoms) if n is None else n
    return f"{count}\nProperties=species:S:1:pos:R:3:forces:R:3 energy=-1 {head}\n" + "".join(
        a + "\n" for a in atoms
    )


def _n2p2_unclosed(tmp: Path) -> tuple[bool, str]:
    path = tmp / "input.data"
    path.write_text("begin\natom 0 0 0 H 0 0 0 0 0\nenergy 1\n")
    return raises(lambda: open_source(path, "n2p2").read(), InputFormatError, "line")


def _latin1_comment(tmp: Path) -> tuple[bool, str]:
    import logging

    path = tmp / "input.data"
    path.write_bytes(b"begin\ncomment caf\xe9\natom 0 0 0 H 0 0 0 0 0\nenergy -1\nend\n")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("dparallel.io").addHandler(handler)
    try:
        n = open_source(path, "n2p2").read().n_structures
    finally:
        logging.getLogger("dparallel.io").removeHandler(handler)
    text = seen[0] if seen else "no warning"
    return n == 1 and "line 2: not UTF-8" in text, f"{n} read; {text[-80:]}"


def _empty_file(tmp: Path) -> tuple[bool, str]:
    (tmp / "in.extxyz").write_text("")
    return raises(lambda: open_source(tmp / "in.extxyz").read(), DParallelError, "")


# ---------------------------------------------------------------------------- model
def _weights(text: bytes, must: str):  # noqa: ANN202
    def probe(tmp: Path) -> tuple[bool, str]:
        (tmp / "weights.001.data").write_bytes(text)
        return raises(
            lambda: read_weights(tmp / "weights.001.data", [1, 1, 1]), InputFormatError, must
        )

    return probe


def _scaling_nan(tmp: Path) -> tuple[bool, str]:
    (tmp / "scaling.data").write_text("1 1 0.1 0.9 0.5 nan\n")
    return raises(
        lambda: read_scaling_data(tmp / "scaling.data", {"H": 1}), InputFormatError, "line 1"
    )


class _Payload:
    def __reduce__(self):  # noqa: ANN204
        return (os.system, ("touch PWNED",))


def _malicious_pickle(tmp: Path) -> tuple[bool, str]:
    import torch

    from dparallel.nn.files import load_torch_file

    torch.save({"model": _Payload()}, tmp / "model.pt")  # a real torch file, with a payload
    os.chdir(tmp)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ok, seen = raises(lambda: load_torch_file(tmp / "model.pt"), DParallelError, "system")
    ran = (tmp / "PWNED").exists()
    return ok and not ran, seen + ("; payload RAN" if ran else "; payload not run")


def _yaml_tag(tmp: Path) -> tuple[bool, str]:
    from dparallel.workflow.spec import load_workflow

    (tmp / "w.yaml").write_text("name: !!python/object/apply:os.system ['touch PWNED']\n")
    os.chdir(tmp)
    ok, seen = raises(lambda: load_workflow(tmp / "w.yaml"), ConfigError, "")
    return ok and not (tmp / "PWNED").exists(), seen


# ---------------------------------------------------------------------------- units
def _declared_units(tmp: Path) -> tuple[bool, str]:
    (tmp / "input.nn").write_text("# Units: angstrom-ev (lengths × 1 Å)\nnumber_of_elements 1\n")
    default = potential_units(tmp, None, "bohr-hartree")
    ok, seen = raises(
        lambda: potential_units(tmp, "bohr-hartree", "ase"), ConfigError, "declares units"
    )
    return ok and default == "angstrom-ev", f"default {default}; given bohr-hartree: {seen}"


def _data_units(tmp: Path) -> tuple[bool, str]:
    from dparallel.cli.evaluate import _data_units as data_units
    from dparallel.train.data_units import DATA_UNITS_JSON

    (tmp / "model").mkdir()
    (tmp / "model" / DATA_UNITS_JSON).write_text(json.dumps({"data_units": "bohr-hartree"}))
    chosen = data_units(str(tmp / "model"), str(tmp / "data.xyz"), None, None)
    return chosen == "bohr-hartree", f"DATA read as {chosen}"


# ---------------------------------------------------------------------------- rerun
def _rerun_keeps_model(tmp: Path) -> tuple[bool, str]:
    model = tmp / "model"
    model.mkdir()
    (model / "model.pt").write_bytes(b"300 epochs")
    (model / "metrics.json").write_text(json.dumps({"final": {}}))
    (model / "spec.json").write_text(json.dumps({"epochs": 300}))
    target = choose_model_dir(model, {"epochs": 50}, {}, refeaturized=False)
    kept = (model / "model.pt").read_bytes() == b"300 epochs" and target.path != model
    return kept, target.reason[:110]


# ---------------------------------------------------------------------------- cli
def _closed_pipe(tmp: Path) -> tuple[bool, str]:
    read, write = os.pipe()
    os.close(read)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dparallel", "schema"],
            stdout=write, stderr=subprocess.PIPE, text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    return done.stderr == "", f"rc {done.returncode}, stderr {done.stderr.strip()[:80]!r}"


def _warning_line(tmp: Path) -> tuple[bool, str]:
    from dparallel.cli.main import warning_lines

    err = io.StringIO()
    with warnings.catch_warnings(), contextlib.redirect_stderr(err):
        warnings.simplefilter("always")
        undo = warning_lines("featurize")
        try:
            warnings.warn("port 8787 is busy", stacklevel=1)
        finally:
            undo()
    text = err.getvalue().strip()
    return text == "dparallel featurize: warning: port 8787 is busy", text


def _quiet_dashboard(tmp: Path) -> tuple[bool, str]:
    from types import SimpleNamespace

    from dparallel.cli._options import on_connect

    args = argparse.Namespace(quiet=True, verbose=0, log_file=None)
    handle = SimpleNamespace(dashboard_link="http://127.0.0.1:8787/status", source="remote")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
        on_connect(args)(handle)
    return err.getvalue() == "", repr(err.getvalue()[:80]) if err.getvalue() else "nothing"


def _missing_store(tmp: Path) -> tuple[bool, str]:
    code, err = run_cli(["info", str(tmp / "nothing.zarr")])
    return code == 2 and len(err.splitlines()) == 1, err


PROBES = [
    Probe("store", "kill mid-ingest, rerun", "resumes; arrays as a clean run", _kill_then_resume),
    Probe("store", "disk full in --overwrite", "old store untouched", _disk_full_in_overwrite),
    Probe("store", "user file deep in store", "refused, named, kept", _foreign_deep),
    Probe("store", "half-written partition (kill)", "--overwrite replaces the store",
          _killed_partition_overwrite),
    Probe("store", "user file named like a chunk", "refused, named, kept", _named_like_ours),
    Probe("store", "concurrent writer", "StoreBusyError naming it", _rival_writer),
    Probe("store", "-o /", "one line, rc 2", _root_output),
    Probe("store", "-o ~", "one line, rc 2", _home_output),
    Probe("input", "truncated frame", "InputFormatError, line",
          _bad_input("3\nProperties=species:S:1:pos:R:3\nH 0 0 0\n", InputFormatError, "line")),
    Probe("input", "wrong column count", "InputFormatError, line",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 0"), InputFormatError, "column")),
    Probe("input", "non-numeric field", "InputFormatError, line",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 x 1 0 0 0"), InputFormatError, "'x'")),
    Probe("input", "unknown element", "InputFormatError, line",
          _bad_input(_frame("H 0 0 0 0 0 0", "Xq 0 0 1 0 0 0"), InputFormatError, "Xq")),
    Probe("input", "NaN coordinate", "InvalidStructureError",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 nan 1 0 0 0"), InputFormatError, "non-finite")),
    Probe("input", "1e30 coordinate (raise)", "InvalidStructureError",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 0 1e30 0 0 0"), InputFormatError,
                     "implausible")),
    Probe("input", "1e30 coordinate (skip)", "skipped and recorded",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 0 1e30 0 0 0"), InputFormatError,
                     "implausible", skip=True)),
    Probe("input", "inf energy", "InvalidStructureError",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 0 1 0 0 0").replace("-1", "inf", 1),
                     InputFormatError, "infinite")),
    Probe("input", "NaN force of one atom", "InvalidStructureError",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 0 1 nan 0 0"), InputFormatError, "forces")),
    Probe("input", "singular periodic cell", "InvalidStructureError",
          _bad_input(_frame("H 0 0 0 0 0 0", "H 0 0 1 0 0 0",
                            head='Lattice="1 0 0 1 0 0 0 0 1" pbc="T T T"'),
                     InputFormatError, "singular")),
    Probe("input", "n2p2 begin without end", "InputFormatError, line", _n2p2_unclosed),
    Probe("input", "empty file", "a dparallel error", _empty_file),
    Probe("input", "non-UTF-8 comment line", "read, warning names the line", _latin1_comment),
    Probe("model", "NaN weight", "InputFormatError, line",
          _weights(b"0.1\nnan\n0.3\n0.4\n", "line 2: not a finite number")),
    Probe("model", "inf weight", "InputFormatError, line",
          _weights(b"0.1\n0.2\ninf\n0.4\n", "line 3: not a finite number")),
    Probe("model", "binary weights file", "named binary",
          _weights(b"0.1\n" + np.arange(3.0).tobytes(), "a binary file")),
    Probe("model", "non-UTF-8 comment", "named, with its line",
          _weights(b"# caf\xe9\n0.1\n0.2\n0.3\n0.4\n", "line 1: not UTF-8")),
    Probe("model", "wrong weight count", "InputFormatError",
          _weights(b"0.1\n0.2\n", "2 connections")),
    Probe("model", "NaN in scaling.data", "InputFormatError, line", _scaling_nan),
    Probe("model", "malicious pickle", "refused, payload not run", _malicious_pickle),
    Probe("model", "YAML python tag", "ConfigError, nothing run", _yaml_tag),
    Probe("units", "potential's declared units", "used; contradiction refused",
          _declared_units),
    Probe("units", "model's data units", "evaluate reads DATA in them", _data_units),
    Probe("rerun", "changed training spec", "finished model kept, new dir",
          _rerun_keeps_model),
    Probe("cli", "closed stdout pipe", "nothing on stderr", _closed_pipe),
    Probe("cli", "Python warning", "one clean line", _warning_line),
    Probe("cli", "dashboard link under -q", "nothing printed", _quiet_dashboard),
    Probe("cli", "missing store", "one line, rc 2", _missing_store),
]  # fmt: skip


def _safety_probes() -> list[Probe]:
    """The probes of benchmarks/faults_safety.py (write path, logs, ownership, identity,
    numbers, configuration, command line)."""
    return [Probe(*row) for row in _SAFETY.SAFETY_PROBES]


PROBES += _safety_probes()


def run_probes(groups: set[str] | None = None) -> list[tuple[Probe, bool, str]]:
    """Run every probe (of ``groups``), each in a fresh temporary directory."""
    out = []
    here = Path.cwd()
    for probe in PROBES:
        if groups and probe.group not in groups:
            continue
        with tempfile.TemporaryDirectory(prefix="dparallel-faults-") as tmp:
            os.chdir(tmp)
            try:
                ok, seen = probe.run(Path(tmp))
            except Exception as exc:  # noqa: BLE001 - a probe that breaks is a failure
                ok, seen = False, f"probe raised {type(exc).__name__}: {exc}"[:120]
            finally:
                os.chdir(here)
        out.append((probe, ok, seen))
    return out


def _table(rows: list[tuple[Probe, bool, str]]) -> str:
    lines = [f"{'':2s} {'group':6s} {'probe':30s} {'expected':34s} observed"]
    for probe, ok, seen in rows:
        mark = "ok" if ok else "!!"
        lines.append(f"{mark:2s} {probe.group:6s} {probe.name:30s} {probe.expected:34s} {seen}")
    held = sum(ok for _, ok, _ in rows)
    lines.append(f"{held} of {len(rows)} probes held")
    return "\n".join(lines)


def main_cli(argv: list[str] | None = None) -> int:
    """Print the table; exit code 1 when a probe did not hold."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="groups to run")
    parser.add_argument("--list", action="store_true", help="list the probes and exit")
    args = parser.parse_args(argv)
    if args.list:
        for probe in PROBES:
            print(f"{probe.group:6s} {probe.name:30s} {probe.expected}")
        return 0
    rows = run_probes(set(args.only) if args.only else None)
    print(_table(rows))
    return 0 if all(ok for _, ok, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main_cli())
