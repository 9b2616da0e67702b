"""Write the potential as plain-torch files: torch.export, AOTInductor, TorchScript.

All three routes start from one FX graph: :func:`flatten` runs ``make_fx`` (symbolic
shapes, core ATen decompositions) over :class:`PotentialModule`, which unfolds the
in-graph ``autograd.grad`` into ordinary ATen ops (the backward pass becomes part of the
graph) and turns every data-dependent size (pairs inside the cutoff, triplets, atoms per
element) into an unbacked symbolic size. The weights become attributes of that graph.
``torch.export.export`` cannot capture ``autograd.grad`` directly (it fails with "fake
tensor in the exported program constant's list"); ``make_fx`` first is what NequIP does.

Each route is checked after writing: the file is loaded back with plain torch and run on
probe structures built from the model's own elements; the report gives the largest
deviation from the eager :class:`PotentialModule` or the exact reason of a failure.

Each element's network alone is a ``torch.export`` file too (``atomic_energy_<E>.pt2``:
(n, F_e) unscaled descriptors → (n,) atomic energies, eV, float64 in every dtype as the
reference energies; differentiable after loading).
"""

from __future__ import annotations

import contextlib
import io
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn

from dparallel._files import remove_file, write_serialized, write_with
from dparallel.deploy.potential import INPUT_NAMES, OUTPUT_NAMES, PotentialModule
from dparallel.deploy.probes import Structure, probe_structures
from dparallel.errors import DiskFullError, TrainingError
from dparallel.nn import HDNNP, load_exported_program
from dparallel.nn.files import first_line

if TYPE_CHECKING:
    import os
    from collections.abc import Callable, Iterator, Sequence

log = logging.getLogger(__name__)

#: Route name → file written in MODEL_DIR.
ARTIFACTS = {
    "torch_export": "potential.pt2",
    "aot_inductor": "potential_aoti.pt2",
    "torchscript": "potential.ts",
}
_N_INPUTS = len(INPUT_NAMES)


@dataclass
class RouteReport:
    """Outcome of one route: ``ok``, ``failed`` or ``skipped``, with the reason or the check."""

    status: str
    file: str | None = None
    reason: str | None = None
    seconds: float = 0.0
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    #: the same against the trained float64 model, for an export in another dtype
    max_abs_diff_float64: dict[str, float] = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (empty fields dropped)."""
        out: dict[str, Any] = {"status": self.status}
        if self.file:
            out["file"] = self.file
        if self.reason:
            out["reason"] = self.reason
        if self.status == "ok":
            out["seconds"] = round(self.seconds, 2)
            out["max_abs_diff"] = self.max_abs_diff
            if self.max_abs_diff_float64:
                out["max_abs_diff_float64"] = self.max_abs_diff_float64
        if self.note:
            out["note"] = self.note
        return out


def reason(exc: BaseException) -> str:
    """Exception type and its first line (≤ 300 characters); where it was raised if that is
    all the message says (e.g. a bare ``AssertionError`` inside torch)."""
    import traceback

    text = first_line(exc)
    if text.rstrip().endswith(":"):  # says nothing but a type name
        frames = traceback.extract_tb(exc.__traceback__)
        inner = exc.__cause__ or exc.__context__
        if inner is not None and inner.__traceback__ is not None:
            frames = traceback.extract_tb(inner.__traceback__)
        if frames:
            where = frames[-1]
            path = "/".join(Path(where.filename).parts[-3:])
            text += f" (raised at {path}:{where.lineno} in {where.name})"
    return text


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Silence the tracers (a failed export logs and prints the whole graph) and their
    warnings (TorchScript is deprecated in torch 2.13)."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


# ------------------------------------------------------------------ flatten
def flatten(module: PotentialModule, example: Sequence[Tensor]) -> torch.fx.GraphModule:
    """One FX graph of the module's forward, backward included; weights as attributes.

    The graph takes exactly the seven inputs of :data:`INPUT_NAMES` and returns the four
    outputs of :data:`OUTPUT_NAMES`, with dynamic numbers of atoms and pairs.
    """
    from torch._decomp import core_aten_decompositions
    from torch.fx.experimental.proxy_tensor import make_fx

    state = dict(module.named_parameters()) | dict(module.named_buffers())
    names = list(state)

    class _Functional(nn.Module):
        def forward(self, *args: Tensor) -> tuple[Tensor, ...]:
            weights = dict(zip(names, args[_N_INPUTS:], strict=True))
            return torch.func.functional_call(module, weights, tuple(args[:_N_INPUTS]))

    config = torch.fx.experimental._config
    duck, config.use_duck_shape = config.use_duck_shape, False  # sizes ≠ weight dims
    try:
        weights = [state[n].detach() for n in names]
        gm = make_fx(
            _Functional(),
            decomposition_table=core_aten_decompositions(),  # type: ignore[arg-type]
            tracing_mode="symbolic",
            _allow_non_fake_inputs=True,
        )(*example, *weights)
    finally:
        config.use_duck_shape = duck
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for k, (node, name) in enumerate(zip(placeholders[_N_INPUTS:], names, strict=True)):
        attr = f"w{k}_{name.replace('.', '_')}"
        gm.register_buffer(attr, state[name].detach().clone())
        with gm.graph.inserting_after(node):
            node.replace_all_uses_with(gm.graph.get_attr(attr))
        gm.graph.erase_node(node)
    for node, name in zip(placeholders[:_N_INPUTS], INPUT_NAMES, strict=True):
        node.name = node.target = name
    gm.graph.lint()
    gm.recompile()
    return gm


def _scriptable(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Copy of ``gm`` with ``aten.op.overload`` calls as ``aten.op`` (TorchScript resolves them)."""
    import copy

    out = copy.deepcopy(gm)
    for node in out.graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            node.target = node.target.overloadpacket
    out.recompile()
    return out


