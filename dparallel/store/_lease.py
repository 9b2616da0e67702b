"""The store lease: one writing run per store, safe on filesystems shared by several hosts.

A local store's lease is ``<store>.lock`` beside it (created with ``O_EXCL``, broken by
rename when stale); a store at a URL has the object ``<store>/dparallel.lease`` instead
(:class:`ObjectLease`: create-if-absent and ETag-matched replacement). Holder, heartbeat,
staleness and takeover rules: docs/store-format.md ("The lease: one writer per store",
"On object storage").
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any, NoReturn

from dparallel._files import raise_if_disk_full
from dparallel.config import env_number
from dparallel.errors import StoreBusyError, StoreError, UnsafePathError
from dparallel.io.location import Location, as_location
from dparallel.store import _objects
from dparallel.store._backend import store_folder
from dparallel.store._generations import LEASE_KEY, POINTER_KEY, refuse_foreign
from dparallel.store._holders import describe_holder, holder_gone, holder_identity

__all__ = [
    "DEFAULT_TIMEOUT",
    "ENV_LEASE_TIMEOUT",
    "LEASE_KEY",
    "ObjectLease",
    "StoreLease",
    "held_lease",
    "lease_object",
    "lease_path",
]

log = logging.getLogger(__name__)

#: Seconds without a heartbeat after which a lease counts as abandoned.
DEFAULT_TIMEOUT = 60.0
#: Environment variable overriding :data:`DEFAULT_TIMEOUT`.
ENV_LEASE_TIMEOUT = "DPARALLEL_LEASE_TIMEOUT"
#: Seconds a release waits for a heartbeat in flight to settle (the lease client gives a
#: request up within ~30 s); a lease whose heartbeat is still unanswered then goes stale.
SETTLE_S = 30.0

_HELD: dict[str, StoreLease] = {}  # leases this process holds, by lock file or object
_HELD_LOCK = threading.Lock()


def lease_path(store: str | os.PathLike[str] | Location) -> Path:
    """The lock file of the store at ``store``: ``<store>.lock`` beside it.

    A lease is a file beside a folder: a store that is not one (a URL, a zarr
    ``MemoryStore``) has none, and asking for it raises :class:`StoreError`.
    """
    if store_folder(store) is None:
        raise StoreError(
            f"{store} is not a local store: the store lease is a file beside a store's folder "
            "(featurize and ingest with workers need one; use a path)"
        )
    path = Path(str(as_location(store))).resolve()
    if path.parent == path:
        raise UnsafePathError(f"refusing to replace {store}: it is the filesystem root")
    return path.with_name(path.name + ".lock")


def held_lease(store: str | os.PathLike[str] | Location) -> StoreLease | None:
    """The lease this process holds on ``store``, if any."""
    location = as_location(store)
    key = str(lease_path(store) if location.is_local else _object_key(location))
    with _HELD_LOCK:
        return _HELD.get(key)


def lease_holder(folder: str | os.PathLike[str]) -> str | None:
    """Who holds the lease of the local ``folder`` now (a store, a model directory), as a
    refused run names it; ``None`` when no run does (no lock file, or a stale one)."""
    if Path(folder).resolve().parent == Path(folder).resolve():
        return None  # the filesystem root: no lease beside it
    lease = StoreLease(folder)
    holder = lease._read()
    now = time.time()
    return None if holder is None or lease._stale(holder, now) else describe_holder(holder, now)


def _object_key(store: Location) -> Location:
    return lease_object(store)


#: What reads a store without writing it (said where its folder cannot be written).
STORE_READERS = "reading a store (info, info --verify, train, evaluate)"


class StoreLease:
    """Exclusive right to create or fill the store at ``store``; a context manager.

    Reentrant within a process: acquiring a lease this process already holds returns the
    same lease (and needs as many releases).

    Parameters
    ----------
    store
        The store's path (it need not exist yet).
    command
        What holds it, shown to a refused run (e.g. ``"dparallel featurize"``).
    timeout
        Seconds without a heartbeat after which the lease is abandoned (default
        ``$DPARALLEL_LEASE_TIMEOUT`` or 60).
    readers
        What reads the folder without writing, said where it cannot be written.
    """

    def __new__(
        cls,
        store: str | os.PathLike[str] | Location,
        command: str = "",
        timeout: float | None = None,
        readers: str = STORE_READERS,
    ) -> StoreLease:
        if cls is StoreLease and not as_location(store).is_local:
            return super().__new__(ObjectLease)
        return super().__new__(cls)

    def __init__(
        self,
        store: str | os.PathLike[str] | Location,
        command: str = "",
        timeout: float | None = None,
        readers: str = STORE_READERS,
    ) -> None:
        location = as_location(store)
        self.readers = readers
        #: The lock file (a local store) or the lease object (a URL).
        self.path: Any = lease_path(store) if location.is_local else _object_key(location)
        #: The store's folder (resolved) or URL.
        self.store: Any = Path(str(location)).resolve() if location.is_local else location
        self.command = command
        if timeout is None:
            timeout = env_number(ENV_LEASE_TIMEOUT, DEFAULT_TIMEOUT, "seconds", positive=True)
        self.timeout = float(timeout)
        self.token = secrets.token_hex(8)
        self.lost = threading.Event()
        #: Why :attr:`lost` was set, for :meth:`check`'s error.
        self.lost_why = ""
        #: Whether :attr:`lost` is another run having taken the store over (else this run
        #: stopped itself for want of a heartbeat written within the timeout).
        self.taken_over = False
        self._since = time.time()
        #: The heartbeat time of the last record written (what others judge staleness by).
        self._written = self._since
        #: Since when a heartbeat is being written and none has been (``None``: none due).
        self._pending: float | None = None
        self._depth = 0
        self._outer: StoreLease | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- records
    def _record(self) -> dict[str, Any]:
        now = time.time()
        return {
            **holder_identity(),
            "token": self.token,
            "command": self.command,
            "store": str(self.store),
            "since": self._since,
            "heartbeat": now,
        }

    def _read(self) -> dict[str, Any] | None:
        """The current lock file's record (``{}`` if unreadable), ``None`` if there is none."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError:
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def _busy(self, holder: dict[str, Any], now: float, what: str) -> StoreBusyError:
        """The refusal of a second run, naming the holder and when its lease goes stale."""
        return StoreBusyError(
            f"{self.store} is being written by {describe_holder(holder, now)}; wait for it to "
            f"finish, or stop it. A lease whose holder died is taken over after "
            f"{self.timeout:.0f} s without heartbeat (at once on the same host); "
            f"{what} {self.path}"
        )

    def _stale(self, holder: dict[str, Any], now: float) -> bool:
        if not holder:  # being written right now, or garbage: judge it by the file's age
            try:
                return now - self.path.stat().st_mtime > self.timeout
            except OSError:
                return False
        if now - float(holder.get("heartbeat", 0.0)) > self.timeout:
            return True
        return holder_gone(holder)

    # ---------------------------------------------------------------- acquire
    def _create(self) -> bool:
        """Create the lock file exclusively; ``False`` if it exists."""
        self._since = time.time()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "w") as fh:
                record = self._record()
                json.dump(record, fh)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:  # a full disk, Ctrl-C, SIGTERM: leave no empty lock file behind
            with contextlib.suppress(OSError):
                self.path.unlink()
            raise
        self._renewed(record)
        return True

    def _break(self, holder: dict[str, Any]) -> None:
        """Remove a stale lock file, unless someone replaced it meanwhile."""
        grave = self.path.with_name(f"{self.path.name}.stale-{secrets.token_hex(6)}")
        try:
            os.rename(self.path, grave)
        except FileNotFoundError:
            return  # another run broke it first
        try:
            taken = json.loads(grave.read_text()) if holder else {}
        except (OSError, ValueError):
            taken = {}
        if holder and taken.get("token") != holder.get("token"):
            # We renamed a fresh lease (taken between our read and our rename): put it back.
            with contextlib.suppress(OSError):
                os.link(grave, self.path)
        with contextlib.suppress(OSError):
            grave.unlink()

    def acquire(self) -> StoreLease:
        """Take the lease (breaking a stale one) or raise :class:`StoreBusyError`."""
        with _HELD_LOCK:
            outer = _HELD.get(str(self.path))
            if outer is not None:
                outer._depth += 1
                self._outer = outer
                return outer
        self._take()
        self._hold()
        return self

    def _created(self) -> bool:
        """:meth:`_create`, its folder made first; a folder that cannot be written (a
        read-only filesystem, a shared dataset) is a :class:`StoreError` saying so, a full
        disk a :class:`~dparallel.errors.DiskFullError` naming the lock file."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            return self._create()
        except OSError as exc:
            raise_if_disk_full(exc, self.path, None)  # a bare ENOSPC names no file
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
            folder = next(p for p in self.path.parents if p.exists())
            raise StoreError(
                f"cannot write {self.store}: {exc.strerror or exc} ({exc.filename or self.path}): "
                f"{self.command or 'a run'} writes it, and its lease {self.path.name} beside it, "
                f"so it needs write access to {folder}; {self.readers} needs none: choose a "
                "writable output path"
            ) from None

    def _take(self) -> None:
        """Create the lock file, breaking a stale one, or raise :class:`StoreBusyError`."""
        for _ in range(5):
            if self._created():
                break
            holder = self._read()
            if holder is None:
                continue  # released between our attempts
            now = time.time()
            if not self._stale(holder, now):
                raise self._busy(holder, now, "lock file")
            log.warning(
                "taking over the abandoned lease %s: %s", self.path, describe_holder(holder, now)
            )
            self._break(holder)
        else:
            raise StoreBusyError(f"cannot take the lease {self.path}: it keeps changing hands")

    def _hold(self) -> None:
        """Register the lease as held by this process and start its heartbeat."""
        self._depth = 1
        with _HELD_LOCK:
            _HELD[str(self.path)] = self
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._beat, name=f"dparallel-lease-{self.store.name}", daemon=True
        )
        self._thread.start()

    # -------------------------------------------------------------- heartbeat
    def _beat(self) -> None:
        interval = max(self.timeout / 6.0, 0.05)
        while not self._stop.wait(interval):
            if self._pending is None:
                self._pending = time.time()
            try:
                self.renew()
            except StoreError as exc:
                log.error("%s", exc)
                return

    def renew(self) -> None:
        """Write a fresh heartbeat; sets :attr:`lost` and raises if the lease is not ours."""
        current = self._read()
        if current == {}:
            return  # unreadable for a moment: judge it at the next beat
        if current is None or current.get("token") != self.token:
            self._lose("another run took the store over", taken_over=True)
        tmp = self.path.with_name(f"{self.path.name}.{self.token}.tmp")
        try:
            record = self._record()
            tmp.write_text(json.dumps(record))
            os.replace(tmp, self.path)
        except OSError as exc:  # e.g. a full disk: keep the old heartbeat, try again later
            with contextlib.suppress(OSError):
                tmp.unlink()
            self._not_renewed(exc)
            return
        self._renewed(record)

    def _renewed(self, record: dict[str, Any]) -> None:
        """``record`` was written: it is the heartbeat others judge staleness by."""
        self._written, self._pending = record["heartbeat"], None

    def _lose(self, why: str, taken_over: bool = False) -> NoReturn:
        """Set :attr:`lost` (``why``: for :meth:`check`; ``taken_over``: by another run,
        else for want of a heartbeat) and raise :class:`StoreError`."""
        self.lost_why, self.taken_over = why, taken_over
        self.lost.set()
        raise StoreError(f"lost the lease {self.path}: {why}")

    def _unanswered(self) -> str | None:
        """Why this run must stop while its heartbeat is still being written (a request
        the service has not answered, up to ~30 s), or ``None``: see :meth:`_too_old`
        (``None`` also after a pause of this process: no heartbeat was due while it
        slept)."""
        if self._pending is None:
            return None
        return self._too_old("the store's service has not answered")

    def _not_renewed(self, exc: OSError) -> None:
        """A heartbeat that could not be written: tried again at the next beat, unless
        :meth:`_too_old` says the lease is lost."""
        why = self._too_old(str(exc))
        if why is None:
            log.debug("cannot renew the lease %s: %s", self.path, exc)
            return
        self._lose(why)

    def _too_old(self, cause: str) -> str | None:
        """Why the lease is lost where the last heartbeat written is older than
        :attr:`timeout` (another run may take the store over: no two runs write at
        once), ``cause`` what kept the next one from being written; else ``None``."""
        age = time.time() - self._written
        if age <= self.timeout:
            return None
        return (
            f"no heartbeat could be written for {age:.0f} s (more than the lease's "
            f"{self.timeout:.0f} s, after which another run may take the store over): {cause}"
        )

    def _stopped_itself(self) -> bool:
        """Whether :attr:`lost` is this run stopping itself for want of a heartbeat
        (:meth:`_too_old`), not another run having taken the store over."""
        return self.lost.is_set() and not self.taken_over

    def check(self) -> None:
        """Raise :class:`StoreError` if the lease was lost (see module docstring)."""
        lease = self._outer or self
        unanswered = lease._unanswered()
        if unanswered is not None and not lease.lost.is_set():
            lease.lost_why = unanswered
            lease.lost.set()
        if lease._stopped_itself():
            raise StoreError(
                f"lost the lease {lease.path}: {lease.lost_why}; stopping: {_objects.RERUN_ADVICE}"
            )
        if lease.lost.is_set():
            raise StoreError(
                f"lost the lease {lease.path}: this run stalled for more than "
                f"{lease.timeout:.0f} s and another run took the store over; stopping"
            )

    # ---------------------------------------------------------------- release
    def release(self) -> None:
        """Give the lease back (removes the lock file if it is still ours)."""
        lease = self._outer or self
        with _HELD_LOCK:
            lease._depth -= 1
            if lease._depth > 0:
                return
            _HELD.pop(str(lease.path), None)
        lease._stop.set()
        if lease._thread is not None:
            lease._thread.join(timeout=SETTLE_S)  # a heartbeat in flight settles first
        lease._give_back()

    def _give_back(self) -> None:
        """Remove the lock file if it is still ours; where it cannot be removed (the store's
        filesystem became read-only), a warning, not an error in place of the run's own:
        the next run takes over a lease whose holder is gone."""
        current = self._read()
        if current and current.get("token") == self.token:
            try:
                self.path.unlink()
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning(
                    "could not remove the lease %s (%s); the next run takes it over",
                    self.path,
                    exc.strerror or exc,
                )

    def __enter__(self) -> StoreLease:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def lease_object(store: Location) -> Location:
    """The lease object of the store at ``store`` (a URL)."""
    return store.child(LEASE_KEY)


class ObjectLease(StoreLease):
    """:class:`StoreLease` of a store on object storage (what ``StoreLease(url)`` makes)."""

    def __init__(self, store: Any, *args: Any, **kwargs: Any) -> None:
        location = as_location(store)
        _objects.require_conditional_writes(location)
        self._location = location
        super().__init__(location, *args, **kwargs)
        self._etag = ""

    def _record(self) -> dict[str, Any]:
        record = super()._record()
        record["store"] = str(self._location)
        return record

    def _get(self) -> tuple[dict[str, Any], str] | None:
        found = _objects.get(self.path)
        if found is None:
            return None
        data, etag = found
        try:
            holder = json.loads(data)
        except ValueError:
            holder = {}
        return (holder if isinstance(holder, dict) else {}), etag

    def _take(self) -> None:
        with _objects.service_failed(self._location, "taking the lease"):
            self._take_object()

    def _take_object(self) -> None:
        names = self._location.names()
        if POINTER_KEY not in names and LEASE_KEY not in names:
            refuse_foreign(self._location, names)  # no lease object left in a user's prefix
        for _ in range(5):
            record = self._record()
            body = json.dumps(record).encode()
            etag = _objects.put_if_absent(self.path, body)
            if etag is not None:
                self._etag = etag
                self._renewed(record)
                return
            found = self._get()
            if found is None:
                continue  # gone between our requests
            holder, version = found
            now = time.time()
            if not holder.get("released") and not self._stale_object(holder, now):
                raise self._busy(holder, now, "lease object")
            if not holder.get("released"):
                log.warning(
                    "taking over the abandoned lease %s: %s",
                    self.path,
                    describe_holder(holder, now),
                )
            etag = _objects.put_if_match(self.path, body, version)
            if etag is not None:
                self._etag = etag
                self._renewed(record)
                return
        raise StoreBusyError(f"cannot take the lease {self.path}: it keeps changing hands")

    def _stale_object(self, holder: dict[str, Any], now: float) -> bool:
        if not holder:  # not JSON: not ours to judge by content; only by replacing it later
            return True
        if now - float(holder.get("heartbeat", 0.0)) > self.timeout:
            return True
        return holder_gone(holder)

    def renew(self) -> None:
        """Write a fresh heartbeat over our own version; lost if someone replaced it."""
        if self.lost.is_set():
            raise StoreError(f"lost the lease {self.path}: {self.lost_why}")
        record = self._record()
        try:
            etag = _objects.put_if_match(self.path, json.dumps(record).encode(), self._etag)
        except OSError as exc:  # the service unreachable for a moment: try at the next beat
            self._not_renewed(exc)
            return
        if etag is None:
            self._lose("another run took the store over", taken_over=True)
        self._etag = etag
        self._renewed(record)

    def _give_back(self) -> None:
        """Replace our own version (ETag match) with a released record; also where this run
        stopped itself for want of a heartbeat, once the one in flight settled (a late one
        that landed is our version too): another run's lease is never replaced (its ETag
        differs), and before, the next run waited a whole timeout for a lease nobody held.
        Not where another run took the store over, nor while a heartbeat is still
        unanswered after :data:`SETTLE_S` (the service is not answering: it goes stale)."""
        if self.lost.is_set() and not self._stopped_itself():
            return
        if self._thread is not None and self._thread.is_alive():
            log.warning(
                "cannot release the lease %s: its heartbeat is unanswered after %.0f s "
                "(it goes stale)",
                self.path,
                SETTLE_S,
            )
            return
        record = {**self._record(), "released": True}
        try:
            _objects.put_if_match(self.path, json.dumps(record).encode(), self._etag)
        except OSError as exc:
            log.warning("cannot release the lease %s (it goes stale): %s", self.path, exc)
