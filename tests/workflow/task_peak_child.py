"""Run in a fresh process by tests/workflow/test_featurize_plan.py: featurize a warm-up
file (imports, numba compilation), then ``BIG`` as one partition; print the task's peak
RSS above the process's memory before it (VmHWM, reset just before the task: ``ru_maxrss``
keeps an earlier peak, numba compiling the kernels on a cold cache) and ``partition_bytes``'
estimate, as JSON. ``argv``: warm-up file, big file, units, descriptors JSON, folder."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak() -> None:
    """Start VmHWM afresh at the current RSS (Linux: ``5`` into ``clear_refs``)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _peak() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def main() -> None:
    from dparallel.workflow.descriptors_spec import DescriptorsSpec
    from dparallel.workflow.featurize import FeaturizeOptions, prepare_featurize
    from dparallel.workflow.featurize_plan import partition_bytes
    from dparallel.workflow.featurize_task import featurize_partition

    warm, big, units, spec, folder = sys.argv[1:6]
    dset = DescriptorsSpec.model_validate(json.loads(spec)).build_checked("test", units)
    options = FeaturizeOptions(units=units, partition_atoms=10**9)
    for path, name in ((warm, "warm.zarr"), (big, "big.zarr")):
        source, store = prepare_featurize(path, Path(folder) / name, dset, options)
        before = _rss()
        _reset_peak()
        featurize_partition(source, store.ref, 0, dset.to_dict())
    peak = _peak()
    estimate = float(partition_bytes(source, dset, store.plan)[0])
    print(json.dumps({"peak": peak - before, "grew": peak > before, "estimate": estimate}))


if __name__ == "__main__":
    main()
