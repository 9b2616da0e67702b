"""How the kernel modules compile with numba (one set of options, one on-disk cache key),
and the dot product they share. Each module defines plain-Python helpers and compiles them
at its end.

numba keys its on-disk cache of a function on the source of the function's own file only,
not on the numba code it calls in other files (that code is compiled into the caller's
cache entry). Importing this module therefore keys the cache of every function defined in
a module of this directory on a digest of all of them (:func:`key_cache_on_directory`):
any change to one recompiles them all once, and no stale callee survives.

numba caches beside the sources (``__pycache__``), else in ``~/.cache/numba``; in an
install whose site-packages and home are both read-only (a container) it finds neither
and refuses to compile a ``cache=True`` function at all. :func:`cache_anywhere` adds a
last resort for dparallel's functions: dparallel's own cache folder.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path
from typing import Any

import numba

from dparallel.kernels._numba_blas import defer_blas_check

__all__ = [
    "CONTRACT",
    "REASSOC",
    "cache_anywhere",
    "jit",
    "jit_views",
    "key_cache_on_directory",
]

CONTRACT = {"contract"}  # FMA only: exp/cos range reductions stay exact
REASSOC = {"contract", "reassoc", "nsz", "arcp"}  # reductions may be reordered


def jit(fastmath: set[str], **kw: bool):  # noqa: ANN201
    """njit with cache, numpy error model (no ZeroDivisionError checks: loops vectorise)."""
    return numba.njit(cache=True, error_model="numpy", fastmath=fastmath, **kw)


def jit_views(fastmath: set[str]):  # noqa: ANN201
    """:func:`jit` for helpers that allocate nothing and return no array: compiled
    without the runtime's reference counting (_nrt=False), so the array views they
    take are free instead of an atomic increment and decrement each."""
    return numba.njit(cache=True, error_model="numpy", fastmath=fastmath, _nrt=False)


def _reduce_dot(a, b, n):  # noqa: ANN001, ANN202
    """Σ_q a[q]·b[q] (vectorised: reassociation allowed)."""
    s = 0.0
    for q in range(n):
        s += a[q] * b[q]
    return s


def sources_digest(directory: Path) -> str:
    """sha256 of the ``*.py`` files directly in ``directory`` (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(directory.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _locator_classes() -> list[type]:
    """numba's list of cache locator classes (tried in order; the first that can cache wins)."""
    from numba.core import caching

    impl = getattr(caching, "CacheImpl", None) or caching._CacheImpl  # older numba: _CacheImpl
    return impl._locator_classes


def cache_anywhere() -> None:
    """Let numba cache dparallel's functions in ``writable_cache_dir("numba")``
    (``$DPARALLEL_CACHE_DIR/numba``, else the temporary folder's) where it finds no folder
    of its own to write (idempotent; only the temporary folder is announced, once).
    Call it before decorating a function with ``cache=True``."""
    classes = _locator_classes()
    if not any(getattr(c, "package", None) == _PACKAGE for c in classes):
        classes.append(_fallback_locator())


#: The installed package's folder: the functions :func:`cache_anywhere` answers for.
_PACKAGE = Path(__file__).resolve().parents[1]


def _fallback_locator() -> type:
    """A numba cache locator class for dparallel's functions, in dparallel's cache folder."""
    from numba.core.caching import _CacheLocator, _SourceFileBackedLocatorMixin

    from dparallel.config import ENV_CACHE_DIR, cache_dir, writable_cache_dir

    class OwnFolderLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
        root: Path | None = None

        def __init__(self, py_func: Any, py_file: str) -> None:
            self._py_file = py_file
            self._lineno = py_func.__code__.co_firstlineno
            self._cache_path = str(self._root() / self.get_suitable_cache_subpath(py_file))

        def get_cache_path(self) -> str:
            return self._cache_path

        @classmethod
        def _root(cls) -> Path:
            if cls.root is None:
                cls.root = writable_cache_dir("numba")
                try:
                    mine = cls.root.is_relative_to(cache_dir())
                except RuntimeError:  # no home folder at all
                    mine = False
                if not mine:  # a log record: one line in worker processes too
                    logging.getLogger(__name__).warning(
                        "numba can write neither beside dparallel nor in the home folder: "
                        "its compiled kernels are cached in %s (set %s to keep them elsewhere)",
                        cls.root,
                        ENV_CACHE_DIR,
                    )
            return cls.root

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if not Path(py_file).resolve().is_relative_to(_PACKAGE):
                return None
            return super().from_function(py_func, py_file)

    OwnFolderLocator.package = _PACKAGE  # type: ignore[attr-defined]
    return OwnFolderLocator


def key_cache_on_directory(directory: Path) -> None:
    """Key numba's on-disk cache of the functions defined in ``directory``'s modules on
    :func:`sources_digest` of the directory, besides their own file (idempotent).

    numba has no public hook for this: its cache locators (``numba.core.caching``) are the
    extension point (``NUMBA_CACHE_LOCATOR_CLASSES`` takes a list of them, for every
    function), so a locator is put first in numba's list that answers only for functions of
    ``directory`` and otherwise defers to the locator numba would have chosen, adding the
    digest to its source stamp (a stamp that differs makes numba recompile and overwrite).
    """
    directory = directory.resolve()
    classes = _locator_classes()
    if any(getattr(c, "directory", None) == directory for c in classes):
        return
    locator = _directory_locator(directory, sources_digest(directory), tuple(classes))
    classes.insert(0, locator)


def _directory_locator(directory: Path, digest: str, others: tuple[type, ...]) -> type:
    """A numba cache locator class for the functions of ``directory`` (see above)."""
    from numba.core.caching import _CacheLocator

    class DirectoryLocator(_CacheLocator):
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def ensure_cache_path(self) -> None:
            self._inner.ensure_cache_path()

        def get_cache_path(self) -> str:
            return self._inner.get_cache_path()

        def get_source_stamp(self) -> Any:
            return (self._inner.get_source_stamp(), digest)

        def get_disambiguator(self) -> str:
            return self._inner.get_disambiguator()

        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if Path(py_file).resolve().parent != directory:
                return None
            for other in others:
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
            return None

    DirectoryLocator.directory = directory  # type: ignore[attr-defined]
    return DirectoryLocator


defer_blas_check()  # before numba's CPU target is first used (a kernel loaded or compiled)
cache_anywhere()  # before key_cache_on_directory: its locator defers to the fallback too
key_cache_on_directory(Path(__file__).parent)  # before any kernel here is decorated
_reduce_dot = jit(REASSOC)(_reduce_dot)
