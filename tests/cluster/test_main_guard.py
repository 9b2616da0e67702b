"""A script that starts a local cluster without the ``__main__`` guard (or from stdin):
the worker refuses in one line, the parent's error names the likely cause."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from dparallel.cluster.main_guard import main_script_hint, refuse_while_bootstrapping
from dparallel.errors import ClusterError

_ROOT = Path(__file__).resolve().parents[2]
_GUARD = 'if __name__ == "__main__":'


def _failed_start() -> RuntimeError:
    """What distributed raises when a worker process died before it reported back."""
    try:
        try:
            raise RuntimeError("Nanny failed to start worker process")
        except RuntimeError as exc:
            raise RuntimeError("Nanny failed to start.") from exc
    except RuntimeError as exc:
        return exc


def _as_main(monkeypatch, file: str | None) -> None:
    main = types.ModuleType("__main__")
    if file is not None:
        main.__file__ = file
    monkeypatch.setitem(sys.modules, "__main__", main)


def test_an_unguarded_script_is_named_as_the_likely_cause(tmp_path, monkeypatch):
    script = tmp_path / "start.py"
    script.write_text("from dparallel.cluster import connect\nconnect()\n")
    _as_main(monkeypatch, str(script))
    hint = main_script_hint(_failed_start())
    assert hint.startswith(" (likely cause: ")
    assert str(script) in hint and _GUARD in hint


def test_stdin_is_named_as_the_likely_cause(monkeypatch):
    _as_main(monkeypatch, "<stdin>")
    hint = main_script_hint(_failed_start())
    assert "<stdin>" in hint and "save it to a file" in hint


@pytest.mark.parametrize("file", ["guarded", None])
def test_no_hint_for_a_guarded_script_or_no_script(tmp_path, monkeypatch, file):
    script = tmp_path / "start.py"
    script.write_text(f"{_GUARD}\n    pass\n")
    _as_main(monkeypatch, str(script) if file else None)
    assert main_script_hint(_failed_start()) == ""


def test_no_hint_for_other_failures(tmp_path, monkeypatch):
    script = tmp_path / "start.py"
    script.write_text("connect()\n")
    _as_main(monkeypatch, str(script))
    assert main_script_hint(OSError("address already in use")) == ""


def test_a_worker_importing_the_main_script_refuses_to_start_a_cluster(monkeypatch):
    refuse_while_bootstrapping()  # the test process itself is not bootstrapping
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(ClusterError, match="worker process imported the main script"):
        refuse_while_bootstrapping()


@pytest.mark.integration
@pytest.mark.parametrize("early", [False, True])
def test_unguarded_script_fails_with_the_cause_named(tmp_path, early):
    """docs/deploy.md's snippet without the guard: one ClusterError that names it; also
    where the client connects before the first worker starts (``return_early``)."""
    script = tmp_path / "unguarded.py"
    script.write_text(
        textwrap.dedent(
            f"""
            from dparallel.cluster import ClusterSpec, connect

            spec = ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")
            with connect(spec, return_early={early}) as h:
                print(h.client.submit(sum, [1, 2]).result())
            """
        )
    )
    out = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("dparallel.errors.ClusterError: cannot start a local Dask cluster")
    assert f"main script {script} again" in last and _GUARD in last
    # the worker's own error is one line, not multiprocessing's bootstrapping text
    assert "worker process imported the main script again" in out.stderr
    assert "An attempt has been made to start a new process" not in out.stderr
