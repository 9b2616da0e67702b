"""What the forkserver of local workers imports for featurize: the warm-up, once, before
any worker is forked from it.

Importing this module runs :func:`dparallel.workflow.featurize_worker_preload.warm_up`
(logged and ignored if it fails: the forkserver must not die of it). Workers forked
afterwards start with the task module imported and the compiled kernels loaded (see
:mod:`dparallel.cluster.forkserver`). Its name is
:data:`~dparallel.workflow.featurize_worker_preload.FEATURIZE_FORKSERVER_PRELOAD`; never
import it elsewhere: the import is the work. It ends by freezing the garbage collector's
view of what it loaded (``gc.freeze``), which the workers inherit.
"""

from __future__ import annotations

import gc

from dparallel.workflow.featurize_worker_preload import warm_up_logged

__all__: list[str] = []

warm_up_logged()
# Everything imported and loaded so far lives as long as the workers forked from here: out
# of the cyclic collector's sight, a full collection in a worker (one every few tasks) no
# longer walks the ~10^5 objects of distributed, numba and zarr (docs/workflows.md,
# "Frozen imports"), and the pages stay shared.
gc.freeze()
