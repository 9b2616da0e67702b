"""The store lease: one writer per store; dead or silent holders do not block forever."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import time

import pytest

from dparallel.errors import StoreBusyError, StoreError
from dparallel.store import StoreLease, held_lease, lease_path


def _hold(path: str, ready, release) -> None:  # noqa: ANN001 - multiprocessing events
    with StoreLease(path, command="holder"):
        ready.set()
        release.wait(30)


def _record(store, **changes) -> None:
    """Write a lock file as another run would have left it."""
    now = time.time()
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": 0.0,
        "pidns": "",
        "boot": "",
        "token": "f" * 16,
        "command": "dparallel featurize",
        "store": str(store),
        "since": now,
        "heartbeat": now,
    }
    record.update(changes)
    lease_path(store).write_text(json.dumps(record))


def test_second_holder_is_refused_while_the_first_lives_then_gets_it(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(tmp_path / "s.zarr"), ready, release))
    proc.start()
    try:
        assert ready.wait(60)
        with pytest.raises(StoreBusyError, match=rf"holder \(pid {proc.pid} on ") as info:
            StoreLease(tmp_path / "s.zarr").acquire()
        assert "s.zarr.lock" in str(info.value)
    finally:
        release.set()
        proc.join(30)
    assert not lease_path(tmp_path / "s.zarr").exists()
    with StoreLease(tmp_path / "s.zarr"):
        assert lease_path(tmp_path / "s.zarr").exists()


def test_lease_of_a_killed_process_is_taken_over_at_once(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(tmp_path / "s.zarr"), ready, release))
    proc.start()
    assert ready.wait(60)
    proc.kill()  # SIGKILL: no clean-up, the lock file stays with a fresh heartbeat
    proc.join(30)
    assert lease_path(tmp_path / "s.zarr").exists()
    t0 = time.monotonic()
    with StoreLease(tmp_path / "s.zarr", timeout=600) as lease:
        assert json.loads(lease.path.read_text())["token"] == lease.token
    assert time.monotonic() - t0 < 5


def test_other_hosts_are_judged_by_heartbeat_only(tmp_path):
    store = tmp_path / "s.zarr"
    _record(store, host="node-17", pid=1)  # fresh heartbeat on another machine
    with pytest.raises(StoreBusyError, match="pid 1 on node-17"):
        StoreLease(store, timeout=30).acquire()
    _record(store, host="node-17", pid=1, heartbeat=time.time() - 31)
    with StoreLease(store, timeout=30) as lease:
        assert json.loads(lease.path.read_text())["token"] == lease.token


def test_same_host_pid_reused_by_a_later_process_is_stale(tmp_path):
    from dparallel.store._holders import holder_identity

    me = holder_identity()
    store = tmp_path / "s.zarr"
    _record(store, pidns=me["pidns"], boot=me["boot"], started=me["started"])
    with pytest.raises(StoreBusyError):  # this very process, alive: not stale
        StoreLease(store, timeout=600).acquire()
    _record(store, pidns=me["pidns"], boot=me["boot"], started=me["started"] - 1000)
    with StoreLease(store, timeout=600):  # same pid, but started later than the holder
        pass


def test_reentrant_heartbeat_and_lost_lease(tmp_path):
    store = tmp_path / "s.zarr"
    with StoreLease(store, timeout=0.6) as outer:
        with StoreLease(store) as inner:
            assert inner is outer and held_lease(store) is outer
        assert held_lease(store) is outer
        first = json.loads(outer.path.read_text())["heartbeat"]
        deadline = time.monotonic() + 10
        while json.loads(outer.path.read_text())["heartbeat"] == first:
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.05)
        _record(store, token="e" * 16)  # someone else took it over
        deadline = time.monotonic() + 10
        while not outer.lost.is_set():
            assert time.monotonic() < deadline, "loss not noticed"
            time.sleep(0.05)
        with pytest.raises(StoreError, match="lost the lease"):
            outer.check()
    assert json.loads(lease_path(store).read_text())["token"] == "e" * 16  # not ours to remove
    assert held_lease(store) is None


def test_a_lock_file_that_cannot_be_written_is_not_left_behind(tmp_path, monkeypatch):
    import errno

    import dparallel.store._lease as lease_module

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(lease_module.json, "dump", full)
    from dparallel.errors import DiskFullError

    # a bare "[Errno 28] No space left on device" named no file: it names the lock file now
    with pytest.raises(DiskFullError, match=r"s\.zarr\.lock: no space left on the device"):
        StoreLease(tmp_path / "s.zarr").acquire()
    assert not lease_path(tmp_path / "s.zarr").exists()
    assert held_lease(tmp_path / "s.zarr") is None


def test_a_holder_whose_heartbeats_cannot_be_written_stops_after_the_timeout(tmp_path, monkeypatch):
    """A full disk under the lock file (on a filesystem another host shares): a heartbeat
    that fails is tried again at the next beat, but once the last one written is older
    than the timeout another run may take the store over, so the lease is lost."""
    import errno
    import pathlib

    store = tmp_path / "s.zarr"
    with StoreLease(store, timeout=0.6) as lease:
        write_text = pathlib.Path.write_text

        def full(self, *args, **kwargs):
            if self.name.startswith(lease.path.name):
                raise OSError(errno.ENOSPC, "No space left on device")
            return write_text(self, *args, **kwargs)

        monkeypatch.setattr(pathlib.Path, "write_text", full)
        deadline = time.monotonic() + 10
        while not lease.lost.is_set():
            assert time.monotonic() < deadline, "a lease not renewed for ever is still held"
            time.sleep(0.05)
        with pytest.raises(StoreError, match=r"no heartbeat could be written .* No space left"):
            lease.check()
        monkeypatch.undo()


def test_a_lock_file_that_cannot_be_removed_is_a_warning_not_the_runs_error(
    tmp_path, monkeypatch, caplog
):
    """The store's filesystem became read-only mid-run: releasing the lease raised
    "Read-only file system: s.zarr.lock" in place of the run's own error (the partitions
    that could not be written); the next run takes over a lease whose holder is gone."""
    import errno
    import pathlib

    store = tmp_path / "s.zarr"
    unlink = pathlib.Path.unlink

    def read_only(self, *args, **kwargs):
        if self == lease_path(store):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return unlink(self, *args, **kwargs)

    with pytest.raises(ValueError, match="the run's own"), StoreLease(store):
        monkeypatch.setattr(pathlib.Path, "unlink", read_only)
        raise ValueError("the run's own error")
    monkeypatch.undo()
    assert "could not remove the lease" in caplog.text and "Read-only" in caplog.text
    assert held_lease(store) is None and lease_path(store).exists()  # taken over when gone


@pytest.mark.parametrize("signal_like", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_while_the_lock_file_is_written_leaves_none(
    tmp_path, monkeypatch, signal_like
):
    """Ctrl-C or SIGTERM (``SystemExit`` here) between the exclusive create and the write:
    no empty lock file is left, so the next run takes the lease at once (an empty one
    read as an unknown run's, refused for the heartbeat's timeout)."""
    import dparallel.store._lease as lease_module

    def interrupted(*args, **kwargs):
        raise signal_like

    store = tmp_path / "s.zarr"
    with monkeypatch.context() as patch:
        patch.setattr(lease_module.json, "dump", interrupted)
        with pytest.raises(signal_like):
            StoreLease(store).acquire()
    assert not lease_path(store).exists()
    start = time.monotonic()
    lease = StoreLease(store).acquire()
    try:
        assert time.monotonic() - start < 5
        assert json.loads(lease_path(store).read_text())["pid"] == os.getpid()
    finally:
        lease.release()
