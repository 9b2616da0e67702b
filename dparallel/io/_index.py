"""Per-file index (byte ranges + atom counts per structure), built in one streaming pass
over a structure file's text (:mod:`dparallel.io._text`: local, remote or compressed) by
the format's indexer (:mod:`dparallel.io._indexers`), and its cache.

The index is cached beside a local file (``FILE.dpindex.npz``) or, when that directory
is not writable and for a URL, in ``$DPARALLEL_CACHE_DIR`` (default
``~/.cache/dparallel``), else (a read-only home) in the temporary folder's
``dparallel-UID``. A cached index is used only while the file's size and mtime (ns;
an object's last-modified time) match the ones it was built from.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from dparallel._files import new_file
from dparallel.config import cache_dir, temporary_cache_dir
from dparallel.errors import ConfigError, InputFormatError
from dparallel.io._frames import RANDOM_ACCESS, frames_path, recorded_copy
from dparallel.io._indexers import STREAMED, Found, index_ase
from dparallel.io._text import open_stream, read_range, sample_hash, stream_sample_hash

if TYPE_CHECKING:
    from dparallel.io.location import Location

__all__ = [
    "FileIndex",
    "cache_path_for",
    "load_or_build_index",
]

log = logging.getLogger(__name__)

#: Bump when the index layout or an indexer's behaviour changes.
INDEX_VERSION = 4  # 4: cell volumes and periodic directions (the planner's cost estimate)
_ARRAYS = ("starts", "ends", "counts", "lines", "periodic")  # per-structure int64 arrays
_FLOATS = ("volumes",)  # per-structure float64 arrays

_LOCK = threading.Lock()

#: Indexes this process loaded or built, newest last, so that the next task on the same
#: file skips loading its cache and hashing its layout again: keyed on (url, storage
#: options, format, size, mtime_ns), as valid as the cache file itself. At most
#: :data:`_KEEP` of them, and older ones go while they hold over :data:`_KEEP_BYTES`.
_KEPT: dict[tuple[str, str, str, int, int], FileIndex] = {}
_KEEP = 4
_KEEP_BYTES = 1 << 30


@dataclass(frozen=True, eq=False)
class FileIndex:
    """Where each structure lives in a file.

    ``starts``/``ends`` (S,) int64 byte ranges (empty for formats read through ASE),
    ``counts`` (S,) int64 atoms, ``lines`` (S,) int64 1-based first line (0 if unknown),
    ``volumes`` (S,) float64 cell volume in the file's length unit cubed (NaN: no cell
    periodic in all three directions given), ``periodic`` (S,) int64 periodic cell
    vectors (0–3; −1: not read): what the planner estimates a structure's work from,
    ``errors`` {structure: (line, reason)} for structures broken beyond parsing
    (e.g. truncated frame, ``begin`` without ``end``), ``frames`` the structures' copy
    that tasks read for formats ASE reads only from their start (io/_frames.py).
    """

    format: str
    size: int
    mtime_ns: int
    starts: np.ndarray
    ends: np.ndarray
    counts: np.ndarray
    lines: np.ndarray
    volumes: np.ndarray
    periodic: np.ndarray
    errors: dict[int, tuple[int, str]] = field(default_factory=dict)
    sample_sha256: str = ""
    #: The random-access copy of a file ASE reads only from its start (io/_frames.py).
    frames: Path | None = None

    def __len__(self) -> int:
        return int(self.counts.shape[0])

    @functools.cached_property
    def sha256(self) -> str:
        """Hash of the byte ranges and atom counts (identity of the file's structure layout;
        computed once per index)."""
        return _layout_hash(self)

    @property
    def nbytes(self) -> int:
        """Bytes its per-structure arrays hold."""
        return sum(int(getattr(self, k).nbytes) for k in (*_ARRAYS, *_FLOATS))


def _layout_hash(index: FileIndex) -> str:
    """sha256 of an index's byte ranges and atom counts."""
    h = hashlib.sha256()
    for arr in (index.starts, index.ends, index.counts):
        h.update(np.ascontiguousarray(arr, dtype="<i8").tobytes())
    return h.hexdigest()


def cache_path_for(path: Path | Location, format: str) -> list[Path]:
    """Candidate cache files for ``path``: beside a local file first, then the user cache
    dir (the only one for a URL)."""
    roots = [cache_dir()]
    with contextlib.suppress(OSError, ConfigError):  # a read-only home: the last resort
        roots.append(temporary_cache_dir())
    key = hashlib.sha256(f"{path}:{format}".encode()).hexdigest()[:24]
    local = path if isinstance(path, Path) else path.local
    beside = [] if local is None else [local.with_name(f"{local.name}.dpindex.npz")]
    return [*beside, *(r / f"{key}.dpindex.npz" for r in roots)]  # format checked on load


