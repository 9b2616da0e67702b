"""Probes of bench_faults.py for issue 29's classes: the write path, logs, ownership,
identity, non-finite numbers, configuration and the command line.

Each probe builds its own files in the temporary directory it is given and returns
``(held, observed)``; :data:`SAFETY_PROBES` lists ``(group, name, expected, function)``.
Nothing trains a model or starts a cluster: each runs in well under a second or two.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel import _files
from dparallel.errors import (
    DescriptorError,
    DiskFullError,
    InputError,
    NonFiniteError,
    StoreBusyError,
    TrainingError,
    UnsafePathError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[1]
Result = tuple[bool, str]


def raises(fn: Callable[[], object], cls: type[BaseException], must: str) -> Result:
    """Run ``fn``; holds when it raises ``cls`` whose message contains ``must``."""
    try:
        fn()
    except cls as exc:
        text = " ".join(str(exc).split())
        return must in text, f"{type(exc).__name__}: {text[:110]}"
    except Exception as exc:  # noqa: BLE001 - reported as the observation
        return False, f"{type(exc).__name__}: {' '.join(str(exc).split())[:110]}"
    return False, "no error"


def run_cli(argv: list[str]) -> tuple[int, str]:
    """``dparallel argv`` in this process: its exit code and what it wrote to stderr."""
    from dparallel.cli.main import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own errors (a usage line, then the error)
            code = int(exc.code or 0)
    return code, err.getvalue().strip()


def _usage_error(argv: list[str], must: str) -> Result:
    """argparse's refusal: its usage, then one error line; no validation dump, no traceback."""
    code, err = run_cli(argv)
    lines = err.splitlines()
    ok = code == 2 and lines and must in lines[-1] and "Traceback" not in err
    return bool(ok) and "validation error" not in err, lines[-1][:160] if lines else ""


def _one_line(argv: list[str], must: str) -> Result:
    code, err = run_cli(argv)
    return code == 2 and len(err.splitlines()) == 1 and must in err, err[:160]


def _data(tmp: Path, n: int = 12, name: str = "in.extxyz") -> Path:
    import ase.io

    from dparallel.io.synthetic import random_structures

    path = tmp / name
    ase.io.write(path, random_structures(n, np.random.default_rng(0), max_atoms=6), "extxyz")
    return path


def _store(tmp: Path) -> Any:
    from dparallel.store import open_store
    from dparallel.workflow.ingest import IngestOptions, ingest

    return open_store(
        ingest(_data(tmp), tmp / "s.zarr", IngestOptions(partition_atoms=30)).store.path, "r+"
    )


def _user(tmp: Path, name: str = "user.txt") -> Path:
    path = tmp / name
    path.write_text("the user's own")
    return path


def _kept(*paths: Path) -> bool:
    return all(p.read_text() == "the user's own" for p in paths)


def _no_partial(folder: Path) -> bool:
    return not any("partial" in p.name for p in folder.rglob("*"))


@contextlib.contextmanager
def _full_disk(code: int = errno.ENOSPC):  # noqa: ANN202
    real = os.write

    def full(fd: int, data: Any) -> int:
        if len(data) > 8:
            raise OSError(code, os.strerror(code))
        return real(fd, data)

    os.write = full  # type: ignore[assignment]
    try:
        yield
    finally:
        os.write = real  # type: ignore[assignment]


# ------------------------------------------------------------------------ write path
def _through_symlink(tmp: Path) -> Result:
    user = _user(tmp)
    (tmp / "model.pt").symlink_to(user)
    _files.write_file(tmp / "model.pt", b"ours")
    ok = _kept(user) and not (tmp / "model.pt").is_symlink()
    return ok, "link replaced, user's file kept" if ok else "user's file changed"


def _through_hardlink(tmp: Path) -> Result:
    user = _user(tmp)
    os.link(user, tmp / "scaling.data")
    _files.write_file(tmp / "scaling.data", "ours")
    return _kept(user), f"user's file links: {os.stat(user).st_nlink}"


def _linked_folder(tmp: Path) -> Result:
    (tmp / "root").mkdir()
    (tmp / "theirs").mkdir()
    (tmp / "root" / "sub").symlink_to(tmp / "theirs")
    held, seen = raises(
        lambda: _files.write_file(tmp / "root" / "sub" / "x", "y", root=tmp / "root"),
        UnsafePathError,
        "symbolic link",
    )
    return held and not list((tmp / "theirs").iterdir()), seen


