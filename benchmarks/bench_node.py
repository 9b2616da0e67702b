"""Use the whole node (issue 23): ACSF kernel atoms/s per engine on n2p2's water example.

    python benchmarks/bench_node.py kernels [--copies 20] [--cpu-atoms 2000] [--rounds 3]
    python benchmarks/bench_node.py kernels --triton-blocks "128,1,4,4;64,1,2,2" [--copies 20]

Engines, each in-process on the same per-element pair lists (neighbour list built once,
not timed; one central element after another, as a featurize task runs them):

- ``numba cpu``: the compiled kernel (:func:`numba_element`), split dG/dr (the store's);
- ``torch cpu``: the vectorised torch backend (the reference), default triplet blocks;
- ``torch cuda``: the same on the GPU with 4M-triplet blocks;
- ``triton cuda``: the Triton kernel (:func:`triton_element`), split dG/dr.

CPU engines time the first ``--cpu-atoms`` atoms, GPU engines the whole batch
(``--copies`` × the 20 water structures, 2,064 atoms per copy). A row without a GPU (or
without triton) says so instead of a number. Runs on CPU alone; on a lent GPU machine
unchanged. The water example comes from ``../shared/n2p2/water`` (``--water`` otherwise).

``--triton-blocks`` times the Triton engine alone once per tile configuration
``BLOCK_C,BLOCK_J,BLOCK_K,num_warps`` (``;``-separated; the kernel's ``BLOCKS`` set for
each), with its agreement with numba, and records them as ``triton_blocks_water``; it needs
a CUDA device (without one it says it skipped).

``--profile ENGINE`` runs one engine's values + dG/dr once under ``torch.profiler`` and
prints where its time goes (self CPU and device time per operation and kernel), and for
``triton cuda`` the wall time of the kernel call alone against the whole engine; recorded
as ``profile_<engine>``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from bench_neighbors import best
from gpu_profile import print_rows, profiled
from gpu_results import record
from water_example import WATER

if TYPE_CHECKING:
    from collections.abc import Callable

REPO = Path(__file__).resolve().parents[1]
WATER_DIRS = [
    WATER,
    REPO / "shared" / "n2p2" / "water",
]


def load_water(water: Path, copies: int):  # noqa: ANN201
    """(ACSF from water's input.nn, StructureBatch of ``copies`` × its structures)."""
    from dparallel.io import open_source
    from dparallel.n2p2 import acsf_from_input_nn
    from dparallel.types import StructureBatch

    source = open_source(water / "input.data", "n2p2", cache_index=False)
    one = source.read(0, len(source))
    return acsf_from_input_nn(str(water / "input.nn")), StructureBatch.concatenate([one] * copies)


def element_inputs(acsf, batch) -> list[tuple]:  # noqa: ANN001
    """Per central element: (plan, vectors, distances, center, neighbour element, n_centres)."""
    from dparallel.kernels.pair_select import element_pairs
    from dparallel.neighbors import neighbor_list

    nb = neighbor_list(batch, acsf.r_cut)
    el_index = acsf.element_index(batch)
    plans = acsf.plans()
    local = np.full(el_index.shape[0], -1, dtype=np.int64)
    counts = []
    for e in range(len(plans)):
        atoms = np.flatnonzero(el_index == e)
        local[atoms] = np.arange(atoms.shape[0])
        counts.append(atoms.shape[0])
    out = []
    for e, plan in enumerate(plans.values()):
        _, center, nbr, vec, dist = element_pairs(
            el_index, local, nb.pair_first, nb.pair_second, nb.vectors, nb.distances, e,
            plan.r_max,
        )  # fmt: skip
        out.append((plan, vec, dist, center, nbr, counts[e]))
    return out


def best_rate(
    run: Callable[[], None], n_atoms: int, rounds: int, sync: Callable[[], None]
) -> float:
    """atoms/s of the fastest of ``rounds`` runs after one warm-up run."""
    run()
    sync()
    return n_atoms / _best_wall(run, sync, rounds)


def engines(derivatives: bool) -> dict[str, tuple[str, Callable[[list[tuple]], None]]]:
    """Engine name → (device, run over the element inputs) (inputs already on the device;
    one input per element, so ``len(inputs)`` is the number of elements)."""
    from dparallel.descriptors._acsf_backends import (
        Backend,
        KernelCall,
        numba_element,
        triton_element,
    )
    from dparallel.descriptors._acsf_torch import torch_element
    from dparallel.kernels.pair_select import ElementPairs

    def numba(inputs: list[tuple]) -> None:
        call = KernelCall(derivatives, split=derivatives)
        for plan, vec, dist, center, nbr, n_c in inputs:
            numba_element(plan, ElementPairs(None, center, nbr, vec, dist), n_c, call)

    def torch_engine(max_triplets: int) -> Callable[[list[tuple]], None]:
        call = KernelCall(derivatives, backend=Backend("torch", max_triplets=max_triplets))

        def run(inputs: list[tuple]) -> None:
            for plan, vec, dist, center, nbr, n_c in inputs:
                torch_element(plan, ElementPairs(None, center, nbr, vec, dist), n_c, call)

        return run

    def triton(inputs: list[tuple]) -> None:
        call = KernelCall(derivatives, split=derivatives)
        for plan, vec, dist, center, nbr, n_c in inputs:
            triton_element(plan, ElementPairs(None, center, nbr, vec, dist), n_c, call)

    return {
        "numba cpu": ("numpy", numba),
        "torch cpu": ("cpu", torch_engine(131072)),
        "torch cuda": ("cuda", torch_engine(4 * 2**20)),
        "triton cuda": ("cuda", triton),
    }


def on_device(inputs: list[tuple], device: str) -> list[tuple]:
    """The element inputs as numpy arrays (``device="numpy"``) or torch tensors there."""
    import torch

    if device == "numpy":
        return inputs
    return [
        (plan, *(torch.from_numpy(a).to(device) for a in (vec, dist, center, nbr)), n_c)
        for plan, vec, dist, center, nbr, n_c in inputs
    ]


def unavailable(name: str, device: str) -> str | None:
    """Why ``name`` cannot run here, or None."""
    import importlib.util

    import torch

    from dparallel.descriptors._acsf_backends import numba_available

    if device == "cuda" and not torch.cuda.is_available():
        return "no GPU"
    if name.startswith("triton") and importlib.util.find_spec("triton") is None:
        return "no triton"
    if name.startswith("numba") and not numba_available():
        return "no numba"
    return None


def kernel_table(
    water: Path, copies: int, cpu_atoms: int, rounds: int, only: list[str] | None = None
) -> None:
    """Print kernel atoms/s per engine, values and values + dG/dr."""
    import torch

    torch.set_num_threads(1)
    acsf, batch = load_water(water, copies)
    counts = np.asarray(batch.atom_counts)
    n_cpu_structures = max(1, int(np.searchsorted(np.cumsum(counts), cpu_atoms)) + 1)
    cpu_batch = batch.select(0, min(n_cpu_structures, batch.n_structures))
    inputs = {"cpu": element_inputs(acsf, cpu_batch), "gpu": element_inputs(acsf, batch)}
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"# python benchmarks/{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}")
    print(
        f"# {os.cpu_count()} CPUs, 1 torch thread; {gpu}; torch {torch.__version__}; "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    print(f"# water: CPU engines {cpu_batch.n_atoms:,} atoms, GPU engines {batch.n_atoms:,} atoms")
    print(f"{'engine':14s} {'values at/s':>14s} {'+ dG/dr at/s':>14s}")
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    figures: dict[str, dict[str, float | str]] = {}
    for name in engines(False):
        if only and name not in only:
            continue
        row = []
        for derivatives in (False, True):
            device, run = engines(derivatives)[name]
            why = unavailable(name, device)
            if why is not None:
                row.append(why)
                continue
            which = inputs["gpu" if device == "cuda" else "cpu"]
            n_atoms = batch.n_atoms if device == "cuda" else cpu_batch.n_atoms
            data = on_device(which, device)
            rate = best_rate(lambda run=run, data=data: run(data), n_atoms, rounds, sync)
            row.append(f"{rate:,.0f}")
            figures.setdefault(name, {})["dgdr" if derivatives else "values"] = rate
        print(f"{name:14s} {row[0]:>14s} {row[1]:>14s}")
    print(
        "kernel only: per-element pair lists prepared beforehand (neighbour list not timed); "
        "dG/dr in the store's split layout for numba and triton, pair-major for torch; "
        "best of rounds."
    )
    agreement = triton_against_numba(inputs["cpu"])
    if agreement is not None:
        worst = f"values {agreement['values']:.2e}, dG/dr {agreement['dgdr']:.2e}"
        print(f"triton against numba, float64, {cpu_batch.n_atoms:,} atoms: max rel. {worst}")
    record(
        "acsf_kernels_water",
        {
            "gpu_atoms": batch.n_atoms,
            "cpu_atoms": cpu_batch.n_atoms,
            "atoms_per_s": figures,
            "triton_vs_numba_max_rel": agreement,
        },
    )


def _max_rel(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| / max |b| (0 for empty arrays)."""
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    return float(np.max(np.abs(a - b))) / scale if scale else 0.0


def triton_against_numba(inputs: list[tuple]) -> dict[str, float] | None:
    """Max relative difference of the Triton kernel's values and split dG/dr from numba's
    (float64, the same pairs), or None where either cannot run."""
    if unavailable("triton", "cuda") or unavailable("numba", "numpy"):
        return None
    from dparallel.descriptors._acsf_backends import KernelCall, numba_element, triton_element
    from dparallel.kernels.pair_select import ElementPairs

    worst = {"values": 0.0, "dgdr": 0.0}
    call = KernelCall(True, split=True)
    for plan, vec, dist, center, nbr, n_c in inputs:
        pairs = ElementPairs(None, center, nbr, vec, dist)
        v_ref, g_ref = numba_element(plan, pairs, n_c, call)
        v_tri, g_tri = triton_element(plan, pairs, n_c, call)
        worst["values"] = max(worst["values"], _max_rel(np.asarray(v_tri), v_ref))
        for f, (_, ref) in (g_ref or {}).items():
            got = np.asarray((g_tri or {})[f][1].dG_dr_split)
            worst["dgdr"] = max(worst["dgdr"], _max_rel(got, np.asarray(ref.dG_dr_split)))
    return worst


def parse_blocks(text: str) -> list[tuple[int, int, int, int]]:
    """``"C,J,K,W;C,J,K,W"`` → tile configurations (each entry a power of 2)."""
    configs = []
    for item in text.split(";"):
        if not item.strip():
            continue
        parts = item.split(",")
        try:
            blocks = tuple(int(x) for x in parts)
        except ValueError:
            blocks = ()
        if len(blocks) != 4 or any(b < 1 or b & (b - 1) for b in blocks):
            raise argparse.ArgumentTypeError(
                f"--triton-blocks entry {item!r}: want BLOCK_C,BLOCK_J,BLOCK_K,num_warps, "
                "four powers of 2, e.g. 128,1,4,4"
            )
        configs.append(blocks)
    return configs  # type: ignore[return-value]


def triton_blocks_table(
    water: Path, copies: int, cpu_atoms: int, rounds: int, configs: list[tuple[int, ...]]
) -> None:
    """Triton atoms/s (values, values + dG/dr) and agreement with numba per tile config."""
    import torch

    if not torch.cuda.is_available() or unavailable("triton", "cuda"):
        print("SKIPPED: --triton-blocks times the Triton kernel on a CUDA device; none here")
        return
    from dparallel.kernels._backends import triton_acsf

    torch.set_num_threads(1)
    acsf, batch = load_water(water, copies)
    counts = np.asarray(batch.atom_counts)
    n_cpu_structures = max(1, int(np.searchsorted(np.cumsum(counts), cpu_atoms)) + 1)
    cpu_batch = batch.select(0, min(n_cpu_structures, batch.n_structures))
    cpu_inputs = element_inputs(acsf, cpu_batch)
    data = on_device(element_inputs(acsf, batch), "cuda")
    print(f"# python benchmarks/{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}")
    gpu = torch.cuda.get_device_name()
    print(f"# {gpu}; torch {torch.__version__}; water {batch.n_atoms:,} atoms on the GPU")
    print(f"{'C,J,K,warps':14s} {'values at/s':>14s} {'+ dG/dr at/s':>14s} {'max rel':>9s}")
    default = triton_acsf.BLOCKS
    rows: list[dict] = []
    try:
        for blocks in configs:
            triton_acsf.BLOCKS = blocks
            row: dict = {"blocks": list(blocks)}
            try:
                for derivatives in (False, True):
                    run = engines(derivatives)["triton cuda"][1]
                    rate = best_rate(lambda run=run: run(data), batch.n_atoms, rounds,
                                     torch.cuda.synchronize)  # fmt: skip
                    row["dgdr" if derivatives else "values"] = rate
                row["triton_vs_numba_max_rel"] = triton_against_numba(cpu_inputs)
            except Exception as exc:  # noqa: BLE001 (one failing tile must not end the sweep)
                row["error"] = f"{type(exc).__name__}: {exc}"[:300]
            rows.append(row)
            name = ",".join(map(str, blocks))
            if "error" in row:
                print(f"{name:14s} failed: {row['error']}")
                continue
            rel = row["triton_vs_numba_max_rel"]
            worst = f"{max(rel.values()):.1e}" if rel else "-"
            print(f"{name:14s} {row['values']:>14,.0f} {row['dgdr']:>14,.0f} {worst:>9s}")
    finally:
        triton_acsf.BLOCKS = default
    record(
        "triton_blocks_water",
        {"gpu_atoms": batch.n_atoms, "default_blocks": list(default), "rows": rows},
    )


def profile_table(water: Path, copies: int, engine: str, top: int = 25) -> None:
    """Where one values + dG/dr run of ``engine`` spends its time, per operation."""
    import torch

    device, run = engines(True)[engine]
    why = unavailable(engine, device)
    if why is not None:
        print(f"SKIPPED: --profile {engine}: {why}")
        return
    torch.set_num_threads(1)
    acsf, batch = load_water(water, copies)
    data = on_device(element_inputs(acsf, batch), device)
    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    run(data)
    sync()
    walls = {"engine_s": _best_wall(lambda: run(data), sync)}
    if engine.startswith("triton"):
        from dparallel.kernels._backends.triton_acsf import triton_acsf_element

        def kernel_only() -> None:
            for plan, vec, dist, center, nbr, n_c in data:
                triton_acsf_element(plan.kernel, vec, dist, center, nbr, n_c, plan.n_el, True)

        walls["kernel_call_s"] = _best_wall(kernel_only, sync)
    rows, device_total = profiled(lambda: run(data), cuda)
    print(f"# --profile {engine}: water {batch.n_atoms:,} atoms, values + dG/dr")
    for name, value in walls.items():
        print(f"# {name} {value:.4f} s ({batch.n_atoms / value:,.0f} atoms/s)")
    print(f"# device time, all kernels {device_total:.1f} ms")
    print_rows(rows)
    record(
        f"profile_{engine.replace(' ', '_')}",
        {"atoms": batch.n_atoms, **walls, "device_ms_total": device_total, "rows": rows},
    )


def _best_wall(run: Callable[[], None], sync: Callable[[], None], rounds: int = 3) -> float:
    """Seconds of the fastest of ``rounds`` calls (already warm), each waited for."""
    return best(lambda: (run(), sync()), rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["kernels"], help="what to measure")
    parser.add_argument("--copies", type=int, default=20, help="water copies for GPU engines")
    parser.add_argument("--cpu-atoms", type=int, default=2000, help="atoms for CPU engines")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--water", type=Path, default=None, help="n2p2 water example folder")
    parser.add_argument("--engines", default="", help="comma-separated engines (default all)")
    parser.add_argument(
        "--triton-blocks", type=parse_blocks, default=None,
        help='time the Triton engine per tile "C,J,K,W;C,J,K,W" instead of the engine table',
    )  # fmt: skip
    parser.add_argument(
        "--profile", default=None, metavar="ENGINE",
        help="profile one engine's values + dG/dr run (e.g. 'triton cuda') instead",
    )  # fmt: skip
    args = parser.parse_args()
    water = args.water or next((d for d in WATER_DIRS if d.is_dir()), None)
    if water is None:
        print(f"SKIPPED: n2p2's water example not found in {[str(d) for d in WATER_DIRS]}")
        return 0
    if args.profile:
        profile_table(water, args.copies, args.profile)
        return 0
    if args.triton_blocks:
        triton_blocks_table(water, args.copies, args.cpu_atoms, args.rounds, args.triton_blocks)
        return 0
    only = [e.strip() for e in args.engines.split(",") if e.strip()] or None
    kernel_table(water, args.copies, args.cpu_atoms, args.rounds, only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