def _load(cache: Path, size: int, mtime_ns: int, format: str) -> FileIndex | None:
    try:
        with np.load(cache, allow_pickle=False) as z:
            meta = z["meta"]
            if (
                int(meta[0]) != INDEX_VERSION
                or int(meta[1]) != size
                or int(meta[2]) != mtime_ns
                or str(z["format"]) != format
                or (format not in STREAMED and "frames" not in z)  # before cells, copies
            ):
                return None
            errors = {
                int(f): (int(ln), str(r))
                for f, ln, r in zip(z["err_frames"], z["err_lines"], z["err_reasons"], strict=True)
            }
            arrays = {k: z[k] for k in (*_ARRAYS, *_FLOATS)}
            sample, frames = str(z["sample"]), recorded_copy(cache, z.get("frames"))
            return FileIndex(
                format, size, mtime_ns, **arrays, errors=errors, sample_sha256=sample, frames=frames
            )
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):  # a damaged cache
        return None


def _save(index: FileIndex, candidates: list[Path]) -> None:
    copy = np.array([-1, -1], dtype=np.int64)  # none (its size and mtime where there is)
    if index.frames is not None:  # beside its copy first, which it records
        candidates = sorted(candidates, key=lambda c: frames_path(c) != index.frames)
        with contextlib.suppress(OSError):  # gone already: tasks read the file through ASE
            info = index.frames.stat()
            copy = np.array([info.st_size, info.st_mtime_ns], dtype=np.int64)
    frames = sorted(index.errors)
    payload: dict[str, Any] = {
        "meta": np.array([INDEX_VERSION, index.size, index.mtime_ns], dtype=np.int64),
        "format": np.array(index.format),
        "sample": np.array(index.sample_sha256),
        **{k: getattr(index, k) for k in (*_ARRAYS, *_FLOATS)},
        "err_frames": np.array(frames, dtype=np.int64),
        "err_lines": np.array([index.errors[f][0] for f in frames], dtype=np.int64),
        "err_reasons": np.array([index.errors[f][1] for f in frames], dtype=str),
    }
    if index.format not in STREAMED:
        payload["frames"] = copy
    for cache in candidates:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            with new_file(cache) as f:  # renamed into place: never half a file
                np.savez(f, **payload)
            return
        except OSError as exc:
            log.debug("cannot write index cache %s: %s", cache, exc)
    log.warning("could not cache the index of %s anywhere", candidates[0])


def _keep(key: tuple[str, str, str, int, int], index: FileIndex) -> FileIndex:
    """Remember ``index`` for this process (see :data:`_KEPT`), read-only; returns it."""
    for k in (*_ARRAYS, *_FLOATS):  # shared by every source on the file from now on
        getattr(index, k).setflags(write=False)
    with _LOCK:
        _KEPT.pop(key, None)
        _KEPT[key] = index
        while len(_KEPT) > 1 and (
            len(_KEPT) > _KEEP or sum(i.nbytes for i in _KEPT.values()) > _KEEP_BYTES
        ):
            del _KEPT[next(iter(_KEPT))]
    return index


def load_or_build_index(location: Location, format: str, *, cache: bool = True) -> FileIndex:
    """The index of ``location`` in ``format``: the one this process already holds, else
    from its cache file, while still valid (same size and mtime), else built and cached.
    ``cache=False`` builds it anew every time."""
    st = location.info()
    size, mtime_ns = int(st["size"]), int(st["mtime_ns"])
    key = (location.url, repr(location.storage_options), format, size, mtime_ns)
    if cache:
        with _LOCK:
            kept = _KEPT.get(key)
        if kept is not None:
            return kept
    candidates = cache_path_for(location, format)
    if cache:
        for c in candidates:
            if c.exists():
                cached = _load(c, size, mtime_ns, format)
                if cached is not None:
                    log.debug("using cached index %s", c)
                    return _keep(key, cached)
    copy = cache and format not in RANDOM_ACCESS
    found, sample, frames = _build(location, format, candidates if copy else [])
    if not found.counts:
        raise InputFormatError(
            f"empty file: no structures found (format {format})", path=str(location)
        )
    index = FileIndex(
        format,
        size,
        mtime_ns,
        **{k: np.frombuffer(getattr(found, k), np.int64) for k in _ARRAYS},  # no copy
        **{k: np.frombuffer(getattr(found, k), np.float64) for k in _FLOATS},
        errors=found.errors,
        sample_sha256=sample,
        frames=frames,
    )
    if cache:
        _save(index, candidates)
        _keep(key, index)
    return index


def _build(
    location: Location, format: str, candidates: list[Path]
) -> tuple[Found, str, Path | None]:
    """Index ``location`` in one pass: what was found, the text's sample hash (of a
    compressed file, from the first and last bytes its stream kept) and, for a format
    ASE reads only from its start, the structures' random-access copy beside the first
    of the index's ``candidates`` that takes it (io/_frames.py; none without them)."""
    streamed = STREAMED.get(format)
    if streamed is None:
        found, length, frames = index_ase(location, format, candidates)
        return found, sample_hash(functools.partial(read_range, location), length), frames
    with open_stream(location) as f:
        found, length = streamed(f, str(location))
        return found, stream_sample_hash(f, location, length), None
