"""dparallel.train: HDNNP training from a featurized store, export and evaluation.

See docs/training.md.
"""

from __future__ import annotations

from dparallel.train.data import (
    Batch,
    PartitionReader,
    SplitIndex,
    build_split_index,
    collate,
    iterate_batches,
)
from dparallel.train.defaults import cu_acsf
from dparallel.train.loop import (
    Metrics,
    TrainResult,
    evaluate_split,
    load_model,
    predict_batch,
    train,
)
from dparallel.train.model import HDNNP, scaling_from_statistics
from dparallel.train.spec import TrainingSpec, parse_training_spec

__all__ = [
    "HDNNP",
    "Batch",
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
