"""Worker preload for elastic-cluster tests: each computation of a partition appends a line
(``pid first-structure``) to ``DPARALLEL_TEST_COMPUTED``, and each task then waits
``DPARALLEL_TEST_TASK_SLEEP`` seconds, so that workers can join or leave mid-run."""

from __future__ import annotations

import os
import time


def dask_setup(worker) -> None:  # noqa: ANN001 - distributed's preload hook
    import dparallel.workflow.featurize_task as task

    compute, run = task._compute, task.featurize_partition

    def counted(source, batch, indices, *args, **kwargs):  # noqa: ANN001, ANN202
        with open(os.environ["DPARALLEL_TEST_COMPUTED"], "a") as f:
            f.write(f"{os.getpid()} {int(indices[0])}\n")
        return compute(source, batch, indices, *args, **kwargs)

    def slow(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        report = run(*args, **kwargs)
        time.sleep(float(os.environ.get("DPARALLEL_TEST_TASK_SLEEP", "1")))
        return report

    task._compute, task.featurize_partition = counted, slow
