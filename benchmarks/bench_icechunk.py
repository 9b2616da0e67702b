"""Icechunk against plain zarr for a featurized store, locally and on S3: one run, one table.

Payload: n2p2's water example ×N (default 25: 51,600 atoms, 573 MB stored) featurized with
dG/dr in this process into a local dparallel store once (``/work/shared/n2p2/water`` or
``$N2P2_WATER``), then read back into memory node by node: the same arrays, shapes,
dtypes, chunking (one chunk per array per partition), codecs and attributes dparallel
writes (each node's own zarr metadata is reused; icechunk gets chunk keys ``c/0/0``, as it
refuses dparallel's ``c.0.0``). That payload is then written, and read back, as:

* plain zarr 3 into a local folder and into ``s3://`` on moto's standalone server
  (zarr's ``FsspecStore``, as dparallel opens an S3 store), through zarr's API;
* plain zarr encoded into memory by zarr and put as one concurrent batch per partition,
  chunks before metadata, read back by one listing and one batch of GETs (what dparallel's
  batch writes and read cache do);
* an icechunk repository on local storage and on S3 storage at the same moto server:
  one commit per partition (what a resumable writer does), one commit for everything, and
  one forked session per partition (pickled as to a worker, merged, one commit: icechunk's
  distributed writes).

zarr's API writes each partition's hierarchy with ``zarr.create_hierarchy``, then its
chunks from 8 threads. Printed: write seconds, MB/s of the stored (compressed) bytes, the
write time over plain zarr's on the same storage, read seconds, bytes and objects at rest;
then what the transactions give (a second concurrent writer's ``ConflictError``; a reader
of a snapshot id that keeps seeing the old data while a new commit lands). Every read is
compared with the payload. Each variant runs ``--repeat`` times in turn (its store deleted
after each), the best times kept. One run on a shared machine: quote ratios.

    PYTHONPATH=. python benchmarks/bench_icechunk.py [--copies 25] [--repeat 2]
"""

from __future__ import annotations

import argparse
import pickle
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench_object_store import s3_environment
from water_example import WATER

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

BUCKET = "bench"
THREADS = 8
TIMEOUT = 600.0  # seconds for any one batch of concurrent writes or reads

Payload = dict[str, dict[str, tuple[Any, Any]]]  # group -> path -> (metadata, data or None)


def load_payload(store: Path) -> tuple[Payload, int]:
    """Every node of a local store, grouped as written: common nodes and one set per partition."""
    import zarr

    root = zarr.open_group(store, mode="r")
    groups: Payload = {"common": {"": (root.metadata, None)}}
    for path, node in root.members(max_depth=None):
        parts = path.split("/")
        key = f"part {parts[1]}" if parts[0] == "parts" and len(parts) > 1 else "common"
        data = node[...] if isinstance(node, zarr.Array) else None
        groups.setdefault(key, {})[path] = (node.metadata, data)
    stored = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    return groups, stored


def _each(fn: Callable[[Any], Any], items: Iterable[Any], threads: int = THREADS) -> list[Any]:
    """``fn`` over ``items`` from ``threads`` threads, each bounded in time."""
    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(fn, item) for item in items]
        return [f.result(timeout=TIMEOUT) for f in futures]


def write_nodes(store: Any, nodes: dict[str, tuple[Any, Any]]) -> None:
    """Create the nodes' hierarchy (their own metadata), then put every chunk concurrently."""
    import zarr

    made = dict(zarr.create_hierarchy(store=store, nodes={p: m for p, (m, _) in nodes.items()}))
    filled = [(made[p], d) for p, (_, d) in nodes.items() if d is not None and d.size]

    def put(item: tuple[Any, Any]) -> None:
        item[0][...] = item[1]

    _each(put, filled)


def read_all(store: Any) -> dict[str, Any]:
    """Every array of the store, read concurrently."""
    import zarr

    members = zarr.open_group(store, mode="r").members(max_depth=None)
    arrays = {p: a for p, a in members if isinstance(a, zarr.Array)}
    return dict(zip(arrays, _each(lambda a: a[...], arrays.values()), strict=True))


def same(payload: Payload, read: dict[str, Any]) -> bool:
    import numpy as np

    want = {p: d for nodes in payload.values() for p, (_, d) in nodes.items() if d is not None}
    return want.keys() == read.keys() and all(
        np.array_equal(want[p], read[p], equal_nan=want[p].dtype.kind in "fc") for p in want
    )


