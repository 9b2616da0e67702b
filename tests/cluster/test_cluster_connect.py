"""connect() against real clusters: LocalCluster, command-line scheduler/workers, TLS."""

from __future__ import annotations

import datetime
import ipaddress
import time
from typing import TYPE_CHECKING

import psutil
import pytest
from daskprocs import child_env, start_scheduler, start_worker, stop
from distributed import Client, LocalCluster

from dparallel.cluster import (
    ClusterSpec,
    TLSSpec,
    connect,
    connect_in_background,
    discard_connection,
    torch_thread_report,
)
from dparallel.errors import ClusterError

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.mark.parametrize("n_threads", [1, 2])
def test_local_cluster_torch_threads_inside_tasks(n_threads: int) -> None:
    # ":0" (any port) must still bind the loopback interface only.
    dashboard = ":0" if n_threads == 1 else "127.0.0.1:0"
    spec = ClusterSpec(n_workers=2, torch_threads=n_threads, dashboard_address=dashboard)
    with connect(spec) as handle:
        assert handle.source == "local"
        assert handle.n_workers == 2
        link = handle.dashboard_link
        assert link is not None and link.startswith("http://127.0.0.1:")
        # The dashboard socket (in this process: LocalCluster's scheduler) listens on loopback.
        port = int(link.split(":")[2].split("/")[0])
        listening = [
            c.laddr.ip
            for c in psutil.Process().net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port
        ]
        assert listening and set(listening) == {"127.0.0.1"}
        results = handle.client.gather(handle.client.map(torch_thread_report, range(6), pure=False))
        # Processes, one thread each: two worker pids, each task on its worker's single thread.
        assert len({r["pid"] for r in results}) == 2
        assert all(r["after"] == n_threads and r["budget"] == n_threads for r in results)
        # The worker environment (OMP/MKL_NUM_THREADS) already gives n threads per task thread.
        assert all(r["before"] == n_threads for r in results)
        workers = handle.client.scheduler_info(n_workers=-1)["workers"]
        assert all(w["nthreads"] == 1 for w in workers.values())
        assert all(w["host"] == "127.0.0.1" for w in workers.values())
    assert handle.client.status == "closed"


def test_explicit_client_wins_and_is_not_closed(monkeypatch) -> None:
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:1")  # would fail if used
    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster,
        Client(cluster) as client,
    ):
        with connect(client=client, scheduler="tcp://127.0.0.1:1") as handle:
            assert handle.source == "client" and handle.client is client
        assert client.status == "running"


def test_unreachable_address_is_a_bounded_cluster_error() -> None:
    spec = ClusterSpec(kind="address", address="tcp://127.0.0.1:9", connect_timeout=2)
    t0 = time.monotonic()
    with pytest.raises(
        ClusterError, match=r"cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"
    ):
        connect(spec)
    assert time.monotonic() - t0 < 20


def test_a_closed_port_is_refused_at_once_not_after_the_connect_timeout() -> None:
    # nothing listening at tcp://127.0.0.1:PORT waited out the 10 s connect timeout before
    # its one-line error; a refused connection is known at once
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    address = f"tcp://127.0.0.1:{port}"
    t0 = time.monotonic()
    with pytest.raises(ClusterError) as refused:
        connect(ClusterSpec(connect_timeout=10), scheduler=address)
    assert time.monotonic() - t0 < 3.0
    assert str(refused.value) == (
        f"cannot reach the Dask scheduler at {address!r}: the connection is refused (nothing "
        "listens there); is it running, and is the address (and TLS setting) right?"
    )
    # the client start given up still runs in its thread: it has not made itself dask's
    # scheduler (a dask computation here would fail with "no Client active")
    import dask

    assert dask.config.get("scheduler", None) is None


