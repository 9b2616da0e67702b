"""docker-compose.yml invariants, and its scheduler/worker commands run as local processes.

No Docker engine runs here, so the test executes the compose commands themselves with the
smallest substitutions that a single host needs (documented in docs/deploy.md):

* scheduler: ``+ --host 127.0.0.1 --port 0 --dashboard-address 127.0.0.1:0
  --scheduler-file F`` (random loopback ports instead of the container's fixed ones);
* worker: ``tcp://scheduler:8786`` → the scheduler's real address, ``+ --host 127.0.0.1
  --dashboard-address 127.0.0.1:0``;
* healthcheck: ``localhost:8787`` → the dashboard's real port;
* working directory ``/data`` (the shared volume) → one temporary directory for all.

Environment variables come from the compose file unchanged.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.request
from typing import TYPE_CHECKING

import pytest
import yaml
from daskprocs import ROOT, child_env, dask_executable, start, stop, wait_scheduler_file

from dparallel.cluster import connect, torch_thread_report

if TYPE_CHECKING:
    from pathlib import Path

COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
SCHEDULER_ADDRESS = "tcp://scheduler:8786"


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
    assert set(services) == {"scheduler", "worker", "runner"}
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
    assert services["worker"]["command"] == ["dask", "worker", SCHEDULER_ADDRESS, "--nthreads", "1"]
    runner = services["runner"]["command"]
    assert runner[:3] == ["dparallel", "run", "workflows/quickstart.yaml"]
    assert runner[3:] == ["--scheduler", SCHEDULER_ADDRESS]
    # Healthcheck on /health; workers wait for it; torch threads through the environment.
    assert "http://localhost:8787/health" in " ".join(services["scheduler"]["healthcheck"]["test"])
    assert services["worker"]["depends_on"]["scheduler"]["condition"] == "service_healthy"
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "DPARALLEL_TORCH_THREADS"):
        assert var in services["worker"]["environment"]
    assert "replicas" in services["worker"]["deploy"]  # scalable: --scale worker=N


def test_dockerfile_pins() -> None:
    text = DOCKERFILE.read_text()
    assert text.startswith("#") and "FROM python:3.11-slim" in text
    assert "torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in text
    import dask
    import distributed

    # The image's Dask must equal the one the tests (and clients) run.
    assert f"dask=={dask.__version__}" in text
    assert f"distributed=={distributed.__version__}" in text


def _env(service: dict) -> dict[str, str]:
    return child_env({k: str(v) for k, v in service.get("environment", {}).items()})


@pytest.mark.integration
@pytest.mark.timeout(420)
def test_compose_commands_run_as_local_processes(services: dict[str, dict], tmp_path: Path) -> None:
    dask = dask_executable()
    sched_svc, worker_svc = services["scheduler"], services["worker"]
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
        sched = start(sched_argv, tmp_path / "scheduler.log", _env(sched_svc), cwd=data)
        procs.append(sched)
        info = wait_scheduler_file(sfile, sched, tmp_path / "scheduler.log")
        address, dashboard_port = info["address"], info["services"]["dashboard"]

        # The compose healthcheck, with the real dashboard port.
        health = [
            a.replace("localhost:8787", f"localhost:{dashboard_port}")
            for a in sched_svc["healthcheck"]["test"][1:]
        ]
        health = [sys.executable if a == "python" else a for a in health]
        deadline = time.monotonic() + 30
        while subprocess.run(health, timeout=10, capture_output=True).returncode != 0:
            assert time.monotonic() < deadline, "healthcheck never passed"
            time.sleep(0.5)

        replicas = worker_svc["deploy"]["replicas"]
        assert replicas == 2
        for i in range(replicas):
            argv = [
                dask,
                *[address if a == SCHEDULER_ADDRESS else a for a in worker_svc["command"][1:]],
            ]
            argv += ["--host", "127.0.0.1", "--dashboard-address", "127.0.0.1:0"]
            procs.append(start(argv, tmp_path / f"worker{i}.log", _env(worker_svc), cwd=data))

        expected_threads = int(worker_svc["environment"]["DPARALLEL_TORCH_THREADS"])
        with connect(scheduler=address) as handle:
            handle.client.wait_for_workers(replicas, timeout=90)
            workers = handle.client.scheduler_info(n_workers=-1)["workers"]
            assert len(workers) == replicas
            assert all(w["nthreads"] == 1 for w in workers.values())
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
        runner = services["runner"]["command"]
        argv = [sys.executable, "-m", "dparallel", *runner[1:]]
        argv = [address if a == SCHEDULER_ADDRESS else a for a in argv]
        argv += ["--set", "dataset.generate.n_structures=12", "--set", "training.epochs=2"]
        argv += ["--set", "partitioning.atoms=120", "--set", "training.hidden=[4]", "-q"]
        done = subprocess.run(
            argv, cwd=data, env=_env(services["runner"]), capture_output=True, text=True,
            timeout=150,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        assert "stages: dataset ran, featurize ran, train ran, export ran" in done.stdout
        assert (data / "runs" / "quickstart" / "model" / "deployed.pt").exists()
    finally:
        t_stop = time.monotonic()
        for p in reversed(procs):
            stop(p, timeout=20)
    assert all(p.poll() is not None for p in procs)
    assert time.monotonic() - t_stop < 60
    assert time.monotonic() - t_start < 380
