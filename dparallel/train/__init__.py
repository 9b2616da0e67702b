"""dparallel.train: HDNNP training from a featurized store, export and evaluation.

The network itself (:class:`HDNNP`, :func:`load_model`) lives in :mod:`dparallel.nn`
and is re-exported here. See docs/training.md. Names load on first use, so importing one
submodule (``dparallel.train.reporting`` for ``dparallel evaluate``) does not import the
training loop, the store and zarr.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dparallel._lazy import lazy_getattr
from dparallel.nn import HDNNP, load_model, scaling_from_statistics  # re-exported from nn/

if TYPE_CHECKING:
    from dparallel.train.batch import Batch, Geometry, assemble, make_batch
    from dparallel.train.data import BatchPlan, PartitionReader, iterate_batches
    from dparallel.train.loop import TrainResult, train
    from dparallel.train.objective import predict_batch
    from dparallel.train.optimizers import Optimizer, make_optimizer
    from dparallel.train.reporting import EpochCallback, Metrics, evaluate_split
    from dparallel.train.spec import TrainingSpec, parse_training_spec
    from dparallel.train.splits import SplitIndex, build_split_index

__all__ = [
    "HDNNP",
    "Batch",
    "BatchPlan",
    "EpochCallback",
    "Geometry",
    "Metrics",
    "Optimizer",
    "PartitionReader",
    "SplitIndex",
    "TrainResult",
    "TrainingSpec",
    "assemble",
    "build_split_index",
    "evaluate_split",
    "iterate_batches",
    "load_model",
    "make_batch",
    "make_optimizer",
    "parse_training_spec",
    "predict_batch",
    "scaling_from_statistics",
    "train",
]

__getattr__ = lazy_getattr(
    __name__,
    {
        "Batch": "batch",
        "Geometry": "batch",
        "assemble": "batch",
        "make_batch": "batch",
        "BatchPlan": "data",
        "PartitionReader": "data",
        "iterate_batches": "data",
        "SplitIndex": "splits",
        "build_split_index": "splits",
        "TrainResult": "loop",
        "train": "loop",
        "predict_batch": "objective",
        "Optimizer": "optimizers",
        "make_optimizer": "optimizers",
        "EpochCallback": "reporting",
        "Metrics": "reporting",
        "evaluate_split": "reporting",
        "TrainingSpec": "spec",
        "parse_training_spec": "spec",
    },
)