def test_connect_in_background_hands_over_the_handle_or_the_error(tmp_path: Path) -> None:
    from dparallel.descriptors import ACSF
    from dparallel.descriptors.descriptor_set import DescriptorSet
    from dparallel.errors import SourceNotFoundError
    from dparallel.workflow.featurize import FeaturizeOptions, featurize

    spec = ClusterSpec(kind="address", address="tcp://127.0.0.1:9", connect_timeout=2)
    failed = connect_in_background(spec=spec)
    with pytest.raises(ClusterError, match="cannot reach the Dask scheduler"):
        failed.result(timeout=60)
    discard_connection(failed)  # nothing to close, nothing raised
    discard_connection(None)
    with LocalCluster(n_workers=1, processes=False, dashboard_address="127.0.0.1:0") as cluster:
        early = connect_in_background(scheduler=cluster.scheduler_address)
        handle = early.result(timeout=60)
        assert handle.source == "scheduler" and handle.client.status == "running"
        discard_connection(early)
        assert handle.client.status == "closed"
        # featurize closes a connection it was handed also when it fails before using it:
        # on a missing source, and on an argument of the wrong type (a TypeError)
        acsf = ACSF.uniform(["H"], r_cut=3.0, radial=[(0.5, 0.0)])
        for descriptors, error in ((DescriptorSet(acsf=acsf), SourceNotFoundError),
                                   (None, TypeError)):  # fmt: skip
            early = connect_in_background(scheduler=cluster.scheduler_address)
            with pytest.raises(error):
                featurize(
                    tmp_path / "missing.xyz",
                    tmp_path / "f.zarr",
                    descriptors,  # type: ignore[arg-type]
                    FeaturizeOptions(connecting=early),
                )
            assert early.result().client.status == "closed"


def test_env_address_beats_spec(monkeypatch) -> None:
    monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", "tcp://127.0.0.1:9")
    spec = ClusterSpec(kind="address", address="tcp://127.0.0.1:7", connect_timeout=1)
    with pytest.raises(ClusterError, match=r"127.0.0.1:9"):
        connect(spec)


def test_command_line_scheduler_via_scheduler_file_and_env(tmp_path: Path, monkeypatch) -> None:
    sched, address = start_scheduler(tmp_path)
    sfile = tmp_path / "scheduler.json"
    info = {"address": address}
    worker = None
    try:
        env = child_env({"DPARALLEL_TORCH_THREADS": "2"})
        worker = start_worker(address, tmp_path / "worker.log", env=env)
        with connect(scheduler_file=sfile) as handle:
            assert handle.source == "scheduler_file"
            link = handle.dashboard_link  # the HTTP server runs even without bokeh pages
            assert link is not None and link.startswith("http://127.0.0.1:")
            handle.client.wait_for_workers(1, timeout=60)
            r = handle.client.submit(torch_thread_report, 0, pure=False).result(timeout=60)
            # The nanny forces OMP_NUM_THREADS=1; the per-task call applies the budget.
            assert r["before"] == 1 and r["after"] == 2
        monkeypatch.setenv("DASK_SCHEDULER_ADDRESS", info["address"])
        with connect(ClusterSpec(torch_threads=1)) as handle:
            assert handle.source == "env"
            assert handle.client.scheduler.address == info["address"]
            # connect() registered the plugin: the worker's budget is now the spec's.
            r = handle.client.submit(torch_thread_report, 1, pure=False).result(timeout=60)
            assert r["after"] == 1
        # that run is over: the shared cluster's worker has its own budget (2) back, for
        # every later client (the plugin stayed registered for good before)
        monkeypatch.delenv("DASK_SCHEDULER_ADDRESS")
        with connect(scheduler=address) as handle:
            r = handle.client.submit(torch_thread_report, 2, pure=False).result(timeout=60)
            assert r["budget"] == 2 and r["after"] == 2
            # once connected it is the default client: dask collections compute on it
            import dask.array as da
            from distributed import default_client

            assert default_client() is handle.client
            assert int(da.ones(10, chunks=5).sum().compute()) == 10
    finally:
        if worker is not None:
            stop(worker)
        stop(sched)


