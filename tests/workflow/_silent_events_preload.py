"""Worker preload: the worker drops the dashboard progress events its tasks log, as one
whose connection to the scheduler is closing (retired, scaled down) drops them:
distributed's ``batched_send`` discards a message it cannot send, silently."""

from __future__ import annotations


def dask_setup(worker) -> None:  # noqa: ANN001 - distributed's preload hook
    from dparallel.dashboard.events import TOPIC_PROGRESS

    log_event = worker.log_event

    def dropping(topic, msg) -> None:  # noqa: ANN001
        if topic != TOPIC_PROGRESS:
            log_event(topic, msg)

    worker.log_event = dropping