def _disk_full(code: int, must: str) -> Callable[[Path], Result]:
    def probe(tmp: Path) -> Result:
        with _full_disk(code):
            held, seen = raises(
                lambda: _files.write_file(tmp / "checkpoint.pt", b"x" * 4096, durable=True),
                DiskFullError,
                must,
            )
        return held and not list(tmp.iterdir()), seen

    return probe


def _full_json_keeps_old(tmp: Path) -> Result:
    from dparallel.train.reporting import write_metrics

    (tmp / "metrics.json").write_text("old\n")
    with _full_disk():
        held, seen = raises(
            lambda: write_metrics(tmp, [{"epoch": 0, "train_loss": 1.0}]),
            DiskFullError,
            "metrics.json",
        )
    return held and (tmp / "metrics.json").read_text() == "old\n" and _no_partial(tmp), seen


def _full_torch_save(tmp: Path) -> Result:
    """torch serializes into memory and dparallel's writer writes (torch's own C++ writer
    aborted the whole process on a full disk): the disk fills while a checkpoint and an
    exported program are written."""
    import torch

    from dparallel.nn import save_torch_file

    program = torch.export.export(torch.nn.Linear(2, 2), (torch.zeros(1, 2),))
    with _full_disk():
        held, seen = raises(
            lambda: save_torch_file({"w": torch.zeros(1000)}, tmp / "best.pt"),
            DiskFullError,
            "best.pt",
        )
        again, _ = raises(
            lambda: _files.write_serialized(
                tmp / "net.pt2", lambda f: torch.export.save(program, f)
            ),
            DiskFullError,
            "net.pt2",
        )
    return held and again and not list(tmp.iterdir()), seen


def _torch_file_on_link(tmp: Path) -> Result:
    import torch

    from dparallel.nn import load_torch_file, save_torch_file

    user = _user(tmp)
    (tmp / "checkpoint.pt").symlink_to(user)
    save_torch_file({"w": torch.ones(2)}, tmp / "checkpoint.pt")
    ok = _kept(user) and bool(load_torch_file(tmp / "checkpoint.pt")["w"].sum() == 2)
    return ok, "link replaced, file readable" if ok else "wrote through the link"


def _weights_on_link(tmp: Path) -> Result:
    from dparallel.n2p2.weights import write_weights

    user = _user(tmp)
    (tmp / "weights.001.data").symlink_to(user)
    write_weights(tmp / "weights.001.data", [(np.ones((2, 2)), np.zeros(2))])
    return _kept(user), "user's file kept" if _kept(user) else "overwritten"


def _metrics_on_link(tmp: Path) -> Result:
    from dparallel.train.reporting import write_metrics

    user = _user(tmp)
    (tmp / "metrics.json").symlink_to(user)
    write_metrics(tmp, [{"epoch": 0, "train_loss": 1.0, "validation_loss": float("nan")}])
    doc = json.loads((tmp / "metrics.json").read_text())
    ok = _kept(user) and doc["epochs"][0]["validation_loss"] is None
    return ok, "kept; NaN (not measured) written as null" if ok else str(doc)[:100]


def _chunk_hardlink(tmp: Path) -> Result:
    s = _store(tmp)
    batch = s.read_structures(*s.partition_range(0))
    chunk = s.path / "structures" / "positions" / "c.0.0"
    chunk.unlink()
    os.link(_user(tmp), chunk)
    s.write_structures(0, batch)
    return _kept(tmp / "user.txt"), f"user's file links: {os.stat(tmp / 'user.txt').st_nlink}"


def _linked_partition(what: str) -> Callable[[Path], Result]:
    def probe(tmp: Path) -> Result:
        import shutil

        s = _store(tmp)
        theirs = tmp / "theirs"
        theirs.mkdir()
        _user(theirs, "thesis.tex")
        part = s.path / "parts" / "0"
        if part.exists():
            shutil.rmtree(part)
        part.symlink_to(theirs)
        block = {"values": np.ones((2, 3)), "atom_index": np.arange(2)}
        act = {
            "features": lambda: s.write_features(0, {"acsf": {"H": block}}),
            "arrays": lambda: s.write_partition_arrays(0, {"x": np.ones(3)}, group="extra"),
            "done": lambda: s.mark_done(0),
        }[what]
        held, seen = raises(act, UnsafePathError, "symbolic link")
        return held and [p.name for p in theirs.iterdir()] == ["thesis.tex"], seen

    return probe


