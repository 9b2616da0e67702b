"""Run in a fresh process by tests/workflow/test_featurize_plan.py: featurize a warm-up
file (imports, numba compilation), then ``BIG`` as one partition; print the task's peak
RSS above the process's memory before it (``ru_maxrss``) and ``partition_bytes``'
estimate, as JSON. ``argv``: warm-up file, big file, units, descriptors JSON, folder."""

from __future__ import annotations

import json
import os
import resource
import sys
from pathlib import Path


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


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
        before, high = _rss(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        featurize_partition(source, store.ref, 0, dset.to_dict())
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    estimate = float(partition_bytes(source, dset, store.plan)[0])
    print(json.dumps({"peak": peak - before, "grew": peak > high, "estimate": estimate}))


if __name__ == "__main__":
    main()
