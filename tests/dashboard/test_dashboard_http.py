"""The dparallel pages and JSON route on a running Dask dashboard, and a headless browser."""

from __future__ import annotations

import functools
import json
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from browsershot import find_chromium, screenshot_bokeh_page
from daskprocs import dask_executable, http_get, start, stop, wait_scheduler_file
from distributed import Client

from dparallel.cluster import ClusterSpec, connect
from dparallel.dashboard import (
    PAGE_ROUTES,
    STATUS_ROUTE,
    publish_progress,
    publish_progress_start,
    publish_train_metrics,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

#: Set to a directory to keep the browser screenshots (docs/ was made this way).
SAVE_ENV = "DPARALLEL_SAVE_SCREENSHOTS"

TRAIN = [  # (epoch, split, loss, energy RMSE, force RMSE) as published
    (0, "train", 2.0, 0.30, 0.90),
    (0, "validation", 2.4, 0.35, 1.00),
    (1, "train", 1.1, 0.21, 0.62),
    (1, "validation", 1.4, 0.25, 0.70),
    (2, "train", 0.6, 0.12, 0.41),
    (2, "validation", 0.9, 0.16, 0.52),
    (3, "train", 0.4, 0.08, 0.30),
    (3, "validation", 0.7, 0.11, 0.40),
]


def _publish_train(client: Client, run: str = "train-demo") -> None:
    for epoch, split, loss, e, f in TRAIN:
        assert publish_train_metrics(run, epoch, split, loss, e, f, target=client)


def _wait_json(base: str, predicate, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status, body = http_get(f"{base}/{STATUS_ROUTE}")
        assert status == 200
        data = json.loads(body)
        if predicate(data) or time.monotonic() > deadline:
            return data
        time.sleep(0.2)


def _check_train_json(data: dict, run: str = "train-demo") -> None:
    train = data["train"]
    assert train["run"] == run
    for split in ("train", "validation"):
        rows = [r for r in TRAIN if r[1] == split]
        assert train[split] == {
            "epoch": [r[0] for r in rows],
            "loss": [r[2] for r in rows],
            "energy_rmse": [r[3] for r in rows],
            "force_rmse": [r[4] for r in rows],
        }


@pytest.fixture(scope="module")
def local_dashboard() -> Iterator[tuple[Client, str]]:
    """A 2-worker LocalCluster from connect() with progress (from tasks) and training events."""
    handle = connect(ClusterSpec(n_workers=2, dashboard_address="127.0.0.1:0"))
    try:
        client = handle.client
        assert publish_progress_start("featurize-demo", 6, 60, 600, target=client)
        # Published from inside tasks on the workers (the way featurization reports).
        futures = [
            client.submit(
                functools.partial(publish_progress, "featurize-demo", i, 10, 100, 0.5 + 0.1 * i),
                pure=False,
            )
            for i in range(4)
        ]
        assert all(client.gather(futures))  # True: a worker was found and the event sent
        _publish_train(client)
        base = handle.dashboard_link.rsplit("/", 1)[0]
        assert handle.wait_for_pages(timeout=90)  # loaded when asked for
        pages = handle.dashboard_pages
        assert pages["progress"] == f"{base}/{PAGE_ROUTES[0]}"
        assert pages["training"] == f"{base}/{PAGE_ROUTES[1]}"
        assert pages["json"] == f"{base}/{STATUS_ROUTE}"
        yield client, base
    finally:
        handle.close()


def test_health_pages_and_json_on_local_cluster(local_dashboard) -> None:
    client, base = local_dashboard
    assert http_get(f"{base}/health") == (200, "ok")
    status, body = http_get(f"{base}/{PAGE_ROUTES[0]}")
    assert status == 200 and "<title>dparallel: featurization progress</title>" in body
    status, body = http_get(f"{base}/{PAGE_ROUTES[1]}")
    assert status == 200 and "<title>dparallel: training curves</title>" in body
    # The pages are listed in the dashboard's "More" menu.
    status, body = http_get(f"{base}/status")
    assert status == 200 and PAGE_ROUTES[0] in body and PAGE_ROUTES[1] in body

    data = _wait_json(base, lambda d: (d["progress"] or {}).get("partitions_done") == 4)
    progress = data["progress"]
    assert progress["run"] == "featurize-demo"
    assert (progress["partitions_done"], progress["partitions_total"]) == (4, 6)
    assert (progress["structures_done"], progress["structures_total"]) == (40, 60)
    assert progress["atoms_done"] == 400
    worker_addresses = set(client.scheduler_info(n_workers=-1)["workers"])
    assert set(progress["workers"]) <= worker_addresses
    assert sum(w["partitions"] for w in progress["workers"].values()) == 4
    seconds = sum(w["seconds"] for w in progress["workers"].values())
    assert seconds == pytest.approx(sum(0.5 + 0.1 * i for i in range(4)))
    _check_train_json(data)


def test_preloaded_command_line_scheduler(tmp_path: Path) -> None:
    sfile = tmp_path / "scheduler.json"
    log = tmp_path / "scheduler.log"
    proc = start(
        [
            dask_executable(),
            "scheduler",
            "--preload",
            "dparallel.dashboard",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--dashboard-address",
            "127.0.0.1:0",
            "--scheduler-file",
            str(sfile),
        ],
        log,
    )
    try:
        info = wait_scheduler_file(sfile, proc, log)
        base = f"http://127.0.0.1:{info['services']['dashboard']}"
        assert http_get(f"{base}/health") == (200, "ok")
        assert json.loads(http_get(f"{base}/{STATUS_ROUTE}")[1]) == {
            "progress": None,
            "train": None,
        }
        with Client(info["address"], timeout=30) as client:
            assert publish_progress_start("cli-run", 2, 7, target=client)
            assert publish_progress("cli-run", 1, 3, 30, 1.5, worker="w-x", target=client)
            _publish_train(client, run="cli-train")
            data = _wait_json(
                base,
                lambda d: d["train"] is not None and len(d["train"]["validation"]["epoch"]) == 4,
            )
        assert data["progress"]["partitions_done"] == 1
        assert data["progress"]["structures_done"] == 3
        assert data["progress"]["workers"] == {
            "w-x": {"partitions": 1, "structures": 3, "seconds": 1.5, "structures_per_second": 2.0}
        }
        _check_train_json(data, run="cli-train")
        for route, title in zip(
            PAGE_ROUTES, ("featurization progress", "training curves"), strict=True
        ):
            status, body = http_get(f"{base}/{route}")
            assert status == 200 and f"<title>dparallel: {title}</title>" in body
    finally:
        stop(proc)


def _image_stats(path: Path) -> tuple[int, int, int]:
    """(width, height, number of distinct colours) of a PNG."""
    import matplotlib.image
    import numpy as np

    img = matplotlib.image.imread(path)  # (H, W, C) floats
    flat = (img.reshape(-1, img.shape[-1]) * 255).astype(np.uint8)
    return img.shape[1], img.shape[0], len(np.unique(flat, axis=0))


@pytest.mark.slow
def test_headless_chromium_renders_pages(local_dashboard, tmp_path: Path) -> None:
    browser = find_chromium()
    if browser is None:
        pytest.skip("no chromium binary (apt-get install chromium)")
    _, base = local_dashboard
    save = os.environ.get(SAVE_ENV)
    for route, name in zip(PAGE_ROUTES, ("dashboard.png", "dashboard-training.png"), strict=True):
        out = tmp_path / name
        views = screenshot_bokeh_page(browser, f"{base}/{route}", out)
        assert views > 0
        assert out.stat().st_size > 10_000
        width, height, colours = _image_stats(out)
        assert (width, height) == (1280, 900)
        # A blank or error page has a handful of colours; plots with text and bars have many.
        assert colours > 50, f"{route}: only {colours} colours, page did not render"
        if save:
            shutil.copy(out, Path(save) / name)


_LATER = """
import json, sys, time, urllib.error, urllib.request
from dparallel.cluster import ClusterSpec, connect
from daskprocs import http_get

def status(url):
    try:
        return http_get(url, timeout=90)
    except urllib.error.HTTPError as exc:
        return exc.code, ""

def post(url):
    try:
        return urllib.request.urlopen(urllib.request.Request(url, data=b"x"), timeout=90).status
    except urllib.error.HTTPError as exc:
        return exc.code

with connect(ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")) as handle:
    base = handle.dashboard_link.rsplit("/", 1)[0]
    assert handle.client.submit(sum, [1, 2], pure=False).result(60) == 3  # a worker ran a task
    deadline = time.monotonic() + 5  # the pages used to load on their own by now
    while "bokeh" not in sys.modules and time.monotonic() < deadline:
        time.sleep(0.1)
    before = {
        "bokeh": "bokeh" in sys.modules,
        "health": status(base + "/health")[0],
        "json": status(base + "/dparallel/status.json")[0],
        "post": post(base + "/no-such-page"),
    }
    code, body = status(base + "/individual-dparallel-progress")  # the first page asked for
    after = {
        "bokeh": "bokeh" in sys.modules,
        "progress": code,
        "title": "<title>dparallel: featurization progress</title>" in body,
        "status": status(base + "/status")[0],
        "health": status(base + "/health")[0],
        "missing": status(base + "/no-such-page")[0],
    }
print(json.dumps({"before": before, "after": after}))
"""


def test_local_scheduler_loads_the_pages_when_first_asked_for() -> None:
    """A local cluster serves /health and the JSON route from its start and runs its tasks
    with bokeh not even imported; the first page request loads Dask's and dparallel's pages
    and gets its page (fresh interpreter)."""
    result = _probe(_LATER)
    assert result["before"] == {"bokeh": False, "health": 200, "json": 200, "post": 404}
    assert result["after"] == {
        "bokeh": True, "progress": 200, "title": True, "status": 200, "health": 200,
        "missing": 404,
    }  # fmt: skip


_PLOT_LIST_FIRST = """
import json, sys
from dparallel.cluster import ClusterSpec, connect
from daskprocs import http_get

with connect(ClusterSpec(n_workers=1, dashboard_address="127.0.0.1:0")) as handle:
    base = handle.dashboard_link.rsplit("/", 1)[0]
    assert handle.client.submit(sum, [1, 2], pure=False).result(60) == 3
    before = "bokeh" in sys.modules
    code, body = http_get(base + "/individual-plots.json", timeout=90)
print(json.dumps({"bokeh_before": before, "code": code, "plots": json.loads(body)}))
"""


def test_the_list_of_pages_asked_first_loads_and_lists_them() -> None:
    """dask-labextension polls individual-plots.json: asked before any page, it loads the
    pages and lists dparallel's (distributed's own route answered an empty list)."""
    result = _probe(_PLOT_LIST_FIRST)
    assert result["bokeh_before"] is False and result["code"] == 200
    assert "/individual-dparallel-progress" in result["plots"].values()


def _probe(script: str) -> dict:
    """The JSON that ``script`` prints last, run in a fresh interpreter (tests/ importable)."""
    import subprocess
    import sys

    from daskprocs import child_env

    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=150,
        env=child_env({"PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                      child_env()["PYTHONPATH"]])}),
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])