def _partial_is_ours(tmp: Path) -> Result:
    from dparallel.store._own_files import foreign_files

    s = _store(tmp)
    doc = s.path / "structures" / "numbers" / "zarr.json"
    _files.temporary_name(doc).write_bytes(b"{")  # what a kill mid-write leaves
    found = foreign_files(s.path)
    return found == [], f"foreign: {found}"


def _marker_after_sync(tmp: Path) -> Result:
    s = _store(tmp)
    batch = s.read_structures(*s.partition_range(1))
    s.clear_done(1)
    order: list[str] = []
    real_sync, real_fsync, real_replace = _files._syncfs, _files._fsync_path, os.replace
    _files._syncfs = lambda f: order.append("sync") or real_sync(f)  # type: ignore[assignment]
    _files._fsync_path = lambda f: order.append("sync") or real_fsync(f)  # type: ignore[assignment]

    def replace(src: Any, dst: Any) -> None:
        order.append("done" if "partitions/done" in str(dst) else "write")
        real_replace(src, dst)

    os.replace = replace  # type: ignore[assignment]
    try:
        s.write_structures(1, batch)
        s.mark_done(1)
    finally:
        _files._syncfs, _files._fsync_path, os.replace = real_sync, real_fsync, real_replace
    done = order.index("done")
    last = max(i for i, o in enumerate(order[:done]) if o == "write")
    return "sync" in order[last:done], " ".join(order[-4:])


