"""tune_allocator: the malloc thresholds Dask's nanny freezes are put back to glibc's own."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from dparallel.cluster.allocator import ENV_MALLOC_TUNE

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="mallopt thresholds are glibc's",
)


def mmapped_bytes_of_8mib_array() -> int:
    """Bytes glibc serves by mmap while one 8 MiB array is alive (mallinfo2 ``hblkhd``)."""
    import ctypes

    import numpy as np

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    mallinfo2 = ctypes.CDLL("libc.so.6").mallinfo2
    mallinfo2.restype = MallInfo2
    before = mallinfo2().hblkhd
    array = np.ones(1 << 20)  # 8 MiB
    during = mallinfo2().hblkhd
    del array
    return int(during - before)


# Run in a fresh interpreter: the thresholds are per process and set once.
_PROBE = textwrap.dedent(
    """
    import json
    from dparallel.cluster.allocator import tune_allocator
    from test_allocator import mmapped_bytes_of_8mib_array as probe

    before = probe()
    tuned = tune_allocator()
    print(json.dumps({"before": before, "tuned": tuned, "after": probe()}))
    """
)
_MIB8 = 8 * 2**20


def _probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    base.pop(ENV_MALLOC_TUNE, None)
    base["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), base.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dask_trim_threshold_is_undone() -> None:
    # What the Dask nanny sets: every allocation above 128 KiB becomes its own mmap ...
    result = _probe(MALLOC_TRIM_THRESHOLD_="65536")
    assert result["before"] >= _MIB8
    # ... and after tuning, an 8 MiB temporary comes from (and returns to) the heap.
    assert result["tuned"] is True
    assert result["after"] == 0


def test_plain_process_and_opt_out_are_left_alone() -> None:
    plain = _probe()
    assert plain["tuned"] is False
    opted_out = _probe(MALLOC_TRIM_THRESHOLD_="65536", **{ENV_MALLOC_TUNE: "0"})
    assert opted_out["tuned"] is False
    assert opted_out["after"] >= _MIB8  # still one mmap per large array


@pytest.mark.integration
@pytest.mark.timeout(180)
def test_local_cluster_worker_gets_tuned() -> None:
    from distributed import Client, LocalCluster

    def in_worker() -> dict:
        from dparallel.cluster import tune_allocator

        env = os.environ.get("MALLOC_TRIM_THRESHOLD_")
        return {"env": env, "tuned": tune_allocator(), "mmapped": mmapped_bytes_of_8mib_array()}

    with (
        LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        result = client.submit(in_worker, pure=False).result(timeout=60)
    assert result["env"] is not None  # the nanny's setting this module exists for
    assert result["tuned"] is True
    assert result["mmapped"] == 0