# ------------------------------------------------------------------- routes
def _export(gm: torch.fx.GraphModule, example: Sequence[Tensor]) -> torch.export.ExportedProgram:
    from torch.export import Dim

    atoms, pairs = Dim("n_atoms", min=1), Dim("n_pairs", min=0)
    shapes = ({0: atoms}, {0: atoms}, None, None, {0: pairs}, {0: pairs}, {0: pairs})
    return torch.export.export(gm, tuple(example), dynamic_shapes=shapes, strict=False)


def _aoti_compile(program: torch.export.ExportedProgram, path: Path, notes: list[str]) -> None:
    """AOTInductor package; without SIMD if inductor's vectorised C++ codegen fails.

    torch 2.13's CPU codegen raised a bare ``AssertionError`` in a vectorised store for a
    trained Cu model (not for a random one); scalar code (``cpp.simdlen = 0``) compiles.
    """
    try:
        torch._inductor.aoti_compile_and_package(program, package_path=str(path))
    except Exception as exc:  # noqa: BLE001 - retried once, then reported by _route
        notes.append(f"compiled without SIMD: the vectorised build failed with {reason(exc)}")
        log.warning("AOTInductor: %s", notes[-1])
        torch._inductor.aoti_compile_and_package(
            program, package_path=str(path), inductor_configs={"cpp.simdlen": 0}
        )


def _check(
    run: Callable[..., Sequence[Tensor]],
    probes: Sequence[Structure],
    expected: Sequence[Sequence[Tensor]],
) -> dict[str, float]:
    """Largest |artifact − expected| per output over the probes (NaN stress must match NaN)."""
    worst = dict.fromkeys(OUTPUT_NAMES, 0.0)
    for probe, want in zip(probes, expected, strict=True):
        got = run(*probe.inputs)
        for name, g, w in zip(OUTPUT_NAMES, got, want, strict=True):
            g = g.detach().to(w.dtype)
            if g.shape != w.shape or not torch.equal(g.isnan(), w.isnan()):
                raise RuntimeError(f"{probe.name}: {name} has shape/NaN layout {tuple(g.shape)}")
            d = (g - w).nan_to_num(0.0).abs().max().item() if g.numel() else 0.0
            worst[name] = max(worst[name], float(d))
    return worst


def _route(
    path: Path,
    write: Callable[[Path], None],
    load: Callable[[Path], Callable[..., Sequence[Tensor]]],
    probes: Sequence[Structure],
    expected: Sequence[Sequence[Tensor]],
    float64: Sequence[Sequence[Tensor]] = (),
) -> RouteReport:
    """Write one artifact, load it back with plain torch, check it (and, given ``float64``,
    its distance from those outputs); never raises."""
    t0 = time.perf_counter()
    try:
        with _quiet():
            write(path)
            run = load(path)
            diffs = _check(run, probes, expected)
            from64 = _check(run, probes, float64) if float64 else {}
    except DiskFullError:  # not this route's failure: the export stops, in one line
        remove_file(path)
        raise
    except Exception as exc:  # noqa: BLE001 - recorded in the report
        remove_file(path)
        log.warning("%s failed: %s", path.name, reason(exc))
        return RouteReport("failed", reason=reason(exc))
    seconds = time.perf_counter() - t0
    return RouteReport(
        "ok", path.name, seconds=seconds, max_abs_diff=diffs, max_abs_diff_float64=from64
    )


