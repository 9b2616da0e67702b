"""Who holds a store lease: the record of a process (host, pid and its start time, pid
namespace, boot id) written into the lease, whether that process is gone (told only on
its own host and container; elsewhere only the heartbeat can tell), and how a refused run
names it (:mod:`dparallel.store._lease`).
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

__all__ = ["describe_holder", "holder_gone", "holder_identity"]


def _read_text(path: str) -> str:
    """The text of ``path`` (a /proc file), stripped; empty where it cannot be read."""
    try:
        with open(path) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def holder_identity() -> dict[str, Any]:
    """Who holds a lease: enough to tell, from this host, whether that process still lives."""
    import psutil

    pid = os.getpid()
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = ""
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "started": psutil.Process(pid).create_time(),
        "pidns": pidns,
        "boot": _read_text("/proc/sys/kernel/random/boot_id"),
    }


def holder_gone(holder: dict[str, Any]) -> bool:
    """Whether ``holder`` ran on this machine and its process no longer exists."""
    import psutil

    mine = holder_identity()
    if any(holder.get(k) != mine[k] for k in ("host", "pidns", "boot")):
        return False  # another machine or container: only the heartbeat can tell
    try:
        started = psutil.Process(int(holder["pid"])).create_time()
    except (psutil.NoSuchProcess, KeyError, TypeError, ValueError):
        return True
    except psutil.Error:
        return False
    return abs(started - float(holder.get("started", 0.0))) > 1.0  # pid reused since


def describe_holder(holder: dict[str, Any], now: float) -> str:
    """The holder of a lease as a refused run names it: its command, pid, host, since when
    and its last heartbeat (``{}``: an unreadable record)."""
    if not holder:
        return "an unknown run (its lock file cannot be read; it is taken over once it is stale)"
    age = now - float(holder.get("heartbeat", now))
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(holder.get("since", now))))
    return (
        f"{holder.get('command') or 'a dparallel run'} (pid {holder.get('pid')} on "
        f"{holder.get('host')}, since {since}, last heartbeat {age:.0f} s ago)"
    )
