"""What the forkserver of local workers imports for featurize: the warm-up, once, before
any worker is forked from it (:mod:`dparallel.cluster.forkserver`).

Importing it runs :func:`~dparallel.workflow.featurize_worker_preload.warm_up_logged`
(a failure must not kill the forkserver), then freezes the garbage collector's view of
what it loaded, which the workers inherit. Never import it elsewhere: the import is the work.
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