def _write_certs(directory: Path) -> tuple[Path, Path, Path]:
    """A self-signed CA and a certificate for 127.0.0.1/localhost signed by it."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name("dparallel test CA"))
        .issuer_name(name("dparallel test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("localhost"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file, cert_file, key_file = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca_file.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return ca_file, cert_file, key_file


def test_tls_scheduler_worker_client(tmp_path: Path) -> None:
    ca, cert, key = _write_certs(tmp_path)
    tls_args = ["--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key)]
    sched, address = start_scheduler(tmp_path, "--protocol", "tls", *tls_args)
    worker = None
    try:
        assert address.startswith("tls://127.0.0.1:")
        worker = start_worker(address, tmp_path / "worker.log", *tls_args)
        spec = ClusterSpec(
            kind="address", address=address, tls=TLSSpec(ca_file=ca, cert=cert, key=key)
        )
        with connect(spec) as handle:
            handle.client.wait_for_workers(1, timeout=60)
            assert handle.client.submit(pow, 3, 4, pure=False).result(timeout=60) == 81
            workers = handle.client.scheduler_info(n_workers=-1)["workers"]
            assert all(w.startswith("tls://") for w in workers)
        # Without certificates the TLS scheduler cannot be used.
        with pytest.raises(ClusterError, match=f"{address}.*needs TLS but no certificates"):
            connect(ClusterSpec(kind="address", address=address, connect_timeout=2))
        # With certificates but a tcp:// address: refused before trying.
        tcp = address.replace("tls://", "tcp://")
        with pytest.raises(ClusterError, match="plain tcp:// but TLS"):
            connect(ClusterSpec(kind="address", address=tcp, tls=spec.tls))
    finally:
        if worker is not None:
            stop(worker)
        stop(sched)


def test_garbage_is_collected_before_a_cluster_starts() -> None:
    """A Client finalised by the cyclic GC while distributed's LoopRunner starts (holding
    its class-wide lock) deadlocks; connect collects first and pauses the GC meanwhile."""
    import gc

    from distributed.utils import LoopRunner

    finalised_with_lock_held: list[bool] = []

    class Cyclic:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            finalised_with_lock_held.append(LoopRunner._lock.locked())

    gc.disable()  # the garbage waits for connect, as a leaked Client may
    try:
        Cyclic()
        spec = ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")
        with connect(spec) as handle:
            assert not gc.isenabled()  # the caller's setting is kept
            assert handle.client.submit(abs, -1).result(timeout=60) == 1
        assert finalised_with_lock_held == [False]
    finally:
        gc.enable()
    with connect(spec) as handle:
        assert gc.isenabled()


def test_a_scheduler_address_without_a_port_is_one_line(tmp_path):
    with pytest.raises(ClusterError, match=r"'garbage' is not a Dask scheduler address"):
        connect(scheduler="garbage")


def test_a_server_that_never_answers_as_a_scheduler_is_a_bounded_error(monkeypatch):
    """A port that accepts connections and never speaks Dask's protocol (a dashboard, an
    HTTP proxy) held Client() for good, and Ctrl-C with it; now a ClusterError."""
    import socket
    import threading

    from dparallel.cluster import scheduler_client

    monkeypatch.setattr(scheduler_client, "HANDSHAKE_GRACE_S", 1.0)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])  # and never a byte back
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    t0 = time.monotonic()
    try:
        with pytest.raises(ClusterError, match=r"did not answer as a Dask scheduler"):
            connect(ClusterSpec(connect_timeout=2), scheduler=address)
    finally:
        server.close()
        for s in held:
            s.close()
    assert 3.0 <= time.monotonic() - t0 < 30  # its whole timeout: it is no refusal


def test_a_server_that_answers_in_another_protocol_is_named_as_such():
    """An HTTP server or proxy that answers at once (a sandbox's, a firewall's) was "cannot
    connect … (MemoryError: Unable to allocate 3.07 EiB …)": its reply's first bytes read
    as Dask's message length."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    reply = b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n"

    def answer() -> None:
        while True:
            try:
                conn = server.accept()[0]
            except OSError:
                return
            with conn:
                conn.sendall(reply)
                conn.recv(1 << 16)

    threading.Thread(target=answer, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    t0 = time.monotonic()
    try:
        with pytest.raises(ClusterError) as info:
            connect(ClusterSpec(connect_timeout=5), scheduler=address)
    finally:
        server.close()
    text = str(info.value)
    assert text.startswith(f"{address!r} answered, but not as a Dask scheduler"), text
    assert "MemoryError" not in text and "\n" not in text
    assert time.monotonic() - t0 < 20
