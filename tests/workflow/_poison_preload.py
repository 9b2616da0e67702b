"""Worker preload for fault-injection tests: the task of one partition kills its worker.

The partition comes from ``DPARALLEL_TEST_POISON_PARTITION``; every restarted worker
process runs this preload again, so that partition keeps killing its worker.
"""

from __future__ import annotations

import os


def dask_setup(worker) -> None:  # noqa: ANN001 - distributed's preload hook
    import dparallel.workflow.featurize_task as featurize_module

    target = int(os.environ["DPARALLEL_TEST_POISON_PARTITION"])
    original = featurize_module.featurize_partition

    def poisoned(source, store_path, p, *args, **kwargs):  # noqa: ANN001, ANN202
        if p == target:
            os._exit(17)  # like a segfault or the OOM killer: no exception, the process is gone
        return original(source, store_path, p, *args, **kwargs)

    featurize_module.featurize_partition = poisoned
