"""A featurize task's memory by stage against the planner's estimate (docs/store-format.md).

Run: ``PYTHONPATH=. python benchmarks/bench_task_memory.py CASE ATOMS [--no-derivatives]
[--tracemalloc]``, CASE one of ``cu`` (an fcc Cu supercell, the quickstart ACSF), ``water``
(n2p2's water example's frames repeated, its input.nn), ``molecules`` (small organic
molecules in vacuum, ACSF of H, C, N, O), ``nsum`` (the Cu cell, HIP-NN neighbor sums).
Each case runs in a fresh subprocess: it featurizes a warm-up partition (imports, numba
compilation), then one partition of about ATOMS atoms (``featurize_partition``), sampling
its RSS every 2 ms per stage (neighbour list, descriptors, statistics, write); prints one
JSON line: the peak above the RSS before the task (bytes per atom, per stage and overall),
``ru_maxrss``, CPU seconds, and ``structure_bytes``' estimate per atom. ``--tracemalloc``
adds each stage's traced numpy peak (slower). ``all`` runs every case at ATOMS with and
without dG/dr, one subprocess each, with a Dask worker's malloc settings
(``NANNY_ENVIRON``). n2p2's water example is found as the tests find it (``N2P2_WATER``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Iterator

#: n2p2's water example, as tests/conftest.py finds it.
WATER = Path(
    os.environ.get("N2P2_WATER", Path(__file__).resolve().parents[2] / "shared/n2p2/water")
)
PAGE = os.sysconf("SC_PAGE_SIZE")
#: What Dask's nanny starts a worker with that changes its memory (``dparallel.cluster.
#: allocator``: the task then sets glibc's converged thresholds, fixed).
NANNY_ENVIRON = {"MALLOC_TRIM_THRESHOLD_": "65536"}


def rss() -> int:
    """This process's resident set now (bytes)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Sampler:
    """RSS sampled every 2 ms in a thread; :meth:`stage` records each stage's peak."""

    def __init__(self, trace: bool) -> None:
        self.peaks: dict[str, int] = {}  # the stages running now: their peak so far
        self.trace = trace
        self.stages: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            now = rss()
            for name in list(self.peaks):
                self.peaks[name] = max(self.peaks[name], now)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.peaks[name] = before = rss()
        if self.trace:
            tracemalloc.reset_peak()
        cpu = time.process_time()
        try:
            yield
        finally:
            peak = max(self.peaks.pop(name), rss())
            entry = self.stages.setdefault(name, {"peak": 0, "kept": 0, "cpu": 0.0})
            entry["peak"] = max(entry["peak"], peak)
            entry["kept"] = rss()
            entry["cpu"] += time.process_time() - cpu
            entry["before"] = before
            if self.trace:
                entry["traced_peak"] = tracemalloc.get_traced_memory()[1]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def _write_case(case: str, atoms: int, warm: Path, path: Path) -> str:
    """A small warm-up file and the case's file of about ``atoms`` atoms; their units."""
    import ase.io
    from ase.build import bulk, molecule

    if case in ("cu", "nsum"):
        n = max(1, round((atoms / 4) ** (1 / 3)))
        big = bulk("Cu", "fcc", a=3.6, cubic=True) * (n, n, n)
        big.rattle(0.05, seed=0)
        ase.io.write(warm, bulk("Cu", "fcc", a=3.6, cubic=True) * (3, 3, 3), format="extxyz")
        ase.io.write(path, big, format="extxyz")
        return "ase"
    if case == "molecules":
        names = ["CH4", "H2O", "CO2", "C6H6", "CH3OH", "C2H6", "H2CO", "CH3CH2OH", "CH3NO2"]
        frames: list[Any] = []
        while sum(len(m) for m in frames) < atoms:
            m = molecule(names[len(frames) % len(names)])
            m.rattle(0.02, seed=len(frames))
            frames.append(m)
        for m in frames:
            m.center(vacuum=6.0)
            m.pbc = False
        ase.io.write(warm, frames[: len(names)], format="extxyz")
        ase.io.write(path, frames, format="extxyz")
        return "ase"
    text = (WATER / "input.data").read_text()
    blocks = ["begin" + b for b in text.split("begin")[1:]]
    repeat = max(1, round(atoms / (text.count("\natom") / len(blocks))))
    warm.write_text(blocks[0])
    path.write_text("".join(blocks[k % len(blocks)] for k in range(repeat)))
    return "bohr-hartree"


