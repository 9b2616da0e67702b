"""Routing a run's logs to its log file (``dparallel.cluster.logs.log_to_file``)."""

from __future__ import annotations

import logging
import os

import pytest

from dparallel.cluster.logs import ENV_LOG_FILE, log_to_file
from dparallel.errors import UnsafePathError


def test_a_refused_log_file_changes_nothing(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A log target that is refused (a file of the user's) leaves no worker variable and
    no handler behind: nothing the next command in this process would inherit."""
    monkeypatch.delenv(ENV_LOG_FILE, raising=False)
    user = tmp_path / "notes.txt"
    user.write_text("the user's own text\n")
    handlers = {name: list(logging.getLogger(name).handlers) for name in ("", "distributed")}
    with pytest.raises(UnsafePathError):
        log_to_file(user, workers=True)
    assert ENV_LOG_FILE not in os.environ
    assert {n: list(logging.getLogger(n).handlers) for n in handlers} == handlers
    assert user.read_text() == "the user's own text\n"
    undo = log_to_file(tmp_path / "run.log", workers=True)  # an accepted one sets it …
    assert os.environ[ENV_LOG_FILE] == str(tmp_path / "run.log")
    undo()
    assert ENV_LOG_FILE not in os.environ  # … and undoes it
