"""dparallel as a user gets it: a wheel (built from the source tree and from the sdist: the
same files), holding every file the package reads at run time and nothing else, installed
into a venv of its own and run from a folder without the repository's files."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[1]


def _run(argv: list[str], cwd: Path, timeout: float = 300, **kw: object) -> str:
    done = subprocess.run(
        argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, **kw
    )
    assert done.returncode == 0, f"{argv}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _pip(*args: str, cwd: Path) -> str:
    """pip of this environment; it builds as a user's pip does, in an environment of its own
    with pyproject's build requirements (from the package registry)."""
    return _run([sys.executable, "-m", "pip", *args, "-q"], cwd=cwd)


def _package_files() -> set[str]:
    """The package's files in the source tree (what the wheel must hold)."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "dparallel").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


def _contents(wheel: Path) -> dict[str, bytes]:
    """The wheel's files outside its ``.dist-info`` (whose RECORD names the wheel's hashes)."""
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) for n in z.namelist() if ".dist-info/" not in n}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel built from a copy of the source tree, checked against the one the sdist
    builds."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(ROOT / "dparallel", src / "dparallel",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
    sdist = _run([sys.executable, "-c", "from setuptools import build_meta as b; "
                  f"print(b.build_sdist({str(tmp / 'sdist')!r}))"], cwd=src)  # fmt: skip
    _pip("wheel", "--no-deps", "-w", str(tmp / "tree"), str(src), cwd=tmp)
    _pip("wheel", "--no-deps", "-w", str(tmp / "from-sdist"),
         str(tmp / "sdist" / sdist.split()[-1]), cwd=tmp)  # fmt: skip
    (built,) = (tmp / "tree").glob("dparallel-*.whl")
    (again,) = (tmp / "from-sdist").glob("dparallel-*.whl")
    assert _contents(built) == _contents(again)
    return built


def test_the_wheel_holds_the_package_and_nothing_else(wheel: Path) -> None:
    names = set(_contents(wheel))
    assert names == _package_files()  # package data too: C++ sources, quickstart.yaml
    assert {
        "dparallel/workflow/quickstart.yaml",
        "dparallel/lammps/src/pair_dparallel.cpp",
    } <= names
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt"))
        points = z.read(meta).decode()
    assert "dparallel = dparallel.cli.main:entry" in points
    assert "dparallel = dparallel.lammps.build:plugin_dir" in points
    with zipfile.ZipFile(wheel) as z:  # the licence pyproject declares, with its text
        licence = [n for n in z.namelist() if ".dist-info/" in n and n.endswith("/LICENSE")]
        assert licence and b"MIT License" in z.read(licence[0])


def test_the_installed_wheel_runs_the_demo_from_an_empty_folder(wheel: Path, tmp_path: Path):
    """A venv of its own holding only the wheel; its dependencies are this environment's
    (a path line, so that neither this checkout nor an editable install of it is seen)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR")}
    env["DPARALLEL_CACHE_DIR"] = str(tmp_path / "cache")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q",
          str(wheel)], cwd=tmp_path, env=env)  # fmt: skip
    (own,) = (venv / "lib").glob("python3.*/site-packages")
    (own / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    work = tmp_path / "work"
    work.mkdir()
    where = _run([str(python), "-c", "import dparallel; print(dparallel.__file__)"], work, env=env)
    assert Path(where.strip()).is_relative_to(own)
    demo = [str(venv / "bin" / "dparallel"), "demo", "--quiet"]
    for setting in ("dataset.generate.n_structures=12", "training.epochs=2",
                    "cluster.n_workers=1", "cluster.dashboard_address=127.0.0.1:0"):  # fmt: skip
        demo += ["--set", setting]
    out = _run(demo, work, env=env, timeout=600)
    assert "stages: dataset ran, featurize ran, train ran, export ran" in out
    assert (work / "runs" / "quickstart" / "model" / "lammps.model").is_file()
