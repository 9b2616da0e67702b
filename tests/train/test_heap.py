"""trim_heap gives freed heap blocks back to the system (the RSS the kernel reports)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

_SCRIPT = """
import numpy as np, psutil
from dparallel.train.heap import trim_heap
proc = psutil.Process()
big = np.ones(16 * 2**20 // 8); del big  # a freed mmapped block raises the mmap threshold
arrays = [np.ones(2**19) for _ in range(64)]  # then 64 blocks of 4 MiB come from the heap
keep = arrays[1::2]  # every other one kept: the freed ones are holes, not the heap's top
del arrays
before = proc.memory_info().rss
trim_heap()
print((before - proc.memory_info().rss) / 2**20)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_freed_blocks_inside_the_heap_go_back_to_the_system() -> None:
    # glibc's defaults: a MALLOC_* variable (a LocalCluster's nanny leaves
    # MALLOC_TRIM_THRESHOLD_ in this process) makes malloc trim by itself on free
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        capture_output=True, text=True, check=True, timeout=60, env=env,
    )  # fmt: skip
    released_mib = float(out.stdout.split()[-1])
    assert released_mib > 0.5 * 32 * 4  # of the 128 MiB freed