def _no_other_writer(tmp: Path) -> Result:
    import importlib.util

    spec = importlib.util.spec_from_file_location("write_path", ROOT / "tests/test_write_path.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    bad = []
    for path in sorted((ROOT / "dparallel").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        allowed, _ = module.ALLOWED.get(rel, (frozenset(), ""))
        found = [w for w in module.writes_in(path.read_text(), rel) if allowed is not None
                 and w.split(": ", 1)[1] not in allowed]  # fmt: skip
        bad += [f"{rel}:{w}" for w in found]
    return not bad, "; ".join(bad)[:110] or "every write goes through dparallel._files"


# ------------------------------------------------------------------------------- logs
def _d_yaml(tmp: Path) -> Path:
    path = tmp / "d.yaml"
    path.write_text("acsf:\n  elements: [H]\n  r_cut: 4.0\n  radial: [[0.05, 0.0]]\n")
    return path


def _featurize(tmp: Path, *extra: str) -> list[str]:
    return ["featurize", str(_data(tmp)), "--descriptors", str(_d_yaml(tmp)), *extra]


def _log_is_input(tmp: Path) -> Result:
    before = _data(tmp).read_bytes()
    held, seen = _one_line(
        _featurize(tmp, "-o", "s.zarr", "--log-file", "in.extxyz", "--local", "1"), "file of yours"
    )
    return held and (tmp / "in.extxyz").read_bytes() == before and "details" not in seen, seen


def _log_is_link(tmp: Path) -> Result:
    (tmp / "run.log").symlink_to(_user(tmp))
    held, seen = _one_line(
        _featurize(tmp, "-o", "s.zarr", "--log-file", "run.log", "--local", "1"), "symbolic link"
    )
    return held and _kept(tmp / "user.txt"), seen


def _log_in_store(tmp: Path) -> Result:
    return _one_line(
        _featurize(tmp, "-o", "s.zarr", "--log-file", "s.zarr/x.log", "--local", "1"),
        "inside the store",
    )


def _log_appends_own(tmp: Path) -> Result:
    for line in ("one\n", "two\n"):
        with _files.open_log(tmp / "run.log") as fh:
            fh.write(line)
    text = (tmp / "run.log").read_text()
    return text == _files.LOG_MARKER + "one\ntwo\n", repr(text[-20:])


def _log_hardlinked(tmp: Path) -> Result:
    with _files.open_log(tmp / "run.log") as fh:
        fh.write("x\n")
    os.link(tmp / "run.log", tmp / "notes.txt")
    return raises(lambda: _files.open_log(tmp / "run.log"), UnsafePathError, "hard links")


# -------------------------------------------------------------------------- ownership
def _train_into(tmp: Path, model: Path) -> Callable[[], object]:
    from dparallel.train import TrainingSpec, train

    store = _store(tmp)
    return lambda: train(store, model, TrainingSpec(epochs=1, hidden=(2,)))


def _users_folder(tmp: Path) -> Result:
    here = tmp / "here"
    here.mkdir()
    _user(here, "metrics.csv")
    held, seen = raises(_train_into(tmp, here), UnsafePathError, "metrics.csv")
    return held and _kept(here / "metrics.csv") and len(list(here.iterdir())) == 1, seen


def _model_in_store(tmp: Path) -> Result:
    return raises(_train_into(tmp, tmp / "s.zarr" / "m"), UnsafePathError, "lies inside")


def _model_is_store(tmp: Path) -> Result:
    return raises(_train_into(tmp, tmp / "s.zarr"), UnsafePathError, "which this run reads")


def _model_is_file(tmp: Path) -> Result:
    _user(tmp, "m")
    held, seen = raises(_train_into(tmp, tmp / "m"), UnsafePathError, "is a file")
    return held and _kept(tmp / "m"), seen


def _claim(tmp: Path, model: Path, resume: bool = False) -> None:
    from dparallel.train.model_dir import claim_model_dir

    with claim_model_dir(model, _store(tmp), resume=resume):
        pass


def _retrain_clears(tmp: Path) -> Result:
    model = tmp / "m"
    _claim(tmp, model)
    old = ["deployed.pt", "potential.pt2", "potential.ts", "atomic_energy_O.pt2", "export.json"]
    for name in old:
        (model / name).write_bytes(b"older model")
    (model / "n2p2").mkdir()
    (model / "n2p2" / "input.nn").write_text("old")
    (model / "notes.md").write_text("mine")
    _claim(tmp, model)
    left = sorted(p.name for p in model.iterdir())
    return left == [".dparallel-model.json", "notes.md"], f"left: {left}"


def _resume_keeps(tmp: Path) -> Result:
    model = tmp / "m"
    _claim(tmp, model)
    (model / "checkpoint.pt").write_bytes(b"ck")
    _claim(tmp, model, resume=True)
    return (model / "checkpoint.pt").exists(), "checkpoint kept on --resume"


def _early_failure_no_folder(tmp: Path) -> Result:
    from dparallel.train.model_dir import claim_model_dir

    store, model = _store(tmp), tmp / "new"
    with contextlib.suppress(TrainingError), claim_model_dir(model, store):
        raise TrainingError("device cuda: no CUDA here")
    gone = not model.exists() and not (tmp / "new.lock").exists()
    return gone, "no folder, no lock left" if gone else str(list(tmp.iterdir()))


def _legacy_adopted(tmp: Path) -> Result:
    model = tmp / "m"
    model.mkdir()
    for name in ("spec.json", "model.pt", "metrics.csv", "learning_curves.png"):
        (model / name).write_bytes(b"x")
    _claim(tmp, model, resume=True)
    return (model / ".dparallel-model.json").exists(), "marker added, files kept"


def _legacy_with_user_file(tmp: Path) -> Result:
    model = tmp / "m"
    model.mkdir()
    for name in ("spec.json", "model.pt"):
        (model / name).write_bytes(b"x")
    _user(model, "notes.txt")
    return raises(lambda: _claim(tmp, model), UnsafePathError, "notes.txt")


def _lease_rival(tmp: Path) -> Result:
    model = tmp / "m"
    code = (
        "import sys,time; from dparallel.store import StoreLease\n"
        f"with StoreLease({str(model)!r}, command='the first train'):\n"
        "    print('held', flush=True); time.sleep(30)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    rival = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
    try:
        assert rival.stdout is not None
        rival.stdout.readline()  # a condition: the lease is held
        return raises(lambda: _claim(tmp, model), StoreBusyError, "the first train")
    finally:
        rival.kill()
        rival.wait()


def _n2p2_users_folder(tmp: Path) -> Result:
    from dparallel.n2p2.potential import _MARKER, _earlier_export

    out = tmp / "out"
    out.mkdir()
    _user(out, "input.nn")
    _user(out, "README")
    held, seen = raises(
        lambda: _files.claim_directory(out, _MARKER, "n2p2 export", adopt=_earlier_export),
        UnsafePathError,
        "README",
    )
    return held and _kept(out / "input.nn"), seen


def _n2p2_into_model_dir(tmp: Path) -> Result:
    from dparallel.n2p2.potential import _MARKER

    model = tmp / "m"
    model.mkdir()
    (model / "model.pt").write_bytes(b"x")
    return raises(
        lambda: _files.claim_directory(model, _MARKER, "n2p2", protect=[model / "model.pt"]),
        UnsafePathError,
        "it holds",
    )


# --------------------------------------------------------------------------- identity
def _identity_changes(tmp: Path) -> Result:
    from dparallel.store import current_identity, store_identity
    from dparallel.workflow.ingest import IngestOptions, ingest

    s = _store(tmp)
    then = store_identity(s)
    ingest(_data(tmp, 14), tmp / "s.zarr", IngestOptions(partition_atoms=30, overwrite=True))
    now = current_identity(s)
    ok = now is not None and now["identity"] != then["identity"]
    return ok, f"{then['identity'][:8]} → {(now or {}).get('identity', '')[:8]}"


def _identity_kept(tmp: Path) -> Result:
    from dparallel.store import current_identity, open_store, store_identity

    s = _store(tmp)
    same = store_identity(open_store(s.path)) == current_identity(s) == store_identity(s)
    return same, "reopened: same identity" if same else "differs"


def _resume_changed_store(tmp: Path) -> Result:
    from dparallel.store import open_store
    from dparallel.train.model_dir import claim_model_dir
    from dparallel.workflow.ingest import IngestOptions, ingest

    model = tmp / "m"
    _claim(tmp, model)
    ingest(_data(tmp, 14), tmp / "s.zarr", IngestOptions(partition_atoms=30, overwrite=True))

    def resume() -> None:
        with claim_model_dir(model, open_store(tmp / "s.zarr"), resume=True):
            pass

    return raises(resume, TrainingError, "another store")


def _epoch_check(tmp: Path) -> Result:
    from dparallel.train.model_dir import check_store_unchanged, claim_model_dir
    from dparallel.workflow.ingest import IngestOptions, ingest

    store, model = _store(tmp), tmp / "m"
    with claim_model_dir(model, store):
        check_store_unchanged(store, model)  # unchanged: passes
        ingest(_data(tmp, 14), tmp / "s.zarr", IngestOptions(partition_atoms=30, overwrite=True))
        return raises(lambda: check_store_unchanged(store, model), TrainingError, "changed")


def _input_edited(how: str) -> Callable[[Path], Result]:
    def probe(tmp: Path) -> Result:
        from dparallel.io import open_source

        path = _data(tmp)
        source = open_source(path, cache_index=False)
        len(source)
        if how == "pickled":
            source = pickle.loads(pickle.dumps(source))
            os.utime(path, ns=(7, 7))
            return raises(lambda: source.read(0, 2), InputError, "changed since it was opened")
        if how == "appended":
            with open(path, "a") as fh:  # the user's edit, mid-run
                fh.write(path.read_text().splitlines()[0] + "\n")
        else:
            os.utime(path, ns=(7, 7))
        return raises(lambda: source.read(0, 2), InputError, "changed while it was being read")

    return probe


# ---------------------------------------------------------------------------- numbers
def _nan_tensor(where: str) -> Callable[[Path], Result]:
    def probe(tmp: Path) -> Result:
        import torch

        from dparallel.nn import load_torch_file

        w = torch.ones(3, 2)
        w[1, 0] = float("nan") if where == "weight" else float("inf")
        doc = {"model": {"nets.H.0.weight": w}} if where == "weight" else {"optimizer": [w]}
        torch.save(doc, tmp / "x.pt")
        key = "nets.H.0.weight" if where == "weight" else "optimizer.0 at index (1, 0)"
        return raises(lambda: load_torch_file(tmp / "x.pt"), NonFiniteError, key)

    return probe


def _pt2_pickle(tmp: Path) -> Result:
    import torch

    from dparallel.nn import load_exported_program

    class Double(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    torch.export.save(torch.export.export(Double(), (torch.ones(3),)), tmp / "good.pt2")
    marker = tmp / "ran"
    payload = io.BytesIO()
    torch.save(((_Evil(str(marker)),), {}), payload)
    with zipfile.ZipFile(tmp / "good.pt2") as src, zipfile.ZipFile(tmp / "evil.pt2", "w") as out:
        for name in src.namelist():
            data = src.read(name)
            out.writestr(name, payload.getvalue() if "sample_inputs" in name else data)
    held, seen = raises(lambda: load_exported_program(tmp / "evil.pt2"), TrainingError, "GLOBAL")
    return held and not marker.exists(), seen


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple:
        return (Path.touch, (Path(self.path),))


def _json(obj: Any, must: str) -> Callable[[Path], Result]:
    return lambda tmp: raises(lambda: _files.strict_json(obj), NonFiniteError, must)


def _prediction(key: str, must: str) -> Callable[[Path], Result]:
    def probe(tmp: Path) -> Result:
        import ase

        from dparallel.deploy.finite import check_finite_predictions
        from dparallel.types import StructureBatch

        batch = StructureBatch.from_ase(
            [ase.Atoms("H2", positions=[[0, 0, 0], [0, 0, 0]]), ase.Atoms("O", positions=[[0] * 3])]
        )
        out = {"energy": np.zeros(2), "energies": np.zeros(3), "forces": np.zeros((3, 3))}
        out[key] = out[key].copy()
        out[key].reshape(-1)[1 if key != "energy" else 0] = np.nan
        return raises(lambda: check_finite_predictions(out, batch), NonFiniteError, must)

    return probe


def _spec(field: str, value: float) -> Callable[[Path], Result]:
    def probe(tmp: Path) -> Result:
        from pydantic import ValidationError

        from dparallel.train import TrainingSpec

        return raises(lambda: TrainingSpec(**{field: value}), ValidationError, "finite number")

    return probe


# ----------------------------------------------------------------------- configuration
def _acsf(must: str, **kwargs: Any) -> Callable[[Path], Result]:
    def probe(tmp: Path) -> Result:
        from dparallel.descriptors import ACSF

        args = {"r_cut": 6.0, **kwargs}
        return raises(lambda: ACSF.uniform(["H", "O"], **args), DescriptorError, must)

    return probe


def _zeta_below_one(tmp: Path) -> Result:
    from dparallel.descriptors import ACSF

    acsf = ACSF.uniform(["H"], 6.0, narrow=[(0.1, 0.5, -1.0, 0.0)])
    return len(acsf.features("H")) == 1, "ζ = 0.5 accepted, as n2p2 does"


def _spec_r_cut(tmp: Path) -> Result:
    _d_yaml(tmp).write_text("acsf:\n  elements: [H]\n  r_cut: 1.0e6\n  radial: [[0.05, 0.0]]\n")
    argv = ["featurize", str(_data(tmp)), "--descriptors", "d.yaml", "-o", "s.zarr", "--local", "1"]
    code, err = run_cli(argv)
    ok = code == 2 and "beyond 50" in err and not (tmp / "s.zarr").exists()
    return ok, err[:160]


# ------------------------------------------------------------------------------- cli
def _compressed(kind: str, name: str) -> Callable[[Path], Result]:
    """A compressed input dparallel cannot read as such (``name``): one line that says so."""

    def probe(tmp: Path) -> Result:
        import bz2
        import gzip

        raw = _data(tmp).read_bytes()
        pack = {"gz": gzip.compress, "bz2": bz2.compress}[kind]
        path = tmp / name
        path.write_bytes(pack(raw))
        return _one_line(["ingest", str(path), "-o", "s.zarr", "-q"], "compressed")

    return probe


def _compressed_read(tmp: Path) -> Result:
    """Files named ``….gz``, ``….bz2``, ``….xz`` are read as the text they hold: each store
    equals the plain file's."""
    import bz2
    import gzip
    import lzma

    from dparallel.store import open_store

    plain = _data(tmp)
    packed = []
    for suffix, pack in ((".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)):
        path = tmp / f"in.extxyz{suffix}"
        path.write_bytes(pack(plain.read_bytes()))
        packed.append(path)
    codes = [run_cli(["ingest", str(p), "-o", str(tmp / f"{p.name}.zarr"), "-q"])[0]
             for p in (plain, *packed)]  # fmt: skip
    if codes != [0] * (1 + len(packed)):
        return False, f"rc {codes}"
    a, *others = (open_store(tmp / f"{p.name}.zarr") for p in (plain, *packed))
    same = all((a.n_atoms, a.n_structures) == (b.n_atoms, b.n_structures) for b in others)
    return same, f"read; {a.n_atoms} atoms from each as from the plain file: {same}"


def _scheduler_lost(tmp: Path) -> Result:

    from dparallel.errors import ClusterError
    from dparallel.store import Store
    from dparallel.workflow.featurize_failures import raise_failures

    class _Lost(Store):  # a store of 10 partitions, 3 done, without opening one
        def __init__(self) -> None:
            pass

        def done_partitions(self) -> list[int]:
            return [0, 1, 2]

        n_partitions = 10  # type: ignore[assignment]
        root = None  # type: ignore[assignment]
        path = tmp / "s"  # type: ignore[assignment]

    store = _Lost()
    lost = RuntimeError("1 Future cancelled for reason: scheduler-connection-lost.")
    try:
        raise_failures(store, {p: lost for p in range(2, 10)})  # type: ignore[arg-type]
    except ClusterError as exc:
        text = str(exc)
        held = "3 of 10 partitions" in text and "7 were not computed" in text
        return held and "\n" not in text, f"ClusterError: {text[:100]}"
    return False, "no ClusterError"


SAFETY_PROBES: list[tuple[str, str, str, Callable[[Path], Result]]] = [
    ("write", "target is a symlink", "link replaced, target kept", _through_symlink),
    ("write", "target is a hard link", "replaced, user's file kept", _through_hardlink),
    ("write", "folder below root is a link", "UnsafePathError, nothing", _linked_folder),
    ("write", "disk full (ENOSPC)", "DiskFullError, path + bytes",
     _disk_full(errno.ENOSPC, "4,096 bytes")),
    ("write", "quota (EDQUOT)", "DiskFullError, over quota", _disk_full(errno.EDQUOT, "quota")),
    ("write", "disk full writing metrics", "old file kept, no .partial", _full_json_keeps_old),
    ("write", "disk full in torch.save", "DiskFullError, nothing left", _full_torch_save),
    ("write", "checkpoint path is a link", "replaced, target kept", _torch_file_on_link),
    ("write", "weights file is a link", "replaced, target kept", _weights_on_link),
    ("write", "metrics.json is a link", "replaced; NaN as null", _metrics_on_link),
    ("write", "store chunk hard-linked", "user's file kept", _chunk_hardlink),
    ("write", "partition folder linked", "features refused, kept", _linked_partition("features")),
    ("write", "linked partition, arrays", "refused, kept", _linked_partition("arrays")),
    ("write", "linked partition, marker", "refused, kept", _linked_partition("done")),
    ("write", "write cut short (.partial)", "store still ours", _partial_is_ours),
    ("write", "done marker after sync", "partition synced first", _marker_after_sync),
    ("write", "any other module writing", "none (AST scan)", _no_other_writer),
    ("log", "--log-file = the input", "one line, input kept", _log_is_input),
    ("log", "--log-file is a link", "one line, target kept", _log_is_link),
    ("log", "--log-file inside the store", "one line", _log_in_store),
    ("log", "our log appended to", "marker + both records", _log_appends_own),
    ("log", "our log hard-linked", "refused", _log_hardlinked),
    ("own", "train -o a user's folder", "refused, metrics.csv kept", _users_folder),
    ("own", "model dir inside the store", "refused", _model_in_store),
    ("own", "model dir = the store", "refused", _model_is_store),
    ("own", "model dir is a file", "refused, file kept", _model_is_file),
    ("own", "retrain into a model dir", "every old artifact gone", _retrain_clears),
    ("own", "--resume into a model dir", "checkpoint kept", _resume_keeps),
    ("own", "run fails before training", "no folder, no lock", _early_failure_no_folder),
    ("own", "model dir without marker", "adopted when only ours", _legacy_adopted),
    ("own", "unmarked dir + a user file", "refused, named", _legacy_with_user_file),
    ("own", "two runs, one model dir", "StoreBusyError naming it", _lease_rival),
    ("own", "n2p2 -o a user's folder", "refused, input.nn kept", _n2p2_users_folder),
    ("own", "n2p2 -o the model dir", "refused", _n2p2_into_model_dir),
    ("ident", "store made again", "new identity", _identity_changes),
    ("ident", "store reopened", "same identity", _identity_kept),
    ("ident", "--resume, store made again", "TrainingError, what changed", _resume_changed_store),
    ("ident", "store replaced mid-training", "TrainingError at the epoch", _epoch_check),
    ("ident", "input appended to mid-run", "InputError", _input_edited("appended")),
    ("ident", "input touched mid-run", "InputError", _input_edited("touched")),
    ("ident", "input changed, in a worker", "InputError", _input_edited("pickled")),
    ("numbers", "NaN weight in a .pt", "NonFiniteError naming it", _nan_tensor("weight")),
    ("numbers", "inf in optimizer state", "NonFiniteError naming it", _nan_tensor("optimizer")),
    ("numbers", ".pt2 holding a pickle", "refused, payload not run", _pt2_pickle),
    ("numbers", "NaN into JSON", "NonFiniteError naming key",
     _json({"routes": {"ts": {"max_abs_diff": float("nan")}}}, "routes.ts.max_abs_diff")),
    ("numbers", "inf into JSON list", "NonFiniteError naming index",
     _json({"rmse": [0.1, float("inf")]}, "rmse[1]")),
    ("numbers", "NaN force predicted", "names structure and atom",
     _prediction("forces", "structure 0, atom 0 (H")),
    ("numbers", "NaN atomic energy predicted", "names structure and atom",
     _prediction("energies", "structure 0, atom 1 (H")),
    ("numbers", "NaN energy predicted", "names the structure",
     _prediction("energy", "structure 0: the predicted energy")),
    ("numbers", "lr = inf", "ValidationError", _spec("lr", float("inf"))),
    ("numbers", "force_weight = nan", "ValidationError", _spec("force_weight", float("nan"))),
    ("config", "eta < 0", "DescriptorError naming it", _acsf("eta = -0.5", radial=[(-0.5, 0)])),
    ("config", "lambda = 0.5", "DescriptorError",
     _acsf("lambda must be -1 or 1", narrow=[(0.1, 1.0, 0.5, 0.0)])),
    ("config", "lambda = 2 (wide)", "DescriptorError",
     _acsf("lambda must be -1 or 1", wide=[(0.1, 1.0, 2.0, 0.0)])),
    ("config", "duplicate functions", "DescriptorError",
     _acsf("same function", radial=[(0.1, 1.0), (0.1, 1.0)])),
    ("config", "rs beyond the cutoff", "DescriptorError",
     _acsf("beyond the cutoff", radial=[(0.1, 7.0)])),
    ("config", "r_cut = 1e6", "DescriptorError", _acsf("beyond 50", radial=[(0.1, 0)], r_cut=1e6)),
    ("config", "r_cut = 1e6 in a spec", "one line before the run", _spec_r_cut),
    ("config", "zeta = 0.5", "accepted (n2p2 does)", _zeta_below_one),
    ("cli", "--local 0", "usage + one error line, rc 2",
     lambda tmp: _usage_error(_featurize(tmp, "-o", "s.zarr", "--local", "0"), "at least 1")),
    ("cli", "--local two", "usage + one error line, rc 2",
     lambda tmp: _usage_error(_featurize(tmp, "-o", "s.zarr", "--local", "two"), "whole number")),
    ("cli", "featurize -o /", "one line, rc 2",
     lambda tmp: _one_line(_featurize(tmp, "-o", "/", "--local", "1"), "filesystem root")),
    ("cli", ".gz, .bz2, .xz input", "read as its text", _compressed_read),
    ("cli", "gzip not named .gz", "one line: compressed", _compressed("gz", "in.extxyz")),
    ("cli", "bzip2 not named .bz2", "one line: compressed", _compressed("bz2", "in.extxyz")),
    ("cli", "scheduler lost mid-run", "one line, counts add up", _scheduler_lost),
]  # fmt: skip
