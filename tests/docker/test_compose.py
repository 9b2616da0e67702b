"""docker-compose.yml invariants, and its scheduler/worker commands run as local processes.

No Docker engine runs here, so the test executes the compose commands themselves with the
smallest substitutions that a single host needs (documented in docs/deploy.md):

* scheduler: ``+ --host 127.0.0.1 --port 0 --dashboard-address 127.0.0.1:0
  --scheduler-file F`` (random loopback ports instead of the container's fixed ones);
* worker: ``tcp://scheduler:8786`` → the scheduler's real address, ``--dashboard-address
  :8789`` → ``127.0.0.1:0``, ``+ --host 127.0.0.1``;
* healthchecks: ``localhost:8787`` / ``localhost:8789`` → the real dashboard ports;
* working directory ``/data`` (the shared volume) → one temporary directory for all;
* the image's home ``/home/dparallel`` (numba and matplotlib caches) → a temporary directory.

Environment variables come from the compose file unchanged, plus the Dockerfile's cache
locations. The runner starts only after every worker passes the compose healthcheck, as
``depends_on: {worker: {condition: service_healthy}}`` makes Docker do. The services run
as the image's unprivileged user there; here they run as the test's user (the test
interpreter lives under /root, so another user could not even start it).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from importlib import metadata
from pathlib import Path

import pytest
import yaml
from daskprocs import ROOT, child_env, dask_executable, start, stop, wait_scheduler_file
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from dparallel.cluster import connect, torch_thread_report

COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SCHEDULER_ADDRESS = "tcp://scheduler:8786"
IMAGE_HOME = "/home/dparallel"


@pytest.fixture(scope="module")
def services() -> dict[str, dict]:
    with open(COMPOSE) as f:
        compose = yaml.safe_load(f)  # resolves the `<<: *dparallel` merge keys
    return compose["services"]


def _volume_targets(service: dict) -> set[str]:
    targets = set()
    for v in service.get("volumes", []):
        if isinstance(v, str):
            parts = v.split(":")
            targets.add(f"{parts[0]}->{parts[1]}")
        else:
            targets.add(f"{v['source']}->{v['target']}")
    return targets


def test_compose_invariants(services: dict[str, dict]) -> None:
    assert set(services) == {"scheduler", "worker", "runner", "s3", "azure"}
    # The S3-compatible service: its own image, only under its profile, on loopback.
    s3 = services["s3"]
    assert s3["profiles"] == ["s3"] and s3["image"].startswith("motoserver/moto:")
    assert s3["ports"] == ["127.0.0.1:5000:5000"]
    assert "http://localhost:5000/moto-api/" in " ".join(s3["healthcheck"]["test"])
    # Azurite: the version CI installs for the az:// tests, its blob service alone, on loopback.
    azure = services["azure"]
    services = {name: s for name, s in services.items() if name not in ("s3", "azure")}
    ci_version = re.search(r"azurite@([\d.]+)", (ROOT / ".ci" / "run").read_text()).group(1)
    assert azure["profiles"] == ["azure"]
    assert azure["image"] == f"mcr.microsoft.com/azure-storage/azurite:{ci_version}"
    assert azure["command"][0] == "azurite-blob" and "--skipApiVersionCheck" in azure["command"]
    assert azure["ports"] == ["127.0.0.1:10000:10000"]
    assert "http://localhost:10000/" in " ".join(azure["healthcheck"]["test"])
    # One image for every role.
    assert {s["image"] for s in services.values()} == {"dparallel:latest"}
    assert {s["build"]["dockerfile"] for s in services.values()} == {"docker/Dockerfile"}
    # A shared named volume at the same path everywhere, which is also the working directory.
    volumes = {frozenset(_volume_targets(s)) for s in services.values()}
    assert volumes == {frozenset({"dparallel-data->/data"})}
    assert {s["working_dir"] for s in services.values()} == {"/data"}
    # Ports only on the loopback interface.
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: port {port} not on 127.0.0.1"
    assert services["scheduler"]["ports"] == ["127.0.0.1:8786:8786", "127.0.0.1:8787:8787"]
    # Commands.
    assert services["scheduler"]["command"] == [
        "dask",
        "scheduler",
        "--preload",
        "dparallel.dashboard",
    ]
    assert services["worker"]["command"] == [
        "dask", "worker", SCHEDULER_ADDRESS, "--nthreads", "1", "--dashboard-address", ":8789",
    ]  # fmt: skip
    runner = services["runner"]["command"]
    assert runner[:3] == ["dparallel", "run", "workflows/quickstart.yaml"]
    assert runner[3:] == ["--scheduler", SCHEDULER_ADDRESS]
    # Healthchecks on /health (scheduler dashboard, worker HTTP server); workers wait for a
    # healthy scheduler, the runner for healthy workers too; torch threads via the environment.
    assert "http://localhost:8787/health" in " ".join(services["scheduler"]["healthcheck"]["test"])
    assert "http://localhost:8789/health" in " ".join(services["worker"]["healthcheck"]["test"])
    assert services["worker"]["depends_on"]["scheduler"]["condition"] == "service_healthy"
    assert services["runner"]["depends_on"] == {
        "scheduler": {"condition": "service_healthy"},
        "worker": {"condition": "service_healthy"},
    }
    # Nobody switches back to root: the image's user runs every service.
    assert all("user" not in service for service in services.values())
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "DPARALLEL_TORCH_THREADS"):
        assert var in services["worker"]["environment"]
    assert "replicas" in services["worker"]["deploy"]  # scalable: --scale worker=N
    # numba's kernels compiled once for all containers: its cache on the shared volume
    volume = next(v.split(":")[1] for v in services["worker"]["volumes"])
    for name in ("scheduler", "worker", "runner"):
        cache = services[name]["environment"]["NUMBA_CACHE_DIR"]
        assert cache.startswith(volume + "/"), (name, cache)
    # a worker exits when its scheduler goes away: both come back on their own
    assert services["scheduler"]["restart"] == services["worker"]["restart"] == "unless-stopped"


def _pins(text: str) -> dict[str, str]:
    """Canonical name → version of every ``name==version`` in a Dockerfile."""
    pins = re.findall(r"(?<![\w.-])([A-Za-z0-9][\w.-]*)==([\w.+!-]+)", text)
    return {canonicalize_name(n): v for n, v in pins}


def _runtime_requirements(dist_name: str) -> list[Requirement]:
    """The requirements an installed distribution declares, without extras or other markers."""
    return [
        req
        for line in metadata.requires(dist_name) or []
        if (req := Requirement(line)).marker is None or req.marker.evaluate({"extra": ""})
    ]


#: What the image carries of dparallel's ``s3`` extra: its client, not botocore (profiles in
#: ~/.aws; containers take credentials from their environment).
_IMAGE_S3 = {"obstore"}


def _image_requirements() -> list[Requirement]:
    """dparallel's runtime requirements and, from its ``s3`` extra, what the image carries
    (markers dropped)."""
    s3 = [
        Requirement(f"{req.name}{req.specifier}")
        for line in metadata.requires("dparallel") or []
        if (req := Requirement(line)).marker is not None
        and req.marker.evaluate({"extra": "s3"})
        and canonicalize_name(req.name) in _IMAGE_S3
    ]
    assert {canonicalize_name(r.name) for r in s3} == _IMAGE_S3, "the s3 extra changed"
    return [*_runtime_requirements("dparallel"), *s3]


def test_dockerfile_pins_every_runtime_dependency() -> None:
    """Every requirement whose requirer's pinned metadata is known here is pinned and met.

    dparallel's own requirements are always known. Another distribution's are known only where
    the version installed here is its pin: a fresh install picks up whatever was released since
    (pydantic 2.14.4 requires pydantic-core 2.50.5, the pinned 2.14.3 requires 2.50.4), and a
    newer release's requirements say nothing about the pinned one's. The whole pin list, each
    version's own requirements included, is resolved by pip in the next test.
    """
    text = DOCKERFILE.read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "--no-deps torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    assert "RUN pip install --no-deps \\" in text  # nothing unpinned comes in with the list
    pins = _pins(text)
    problems, seen, todo = [], set(), ["dparallel"]
    while todo:
        requirer = todo.pop()
        if requirer in seen:
            continue
        seen.add(requirer)
        declared = _image_requirements() if requirer == "dparallel" else None
        for req in declared or _runtime_requirements(requirer):
            name = canonicalize_name(req.name)
            if name not in pins:
                problems.append(f"{requirer} requires {req}: not pinned")
            elif not req.specifier.contains(pins[name], prereleases=True):
                problems.append(f"{requirer} requires {req}: the pin is {pins[name]}")
            elif Version(metadata.version(name)).public == Version(pins[name]).public:
                todo.append(name)  # installed = pinned: its requirements are the pin's own
    assert not problems, problems
    assert {"torch", "zarr", "distributed", "obstore"} <= seen  # went past dparallel itself


_NETWORK_ERRORS = (
    "NewConnectionError",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Network is unreachable",
)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_dockerfile_pins_resolve_to_exactly_themselves(tmp_path: Path) -> None:
    """pip resolves dparallel's requirements under the pins to exactly the pins.

    That is what ``pip install --no-deps`` of the list followed by ``pip check`` needs in the
    image: the list is consistent (no pinned version refuses another pin), closed (no
    requirement of a pinned version is left unpinned) and has nothing else (no pin that nothing
    requires). pip reads each pinned version's own metadata from the package index (a dry run:
    nothing is installed); skipped only when the index is unreachable.
    """
    pins = _pins(DOCKERFILE.read_text())
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("".join(f"{name}=={version}\n" for name, version in pins.items()))
    report = tmp_path / "report.json"
    argv = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
            "--report", str(report), "-c", str(constraints),
            *(str(req) for req in _image_requirements())]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=280)
    errors = "\n".join(line for line in done.stderr.splitlines() if "Location 'file:" not in line)
    if done.returncode != 0 and any(e in errors for e in _NETWORK_ERRORS):
        pytest.skip(f"package index unreachable: {errors.strip().splitlines()[-1]}")
    assert done.returncode == 0, errors
    chosen = {
        canonicalize_name(item["metadata"]["name"]): Version(item["metadata"]["version"]).public
        for item in json.loads(report.read_text())["install"]
    }  # torch's local "+cpu" dropped: the image takes it from the CPU index
    assert chosen == {name: Version(version).public for name, version in pins.items()}


def test_dockerfile_runs_as_an_unprivileged_user_owning_the_volume() -> None:
    text = DOCKERFILE.read_text()
    user = re.search(r"useradd .*--uid (\d+) .*?(\w+)\n", text)
    assert user and int(user.group(1)) >= 1000
    name = user.group(2)
    users = re.findall(r"^USER (\S+)$", text, flags=re.M)
    assert users == [name]  # set once, never back to root
    after = text[text.index(f"USER {name}") :]
    assert "RUN " not in after  # every install ran before dropping privileges
    assert f"chown -R {name}:{name} /data" in text  # the shared volume is the user's
    assert text.index("chown -R") > text.index("cp -rL /opt/dparallel/workflows /data/workflows")
    assert f"NUMBA_CACHE_DIR={IMAGE_HOME}/" in after and f"MPLCONFIGDIR={IMAGE_HOME}/" in after


def _image_env(home: Path) -> dict[str, str]:
    """The Dockerfile's cache locations, with the image's home replaced by ``home``."""
    found = re.findall(rf"(NUMBA_CACHE_DIR|MPLCONFIGDIR)=({IMAGE_HOME}\S*)", DOCKERFILE.read_text())
    return {k: v.replace(IMAGE_HOME, str(home)) for k, v in found}


def _env(service: dict, image_env: dict[str, str], data: Path) -> dict[str, str]:
    """The service's environment over the image's, the shared volume ``/data`` at ``data``."""
    given = {k: str(v) for k, v in service["environment"].items()}
    given = {k: f"{data}{v[5:]}" if v.startswith("/data/") else v for k, v in given.items()}
    return child_env({**image_env, **given})


def _healthcheck(service: dict, port: int, default_port: int) -> list[str]:
    """The service's compose healthcheck command, pointed at the real port."""
    argv = [
        a.replace(f"localhost:{default_port}", f"localhost:{port}")
        for a in service["healthcheck"]["test"][1:]
    ]
    return [sys.executable if a == "python" else a for a in argv]


