"""Imported by the forkserver of local workers: featurize's warm-up, once, before any fork.

Importing this module runs :func:`dparallel.workflow.featurize_preload.warm_up` (logged and
ignored if it fails: the forkserver must not die of it). Workers forked afterwards start
with the task module imported and the compiled kernels loaded (see
:mod:`dparallel.cluster.warm_workers`). Its name is
:data:`~dparallel.workflow.featurize_preload.FEATURIZE_WARM`; never import it elsewhere:
the import is the work.
"""

from __future__ import annotations

from dparallel.workflow.featurize_preload import warm_up_logged

__all__: list[str] = []

warm_up_logged()
