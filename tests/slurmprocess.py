"""A single-node SLURM on this machine for the tests (``kind: slurm`` for real): munged,
slurmctld and slurmd as root, every file under one folder, ports on 127.0.0.1 that are
free, no cgroups. The client commands (``sbatch``, ``squeue``, dask-jobqueue's) find it
through ``SLURM_CONF``. No pytest here; waits are bounded.

Needs the Debian packages ``slurm-wlm`` and ``munge`` (SLURM 22.05 on bookworm) and root
(slurmd starts the jobs as their user).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

#: the daemons this needs, and the client commands the tests call
DAEMONS = ("munged", "slurmctld", "slurmd")


def missing() -> str | None:
    """Why a single-node SLURM cannot start here (``None``: it can)."""
    absent = [name for name in (*DAEMONS, "sbatch", "mungekey") if shutil.which(name) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install slurm-wlm munge)"
    if os.geteuid() != 0:
        return "slurmd runs the jobs as their user: it needs root"
    return None


def _free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports on 127.0.0.1 that nothing listens on (just now)."""
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


@dataclass
class Slurm:
    """A running single-node SLURM: its folder, node name, and the environment (with
    ``SLURM_CONF``) under which commands reach it."""

    root: Path
    node: str
    env: dict[str, str]
    processes: list[subprocess.Popen] = field(default_factory=list)

    def run(self, *args: str, timeout: float = 30) -> str:
        """Output of a SLURM command (``sinfo``, ``squeue``, ``scontrol``…) run against it."""
        done = subprocess.run(
            args, env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    def jobs(self) -> list[tuple[str, str]]:
        """(job id, state) of every job in the queue."""
        out = self.run("squeue", "--noheader", "--format=%i %T")
        return [tuple(line.split()) for line in out.splitlines() if line.strip()]  # type: ignore[misc]

    def node_state(self) -> str:
        """The node's state as ``sinfo`` prints it (``idle``, ``alloc``, ``drain``…)."""
        return self.run("sinfo", "--noheader", "--format=%T", "--nodes", self.node).strip()

    def wait_for(self, condition: str, check: Callable[[], object], timeout: float) -> None:
        """Poll ``check()`` until true (bounded; ``TimeoutError`` naming ``condition``)."""
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"SLURM: {condition} not within {timeout:g} s")
            time.sleep(0.2)

    def resume(self) -> None:
        """Return the node to service (after a drain) and wait until it is idle."""
        self.run("scontrol", "update", f"nodename={self.node}", "state=resume")
        self.wait_for("node idle", lambda: self.node_state() == "idle", 30)

    def cancel_all(self) -> None:
        """Cancel every job and wait until the queue is empty."""
        if self.jobs():
            self.run("scancel", "--full", *(job for job, _ in self.jobs()))
        self.wait_for("empty queue", lambda: not self.jobs(), 30)

    def stop(self) -> None:
        """Stop the daemons (slurmd, slurmctld, munged), last started first."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(5)
        self.processes.clear()


def _conf(root: Path, node: str, cpus: int, memory_mb: int, ctld_port: int, d_port: int) -> str:
    """slurm.conf of one node on 127.0.0.1: no cgroups, no accounting, root runs it all."""
    return f"""\
ClusterName=dparalleltest
SlurmctldHost={node}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=2
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
PartitionName=cpu Nodes={node} Default=NO MaxTime=INFINITE State=UP
"""


def start(root: Path, cpus: int = 2, memory_mb: int = 20000, timeout: float = 30) -> Slurm:
    """Start munged, slurmctld and slurmd with all their files under ``root`` (an empty
    folder), wait until the node is idle, and return the running :class:`Slurm`."""
    node = socket.gethostname()
    for sub in ("munge", "state", "spool"):
        (root / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    root.chmod(0o755)  # munged checks the folders above its socket and key
    key = root / "munge" / "munge.key"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)
    key.chmod(0o600)
    ctld_port, d_port = _free_ports(2)
    conf = root / "slurm.conf"
    conf.write_text(_conf(root, node, cpus, memory_mb, ctld_port, d_port))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    slurm = Slurm(root, node, env)
    munge = root / "munge"
    commands = [
        ["munged", "--foreground", "--force", f"--key-file={key}", f"--socket={munge}/munge.socket",
         f"--pid-file={munge}/munged.pid", f"--log-file={munge}/munged.log",
         f"--seed-file={munge}/munged.seed"],
        ["slurmctld", "-D", "-i", "-f", str(conf)],
        ["slurmd", "-D", "-f", str(conf), "-N", node],
    ]  # fmt: skip
    try:
        for command in commands:
            log = (root / f"{command[0]}.out").open("wb")
            slurm.processes.append(
                subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
            )
            if command[0] == "munged":
                slurm.wait_for("munge socket", (munge / "munge.socket").exists, timeout)
        slurm.wait_for("node idle", lambda: _idle(slurm), timeout)
    except BaseException:
        slurm.stop()
        raise
    return slurm


def _idle(slurm: Slurm) -> bool:
    """Whether the node is idle; a daemon that ended is an error naming its log."""
    for process in slurm.processes:
        if process.poll() is not None:
            name = process.args[0]  # type: ignore[index]
            log = slurm.root / f"{name}.log"
            text = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{name} ended ({process.returncode}): {text}")
    try:
        return slurm.node_state() == "idle"
    except (RuntimeError, subprocess.TimeoutExpired):
        return False
