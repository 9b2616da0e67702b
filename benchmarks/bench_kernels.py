"""Benchmark envsum / sensesum / featsum backends against hippynn's implementations.

For every size and implementation a fresh subprocess builds random float32 inputs
(unsorted pairs), warms up (numba compilation) on a tiny problem, then runs each pass once
while a thread polls the process RSS (psutil, after ``malloc_trim``), and times repeats
(best of, since the machine may be shared).
Passes: forward of each op, backward of envsum (sensesum + featsum), and the double
backward used in force training (grad of envsum w.r.t. sense with create_graph, then its
backward). Peak = max RSS during the pass minus RSS before it.

Usage::

    PYTHONPATH=$PWD python benchmarks/bench_kernels.py [--sizes small,medium,large]
        [--threads 1] [--repeats 3] [--max-dense-gib 3]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import subprocess
import sys
import threading
import time

SIZES = {  # name: (N atoms, P pairs, ν, F)
    "small": (500, 40_000, 20, 64),
    "medium": (4_000, 320_000, 20, 64),
    "large": (12_000, 960_000, 20, 64),
}
IMPLS = ["torch", "chunked", "numba", "hippynn-pytorch", "hippynn-numba"]
DENSE = {"torch", "hippynn-pytorch"}  # need O(P·ν·F) memory
PASSES = ["envsum", "sensesum", "featsum", "backward", "double-backward"]


def _ops(impl: str):
    """(envsum, sensesum, featsum) with autograd for one implementation."""
    if impl.startswith("hippynn-"):
        from hippynn.custom_kernels.autograd_wrapper import wrap_envops

        if impl == "hippynn-numba":
            from hippynn.custom_kernels import env_numba as m

            return wrap_envops(m.new_envsum, m.new_sensesum, m.new_featsum)
        from hippynn.custom_kernels import env_pytorch as m

        return wrap_envops(m.envsum, m.sensesum, m.featsum)
    import functools

    import dparallel.kernels as k

    return tuple(functools.partial(f, backend=impl) for f in (k.envsum, k.sensesum, k.featsum))


def _inputs(n: int, p: int, nu: int, f: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return dict(
        s=torch.randn(p, nu, generator=g),
        z=torch.randn(n, f, generator=g),
        e=torch.randn(n, nu, f, generator=g),
        pf=torch.randint(0, n, (p,), generator=g),
        ps=torch.randint(0, n, (p,), generator=g),
    )


def _pass(name: str, ops, x):
    """A closure running one pass on inputs x."""
    import torch

    env_op, sense_op, feat_op = ops
    s, z, e, pf, ps = x["s"], x["z"], x["e"], x["pf"], x["ps"]
    if name == "envsum":
        return lambda: env_op(s, z, pf, ps)
    if name == "sensesum":
        return lambda: sense_op(e, z, pf, ps)
    if name == "featsum":
        return lambda: feat_op(e, s, pf, ps)
    sg, zg = s.detach().requires_grad_(), z.detach().requires_grad_()
    if name == "backward":
        return lambda: torch.autograd.grad((env_op(sg, zg, pf, ps) * e).sum(), (sg, zg))

    def double() -> object:
        (gs,) = torch.autograd.grad((env_op(sg, zg, pf, ps) * e).sum(), sg, create_graph=True)
        return torch.autograd.grad((gs * s).sum(), zg)

    return double


def _rss() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def _trim() -> None:
    gc.collect()
    with contextlib.suppress(OSError):  # not glibc
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _measure(fn, repeats: int) -> tuple[float, int]:
    """(best seconds, peak RSS increase in bytes) of fn()."""
    _trim()
    base = _rss()
    peak = [base]
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.0005)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    t0 = time.perf_counter()
    out = fn()
    times = [time.perf_counter() - t0]
    peak[0] = max(peak[0], _rss())
    stop.set()
    th.join()
    del out
    _trim()
    for _ in range(repeats - 1):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    if len(times) > 1:
        times = times[1:]  # the first run shares the CPU with the RSS poller
    return min(times), peak[0] - base


def _child(impl: str, size: str, threads: int, repeats: int, passes: list[str]) -> None:
    import torch

    torch.set_num_threads(threads)
    ops = _ops(impl)
    tiny = _inputs(50, 400, *SIZES[size][2:], seed=1)
    for name in PASSES:  # warm-up (numba compilation, lazy imports)
        _pass(name, ops, tiny)()
    if impl == "hippynn-numba":  # hippynn uses numba's default (all cores): same budget
        import numba

        numba.set_num_threads(threads)
    torch.set_num_threads(threads)  # numba's OpenMP start-up may have reset it
    x = _inputs(*SIZES[size])
    rows = []
    for name in passes:
        sec, peak = _measure(_pass(name, ops, x), repeats)
        rows.append({"impl": impl, "size": size, "pass": name, "sec": sec, "peak": peak})
    print(json.dumps(rows))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="small,medium,large")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--passes", default=",".join(PASSES))
    ap.add_argument("--max-dense-gib", type=float, default=3.0)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        _child(args.child[0], args.child[1], args.threads, args.repeats, args.passes.split(","))
        return 0
    rows, skipped = [], []
    for size in args.sizes.split(","):
        _n, p, nu, f = SIZES[size]
        for impl in args.impls.split(","):
            dense_gib = p * nu * f * 4 / 2**30
            if impl in DENSE and dense_gib > args.max_dense_gib:
                skipped.append(f"{impl} @ {size}: (P,ν,F) temporary {dense_gib:.1f} GiB")
                continue
            cmd = [sys.executable, __file__, "--child", impl, size]
            cmd += ["--threads", str(args.threads), "--repeats", str(args.repeats)]
            cmd += ["--passes", args.passes]
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
            if res.returncode != 0:
                skipped.append(f"{impl} @ {size}: failed: {res.stderr.strip()[-300:]}")
                continue
            rows.extend(json.loads(res.stdout.strip().splitlines()[-1]))
    _table(rows, args)
    for line in skipped:
        print(f"skipped {line}")
    return 0


def _table(rows: list[dict], args: argparse.Namespace) -> None:
    key = {(r["size"], r["impl"], r["pass"]): r for r in rows}
    print(f"threads={args.threads}, float32, unsorted random pairs; time = best of {args.repeats}")
    print(f"{'size (N,P,ν,F)':<31}{'pass':<16}{'impl':<16}{'time ms':>10}{'peak MiB':>10}"
          f"{'t/t_hipnumba':>14}{'mem/mem_torch':>15}")  # fmt: skip
    for r in rows:
        hip = key.get((r["size"], "hippynn-numba", r["pass"]))
        ref = key.get((r["size"], "torch", r["pass"]))
        t_ratio = f"{r['sec'] / hip['sec']:.2f}" if hip else "-"
        m_ratio = f"{max(r['peak'], 1) / max(ref['peak'], 1):.3f}" if ref else "-"
        size = f"{r['size']} {SIZES[r['size']]}"
        print(f"{size:<31}{r['pass']:<16}{r['impl']:<16}{r['sec'] * 1e3:>10.1f}"
              f"{r['peak'] / 2**20:>10.1f}{t_ratio:>14}{m_ratio:>15}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