def slash_keys(payload: Payload) -> Payload:
    """The payload with chunk keys ``c/0/0``: icechunk refuses dparallel's ``c.0.0``."""
    from dataclasses import replace

    from zarr.core.chunk_key_encodings import DefaultChunkKeyEncoding

    def fix(meta: Any) -> Any:
        if getattr(meta, "node_type", "") != "array":
            return meta
        return replace(meta, chunk_key_encoding=DefaultChunkKeyEncoding(separator="/"))

    return {g: {p: (fix(m), d) for p, (m, d) in n.items()} for g, n in payload.items()}


# --------------------------------------------------------------------------- writers
def plain_write(store: Any, payload: Payload) -> None:
    for nodes in payload.values():
        write_nodes(store, nodes)


def plain_batched(target: tuple[Any, str], payload: Payload) -> None:
    """zarr encodes each partition into memory; its objects are then put in one concurrent
    batch, chunks before metadata (what dparallel's batch writes do, ``store/_batch.py``)."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync
    from zarr.storage import MemoryStore

    fs, root = target
    for name, nodes in payload.items():
        memory = MemoryStore()
        write_nodes(memory, nodes)
        own = "" if name == "common" else f"parts/{name.split()[1]}/"
        keys = [k for k in sync(_keys(memory)) if k.startswith(own)]
        proto = default_buffer_prototype()
        objects = {k: sync(memory.get(k, proto)).to_bytes() for k in keys}
        chunks = {f"{root}/{k}": v for k, v in objects.items() if not k.endswith("zarr.json")}
        fs.pipe(chunks)
        fs.pipe({f"{root}/{k}": v for k, v in objects.items() if k.endswith("zarr.json")})


def plain_batched_read(target: tuple[Any, str]) -> dict[str, Any]:
    """One listing and one concurrent batch of GETs into memory, then zarr reads from there
    (what dparallel's read cache does, ``store/_read_cache.py``)."""
    from zarr.core.buffer import cpu
    from zarr.storage import MemoryStore

    fs, root = target
    found = fs.cat(fs.find(root))
    objects = {k[len(root) + 1 :]: cpu.Buffer.from_bytes(v) for k, v in found.items()}
    return read_all(MemoryStore(objects))


async def _keys(store: Any) -> list[str]:
    return [k async for k in store.list()]


def icechunk_per_partition(repo: Any, payload: Payload) -> None:
    for name, nodes in payload.items():
        session = repo.writable_session("main")
        write_nodes(session.store, nodes)
        session.commit(name)


def icechunk_one_commit(repo: Any, payload: Payload) -> None:
    session = repo.writable_session("main")
    for nodes in payload.values():
        write_nodes(session.store, nodes)
    session.commit("all partitions")


def icechunk_forked(repo: Any, payload: Payload) -> None:
    """Common nodes committed; one forked session per partition (pickled both ways), merged."""
    session = repo.writable_session("main")
    write_nodes(session.store, payload["common"])
    session.commit("common")
    coordinator = repo.writable_session("main")
    parts = [nodes for name, nodes in payload.items() if name != "common"]
    forks = [pickle.dumps(coordinator.fork()) for _ in parts]

    def worker(item: tuple[bytes, dict[str, tuple[Any, Any]]]) -> bytes:
        fork = pickle.loads(item[0])  # our own session, as a worker gets it
        write_nodes(fork.store, item[1])
        return pickle.dumps(fork)

    # the partitions' workers, two at a time (this machine's cores)
    done = [pickle.loads(b) for b in _each(worker, zip(forks, parts, strict=True), threads=2)]
    coordinator.merge(*done)
    coordinator.commit("all partitions (forked sessions)")


# --------------------------------------------------------------------------- storage
class Storage:
    """Where one variant's store lives: a local folder or an S3 prefix on moto."""

    def __init__(self, work: Path, endpoint: str | None) -> None:
        self.work, self.endpoint = work, endpoint

    @property
    def name(self) -> str:
        return "local" if self.endpoint is None else "S3"

    def plain(self, key: str) -> Any:
        from zarr.storage import FsspecStore, LocalStore

        if self.endpoint is None:
            return LocalStore(self.work / key)
        return FsspecStore.from_url(f"s3://{BUCKET}/{key}")  # endpoint: AWS_ENDPOINT_URL

    def files(self, key: str) -> tuple[Any, str]:
        """The fsspec filesystem and root for putting objects directly."""
        import fsspec

        if self.endpoint is None:
            return fsspec.filesystem("file", auto_mkdir=True), str(self.work / key)
        return fsspec.filesystem("s3"), f"{BUCKET}/{key}"

    def repo(self, key: str) -> Any:
        import icechunk

        if self.endpoint is None:
            storage = icechunk.local_filesystem_storage(str(self.work / key))
        else:
            storage = icechunk.s3_storage(
                bucket=BUCKET,
                prefix=key,
                region="us-east-1",
                endpoint_url=self.endpoint,
                allow_http=True,
                access_key_id="testing",
                secret_access_key="testing",
                force_path_style=True,
            )
        return icechunk.Repository.create(storage)

    def at_rest(self, key: str) -> tuple[int, int]:
        """(bytes, objects) under the variant's folder or prefix."""
        if self.endpoint is None:
            files = [f for f in (self.work / key).rglob("*") if f.is_file()]
            return sum(f.stat().st_size for f in files), len(files)
        import fsspec

        fs = fsspec.filesystem("s3", skip_instance_cache=True)
        found = fs.find(f"{BUCKET}/{key}", detail=True)
        return sum(int(v["size"]) for v in found.values()), len(found)

    def remove(self, key: str) -> None:
        """Delete a variant's store once measured (moto keeps every object in its memory)."""
        if self.endpoint is None:
            shutil.rmtree(self.work / key)
        else:
            import fsspec

            fsspec.filesystem("s3").rm(f"{BUCKET}/{key}", recursive=True)


VARIANTS: list[tuple[str, Callable[[Any, Payload], None] | None]] = [
    ("plain zarr", None),
    ("plain zarr, batched puts", plain_batched),
    ("icechunk, commit per partition", icechunk_per_partition),
    ("icechunk, one commit", icechunk_one_commit),
    ("icechunk, forked sessions", icechunk_forked),
]


def one_variant(storage: Storage, key: str, writer: Any, payload: Payload) -> dict[str, Any]:
    """Write the payload, read it back (compared), count it at rest, delete it."""
    plain = writer is None or writer is plain_batched
    t0 = time.perf_counter()
    if writer is None:
        plain_write(storage.plain(key), payload)
    elif plain:
        writer(storage.files(key), payload)
    else:
        repo = storage.repo(key)
        writer(repo, slash_keys(payload))
    wrote = time.perf_counter() - t0
    t0 = time.perf_counter()
    if writer is plain_batched:
        read = plain_batched_read(storage.files(key))
    elif plain:
        read = read_all(storage.plain(key))
    else:
        read = read_all(repo.readonly_session("main").store)
    seconds = time.perf_counter() - t0
    if not same(payload, read):
        raise SystemExit(f"{storage.name} {key}: what was read differs from the payload")
    size, objects = storage.at_rest(key)
    storage.remove(key)
    return {"write": wrote, "read": seconds, "bytes": size, "objects": objects}


def measure(storage: Storage, payload: Payload, stored: int, repeat: int) -> list[dict[str, Any]]:
    """Every variant ``repeat`` times in turn; the best write and read of each."""
    rows = [{"storage": storage.name, "variant": name} for name, _ in VARIANTS]
    for r in range(repeat):
        for i, (row, (name, writer)) in enumerate(zip(rows, VARIANTS, strict=True)):
            got = one_variant(storage, f"r{r}-v{i}", writer, payload)
            print(f"  {storage.name:5s} {name}: write {got['write']:.2f} s, "
                  f"read {got['read']:.2f} s", flush=True)  # fmt: skip
            for what in ("write", "read"):
                got[what] = min(got[what], row.get(what, got[what]))
            row.update(got)
    for row in rows:
        row["mb_s"] = stored / 1e6 / row["write"]
        row["ratio"] = row["write"] / rows[0]["write"]
    return rows


def transactions(storage: Storage) -> list[str]:
    """What icechunk's transactions give, shown on a small repository on ``storage``."""
    import icechunk
    import numpy as np
    import zarr

    repo = storage.repo("demo.icechunk")
    session = repo.writable_session("main")
    zarr.create_array(session.store, name="done", shape=(4,), dtype="bool", fill_value=False)
    first = session.commit("empty")
    one, two = repo.writable_session("main"), repo.writable_session("main")
    zarr.open_array(one.store, path="done", mode="r+")[0] = True
    zarr.open_array(two.store, path="done", mode="r+")[1] = True
    one.commit("writer one")
    try:
        two.commit("writer two")
        conflict = "second concurrent writer: committed (no conflict detected!)"
    except icechunk.ConflictError as exc:
        conflict = f"second concurrent writer: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    reader = zarr.open_array(repo.readonly_session(snapshot_id=first).store, path="done", mode="r")
    before = reader[...].copy()
    writer = repo.writable_session("main")
    zarr.open_array(writer.store, path="done", mode="r+")[:] = True
    writer.commit("all done")
    after = reader[...]
    latest = zarr.open_array(repo.readonly_session("main").store, path="done", mode="r")[...]
    isolated = np.array_equal(before, after) and not np.array_equal(after, latest)
    return [
        f"{storage.name}: {conflict}",
        f"{storage.name}: reader of snapshot {first[:8]}… saw {after.tolist()} after a new "
        f"commit landed (branch now {latest.tolist()}): isolated={isolated}",
    ]


def featurize_payload(copies: int, work: Path) -> tuple[Payload, int, int]:
    from dparallel.workflow.descriptors_spec import DescriptorsSpec
    from dparallel.workflow.featurize import FeaturizeOptions, featurize_in_process

    data = work / "water.data"
    data.write_text((WATER / "input.data").read_text() * copies)
    descriptors = DescriptorsSpec.model_validate(
        {"acsf": {"n2p2": str(WATER / "input.nn")}, "derivatives": True}
    ).build()
    store = featurize_in_process(
        data, work / "source.zarr", descriptors, FeaturizeOptions(format="n2p2"), n_workers=2
    )
    payload, stored = load_payload(work / "source.zarr")
    return payload, stored, store.n_atoms


def run(
    copies: int, repeat: int, work: Path, endpoint: str
) -> tuple[list[dict[str, Any]], list[str], str]:
    """The payload, then every variant on local storage and on S3; the demonstrations."""
    import boto3
    import icechunk

    boto3.client("s3").create_bucket(Bucket=BUCKET)
    payload, stored, n_atoms = featurize_payload(copies, work)
    heading = (
        f"water ×{copies} with dG/dr: {n_atoms} atoms, {len(payload) - 1} partitions, "
        f"{sum(len(n) for n in payload.values())} nodes, {stored / 1e6:.1f} MB stored; "
        f"icechunk {icechunk.__version__}; best of {repeat}"
    )
    rows: list[dict[str, Any]] = []
    demo: list[str] = []
    for storage in (Storage(work, None), Storage(work, endpoint)):
        rows += measure(storage, payload, stored, repeat)
        demo += transactions(storage)
    return rows, demo, heading


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=25, help="water example copies (25)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each variant, best kept (2)")
    args = parser.parse_args()
    try:
        import icechunk
    except ImportError:
        print('SKIPPED: icechunk not installed (pip install "dparallel[bench]")')
        return 0
    icechunk.set_logs_filter("error")  # not the local storage's warning for each repository
    if not (WATER / "input.data").is_file():
        print(f"SKIPPED: n2p2's water example is missing ({WATER})")
        return 0
    work = Path(tempfile.mkdtemp(prefix="bench-icechunk-"))
    try:
        with s3_environment(work, "moto", key="testing") as (_, endpoint):
            rows, demo, heading = run(args.copies, args.repeat, work, endpoint)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(heading)
    print(
        f"{'storage':7s} {'variant':32s} {'write s':>8s} {'MB/s':>7s} {'×plain':>7s} "
        f"{'read s':>7s} {'MB at rest':>10s} {'objects':>8s}"
    )
    for r in rows:
        print(
            f"{r['storage']:7s} {r['variant']:32s} {r['write']:8.2f} {r['mb_s']:7.1f} "
            f"{r['ratio']:7.2f} {r['read']:7.2f} {r['bytes'] / 1e6:10.1f} {r['objects']:8d}"
        )
    print("×plain: write time over plain zarr's on the same storage")
    for line in demo:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