def _descriptors(case: str, derivatives: bool) -> Any:
    from dparallel.workflow.descriptors_spec import DescriptorsSpec

    if case == "water":
        spec: dict[str, Any] = {"acsf": {"n2p2": str(WATER / "input.nn")}}
        units = "bohr-hartree"
    elif case == "nsum":
        spec = {"neighbor_sum": {"elements": ["Cu"], "r_cut": 5.0, "r_min": 2.2}}
        units = "ase"
    else:
        import yaml

        here = Path(__file__).resolve().parents[1] / "dparallel/workflow/quickstart.yaml"
        acsf = yaml.safe_load(here.read_text())["descriptors"]["acsf"]
        if case == "molecules":
            acsf = {**acsf, "elements": ["H", "C", "N", "O"]}
        spec, units = {"acsf": acsf}, "ase"
    data = {**spec, "derivatives": derivatives}
    return DescriptorsSpec.model_validate(data).build_checked("bench", data_units=units)


def measure(case: str, atoms: int, derivatives: bool, trace: bool) -> dict[str, Any]:
    """One case in this process (call in a fresh one)."""
    import dparallel.workflow.featurize_task as task
    from dparallel.store.plan import WORKER_BYTES
    from dparallel.workflow.featurize import FeaturizeOptions, prepare_featurize
    from dparallel.workflow.featurize_plan import structure_bytes

    tmp = Path(tempfile.mkdtemp(prefix="taskmem"))
    name = "input.data" if case == "water" else "s.extxyz"
    (tmp / "warm").mkdir()
    units = _write_case(case, atoms, tmp / "warm" / name, tmp / name)
    dset = _descriptors(case, derivatives)
    opts = FeaturizeOptions(units=units, partition_atoms=10**9, overwrite=True)
    source, store = prepare_featurize(tmp / "warm" / name, tmp / "warm.zarr", dset, opts)
    task.featurize_partition(source, store.ref, 0, dset.to_dict())  # imports, compilation
    source, store = prepare_featurize(tmp / name, tmp / "store.zarr", dset, opts)
    estimate = float(structure_bytes(source, dset).sum())
    sampler = Sampler(trace)
    wrapped = {
        "neighbors": ("neighbor_list", task),
        "descriptors": ("task_descriptors", task),
        "statistics": ("statistics_of", task),
    }
    for stage, (name, module) in wrapped.items():
        inner = getattr(module, name)

        def outer(*a: Any, _inner: Any = inner, _stage: str = stage, **k: Any) -> Any:
            with sampler.stage(_stage):
                return _inner(*a, **k)

        setattr(module, name, outer)
    from dparallel.store._writes import StoreWrites as Store

    write = Store.write_features

    def write_features(self: Any, *a: Any, **k: Any) -> Any:
        with sampler.stage("write"):
            return write(self, *a, **k)

    Store.write_features = write_features  # type: ignore[method-assign]
    if trace:
        tracemalloc.start()
    base = rss()
    cpu = time.process_time()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with sampler.stage("task"):
        report = task.featurize_partition(source, store.ref, 0, dset.to_dict())
    sampler.close()
    n = int(report["n_atoms"])
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = {
        "case": case,
        "derivatives": derivatives,
        "atoms": n,
        "structures": int(report["n_structures"]),
        "base_GB": round(base / 1e9, 3),
        "worker_bytes_GB": WORKER_BYTES / 1e9,
        "peak_kB_atom": round((sampler.stages["task"]["peak"] - base) / n / 1e3, 2),
        "estimate_kB_atom": round(estimate / n / 1e3, 2),
        "maxrss_kB_atom": round((maxrss - base) / n / 1e3, 2) if maxrss > maxrss_before else None,
        "cpu_s": round(time.process_time() - cpu, 2),
    }
    for stage, e in sampler.stages.items():
        if stage == "task":
            continue
        out[stage] = {
            "peak_kB_atom": round((e["peak"] - base) / n / 1e3, 2),
            "kept_kB_atom": round((e["kept"] - base) / n / 1e3, 2),
            "cpu_s": round(e["cpu"], 2),
        }
        if "traced_peak" in e:
            out[stage]["traced_kB_atom"] = round(e["traced_peak"] / n / 1e3, 2)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("case", choices=["cu", "water", "molecules", "nsum", "all"])
    p.add_argument("atoms", type=int)
    p.add_argument("--no-derivatives", action="store_true")
    p.add_argument("--tracemalloc", action="store_true")
    a = p.parse_args()
    if a.case != "all":
        print(json.dumps(measure(a.case, a.atoms, not a.no_derivatives, a.tracemalloc)))
        return
    for case in ("cu", "water", "molecules", "nsum"):
        for flag in ([], ["--no-derivatives"]):
            args = [sys.executable, __file__, case, str(a.atoms), *flag]
            args += ["--tracemalloc"] if a.tracemalloc else []
            subprocess.run(args, check=False, env={**os.environ, **NANNY_ENVIRON})


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
