"""Worker preload for fault-injection tests: the task of one partition takes memory until
its nanny kills the worker (past ``memory_limit``), as a partition too large for it would.

The partition comes from ``DPARALLEL_TEST_HOG_PARTITION``; every restarted worker process
runs this preload again, so that partition keeps being killed for memory.
"""

from __future__ import annotations

import os
import time


def dask_setup(worker) -> None:  # noqa: ANN001 - distributed's preload hook
    import dparallel.workflow.featurize_task as featurize_module

    target = int(os.environ["DPARALLEL_TEST_HOG_PARTITION"])
    original = featurize_module.featurize_partition

    def hog(source, store_path, p, *args, **kwargs):  # noqa: ANN001, ANN202
        if p == target:
            held = []
            for _ in range(1000):  # 20 GB at most: far past any limit a test sets
                held.append(bytearray(20 << 20))  # zeroed, so its pages are touched
                time.sleep(0.01)
            raise RuntimeError("the nanny did not kill this worker for memory")
        return original(source, store_path, p, *args, **kwargs)

    featurize_module.featurize_partition = hog