def _wait_healthy(argv: list[str], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while subprocess.run(argv, timeout=10, capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, f"{what}: healthcheck never passed"
        time.sleep(0.5)


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_compose_commands_run_as_local_processes(services: dict[str, dict], tmp_path: Path) -> None:
    dask = dask_executable()
    sched_svc, worker_svc, runner_svc = (
        services["scheduler"],
        services["worker"],
        services["runner"],
    )
    image_env = _image_env(tmp_path / "home")  # the image user's cache directories
    sfile = tmp_path / "scheduler.json"
    sched_argv = [
        dask, *sched_svc["command"][1:],
        "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
        "--scheduler-file", str(sfile),
    ]  # fmt: skip
    procs: list[subprocess.Popen] = []
    t_start = time.monotonic()
    try:
        data = tmp_path / "data"  # stands for the shared volume, the services' working_dir
        data.mkdir()
        sched_env = _env(sched_svc, image_env, data)
        sched = start(sched_argv, tmp_path / "scheduler.log", sched_env, cwd=data)
        procs.append(sched)
        info = wait_scheduler_file(sfile, sched, tmp_path / "scheduler.log")
        address, dashboard_port = info["address"], info["services"]["dashboard"]
        _wait_healthy(_healthcheck(sched_svc, dashboard_port, 8787), "scheduler")

        replicas = worker_svc["deploy"]["replicas"]
        assert replicas == 2
        local = {SCHEDULER_ADDRESS: address, ":8789": "127.0.0.1:0"}
        for i in range(replicas):
            argv = [
                dask,
                *[local.get(a, a) for a in worker_svc["command"][1:]],
                "--host",
                "127.0.0.1",
            ]
            log = tmp_path / f"worker{i}.log"
            procs.append(start(argv, log, _env(worker_svc, image_env, data), cwd=data))

        expected_threads = int(worker_svc["environment"]["DPARALLEL_TORCH_THREADS"])
        with connect(scheduler=address) as handle:
            handle.client.wait_for_workers(replicas, timeout=90)
            workers = handle.client.scheduler_info(n_workers=-1)["workers"]
            assert len(workers) == replicas
            assert all(w["nthreads"] == 1 for w in workers.values())
            # depends_on worker: service_healthy — the runner waits for every worker's check.
            for w in workers.values():
                _wait_healthy(_healthcheck(worker_svc, w["services"]["dashboard"], 8789), "worker")
            reports = [
                handle.client.submit(torch_thread_report, w, workers=[w], pure=False)
                for w in workers
            ]
            for r in handle.client.gather(reports):
                assert r["after"] == expected_threads
                assert r["omp_num_threads"] == str(worker_svc["environment"]["OMP_NUM_THREADS"])
            assert len({r["pid"] for r in handle.client.gather(reports)}) == replicas
            # The preload is active on the compose scheduler: dparallel route answers.
            with urllib.request.urlopen(
                f"http://127.0.0.1:{dashboard_port}/dparallel/status.json", timeout=10
            ) as resp:
                assert resp.status == 200

        # The runner service: the very same command against the scheduler, in the shared
        # directory (workflows copied in as the image does), made small by --set overrides.
        shutil.copytree(ROOT / "workflows", data / "workflows")
        argv = [sys.executable, "-m", "dparallel", *runner_svc["command"][1:]]
        argv = [address if a == SCHEDULER_ADDRESS else a for a in argv]
        argv += ["--set", "dataset.generate.n_structures=12", "--set", "training.epochs=2"]
        argv += ["--set", "partitioning.atoms=120", "--set", "training.hidden=[4]", "-q"]
        done = subprocess.run(
            argv, cwd=data, env=_env(runner_svc, image_env, data), capture_output=True, text=True,
            timeout=200,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "stages: dataset ran, featurize ran, train ran, export ran" in done.stdout
        assert (data / "runs" / "quickstart" / "model" / "deployed.pt").exists()
        # Compiled numba kernels went to the shared volume's cache (compose), not into
        # site-packages nor each container's home.
        assert list((data / ".cache" / "numba").rglob("*.nbi"))
        assert not Path(image_env["NUMBA_CACHE_DIR"]).exists()
    finally:
        t_stop = time.monotonic()
        for p in reversed(procs):
            stop(p, timeout=20)
    assert all(p.poll() is not None for p in procs)
    assert time.monotonic() - t_stop < 60
    assert time.monotonic() - t_start < 380
