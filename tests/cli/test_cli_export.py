"""`dparallel lammps env`: the exports name the plugin directory the command is given."""

from __future__ import annotations

import pytest

from dparallel.cli.main import main
from dparallel.errors import DParallelError


def test_lammps_env_exports_the_dir_it_is_given(tmp_path, monkeypatch, capsys) -> None:
    """`dparallel lammps --dir D build` puts the plugin in D; `--dir D env` must then point
    LAMMPS_PLUGIN_PATH there, not at the default directory (docs/lammps.md)."""
    monkeypatch.delenv("DPARALLEL_LAMMPS_PLUGIN_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    try:
        from dparallel.lammps.build import mpi_library_dir

        mpi_library_dir()
    except (DParallelError, OSError) as exc:
        pytest.skip(f"no mpich wheel: {exc}")
    plugins = tmp_path / "plugins"
    assert main(["lammps", "--dir", str(plugins), "env"]) == 0
    exports = dict(
        line.removeprefix("export ").split("=", 1) for line in capsys.readouterr().out.splitlines()
    )
    assert exports["LAMMPS_PLUGIN_PATH"].startswith(f'"{plugins}$')
    assert main(["lammps", "env"]) == 0  # without --dir: the default one
    default = dict(
        line.removeprefix("export ").split("=", 1) for line in capsys.readouterr().out.splitlines()
    )
    assert default["LAMMPS_PLUGIN_PATH"].startswith(
        f'"{tmp_path / "xdg" / "dparallel" / "lammps"}$'
    )
