"""Quiet means quiet: with ``-q`` nothing but errors and the summary reaches the terminal."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest

from dparallel.cli._options import on_connect


@pytest.mark.parametrize("quiet", [True, False])
def test_the_dashboard_link_is_printed_only_without_quiet(quiet, capsys):
    args = argparse.Namespace(quiet=quiet, verbose=0, log_file=None)
    handle = SimpleNamespace(dashboard_link="http://127.0.0.1:8787/status", source="remote")
    on_connect(args)(handle)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == ("" if quiet else "dashboard: http://127.0.0.1:8787/status\n")
