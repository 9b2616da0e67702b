"""dparallel.train: HDNNP training from a featurized store, export and evaluation.

The network itself (:class:`HDNNP`, :func:`load_model`) lives in :mod:`dparallel.nn`
and is re-exported here. See docs/training.md.
"""

from __future__ import annotations

from dparallel.nn import HDNNP, load_model, scaling_from_statistics  # re-exported from nn/
from dparallel.train.data import (
    Batch,
    PartitionReader,
    SplitIndex,
    build_split_index,
    collate,
    iterate_batches,
)
from dparallel.train.defaults import cu_acsf
from dparallel.train.loop import TrainResult, train
from dparallel.train.objective import predict_batch
from dparallel.train.reporting import EpochCallback, Metrics, evaluate_split
from dparallel.train.spec import TrainingSpec, parse_training_spec

__all__ = [
    "HDNNP",
    "Batch",
    "EpochCallback",
    "Metrics",
    "PartitionReader",
    "SplitIndex",
    "TrainResult",
    "TrainingSpec",
    "build_split_index",
    "collate",
    "cu_acsf",
    "evaluate_split",
    "iterate_batches",
    "load_model",
    "parse_training_spec",
    "predict_batch",
    "scaling_from_statistics",
    "train",
]