def write_artifacts(
    module: PotentialModule,
    model_dir: Path,
    probes: Sequence[Structure] | None = None,
    aoti: bool = False,
    reference: Callable[[Structure], Sequence[Tensor]] | None = None,
    float64: Callable[[Structure], Sequence[Tensor]] | None = None,
) -> dict[str, RouteReport]:
    """Write every route's file into ``model_dir``; route name → :class:`RouteReport`.

    The graph is traced on the first probe structure (default: :func:`probe_structures` of
    the module's elements) and every file is checked on all of them against ``reference``
    (default: the eager module; ``export_model`` passes the analytic ``DeployedModel``);
    ``float64``: the trained model's outputs, for a module in another dtype (each file's
    distance from them is reported too).
    AOTInductor (a C++ compile of a minute or more) runs only with ``aoti=True``.
    """
    module.eval()
    if probes is None:
        probes = probe_structures(module.elements, module.cutoff, module.dtype)
    expected = [
        tuple(reference(p)) if reference is not None else tuple(module(*p.inputs)) for p in probes
    ]
    trained = [tuple(float64(p)) for p in probes] if float64 is not None else []
    example = probes[0].inputs
    try:
        with _quiet():
            gm = flatten(module, example)
    except Exception as exc:  # noqa: BLE001
        failed = RouteReport("failed", reason=f"make_fx: {reason(exc)}")
        return {name: failed for name in ARTIFACTS}
    reports: dict[str, RouteReport] = {}
    program: list[torch.export.ExportedProgram] = []

    def write_export(path: Path) -> None:
        program.append(_export(gm, example))
        write_serialized(path, lambda f: torch.export.save(program[0], f))

    def route(name: str, write: Callable[[Path], None], load: Callable) -> RouteReport:
        return _route(model_dir / ARTIFACTS[name], write, load, probes, expected, trained)

    reports["torch_export"] = route(
        "torch_export", write_export, lambda p: load_exported_program(p).module()
    )
    if not aoti:
        reports["aot_inductor"] = RouteReport("skipped", reason="not requested (--aoti)")
    elif not program:
        reports["aot_inductor"] = RouteReport("failed", reason="needs the torch.export program")
    else:
        notes: list[str] = []
        reports["aot_inductor"] = route(
            "aot_inductor",
            lambda p: write_with(
                p, lambda tmp: _aoti_compile(program[0], tmp, notes), suffix=".pt2"
            ),
            lambda p: torch._inductor.aoti_load_package(str(p)),
        )
        reports["aot_inductor"].note = notes[0] if notes else None
    reports["torchscript"] = route(
        "torchscript",
        lambda p: write_serialized(
            p, lambda f: torch.jit.save(torch.jit.script(_scriptable(gm)), f)
        ),
        lambda p: torch.jit.load(str(p)),
    )
    return reports


# ------------------------------------------------------- per-element networks
class _AtomicEnergy(nn.Module):
    """One element's descriptor → atomic-energy map (scaling, MLP, scale, reference)."""

    def __init__(self, model: HDNNP, element: str) -> None:
        super().__init__()
        self.model = model
        self.element = element

    def forward(self, values: torch.Tensor) -> torch.Tensor:
        return self.model.atomic_energies({self.element: values})[self.element]


def export_atomic_energies(model: HDNNP, model_dir: str | os.PathLike[str]) -> list[str]:
    """``torch.export`` each element's network to ``MODEL_DIR/atomic_energy_<E>.pt2``;
    returns the file names."""
    from torch.export import Dim

    files = []
    for e in model.elements:
        # the model's dtype (its reference energies, and so the outputs, are float64)
        example = torch.zeros(3, model.n_features[e], dtype=getattr(model, f"shift_{e}").dtype)
        program = torch.export.export(
            _AtomicEnergy(model, e), (example,), dynamic_shapes=({0: Dim(f"n_{e}", min=0)},)
        )
        name = f"atomic_energy_{e}.pt2"
        # called at once, inside this iteration: the late binding B023 warns of cannot bite
        write_serialized(Path(model_dir) / name, lambda f: torch.export.save(program, f))  # noqa: B023
        files.append(name)
    return files


def load_atomic_energies(model_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Element → callable (n, F_e) → (n,) from the ``atomic_energy_<E>.pt2`` files."""
    out = {}
    for path in sorted(Path(model_dir).glob("atomic_energy_*.pt2")):
        element = path.stem.removeprefix("atomic_energy_")
        out[element] = load_exported_program(path).module()
    if not out:
        raise TrainingError(f"no atomic_energy_*.pt2 in {model_dir}; run `dparallel export`")
    return out
