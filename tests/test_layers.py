"""The package's imports run one way: the layers table in docs/architecture.md is the rule.

Every ``import`` and ``from … import`` in dparallel (at module level, inside functions and
under ``TYPE_CHECKING`` alike) is an arrow from one module to another. A module may import
its own package and the layers below it; two packages of one layer do not import each
other, and no modules import each other in a circle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dparallel"
DOC = ROOT / "docs" / "architecture.md"


def documented_layers(doc: str) -> dict[str, int]:
    """``{package or top-level module: layer}`` from the doc's ``| layer | modules | … |`` table."""
    layers: dict[str, int] = {}
    for line in doc.splitlines():
        match = re.match(r"^\|\s*(\d+)\s*\|([^|]*)\|", line)
        if match:
            for name in re.findall(r"`([\w./]+)`", match.group(2)):
                layers[name.removesuffix(".py").removesuffix("/")] = int(match.group(1))
    return layers


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, modules: dict[str, Path], root: Path = ROOT) -> set[str]:
    """The dparallel modules one file imports (a ``from pkg import sub`` names ``pkg.sub``)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "dparallel")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[: len(parts) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            if source.split(".")[0] != "dparallel":
                continue
            submodules = {f"{source}.{a.name}" for a in node.names} & modules.keys()
            # ``from pkg import sub`` runs pkg/__init__ too, but the arrow that matters is to sub.
            found.update(submodules or {source})
    return found & modules.keys()


def unit(module: str) -> str:
    """The layer table's name for a module: its top-level package or module (``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def import_graph() -> dict[str, set[str]]:
    modules = all_modules()
    return {name: imports_of(path, modules) - {name} for name, path in modules.items()}


def test_doc_places_every_package_and_top_level_module() -> None:
    layers = documented_layers(DOC.read_text())
    missing = sorted({unit(m) for m in all_modules()} - layers.keys())
    assert not missing, f"docs/architecture.md's layer table does not place: {missing}"


def test_no_import_runs_up_or_sideways() -> None:
    layers = documented_layers(DOC.read_text())
    wrong = []
    for importer, imported in sorted(import_graph().items()):
        for target in sorted(imported):
            a, b = layers[unit(importer)], layers[unit(target)]
            sideways = a == b and unit(importer) != unit(target) and a > 0
            if a < b or sideways:
                wrong.append(f"{importer} (layer {a}) imports {target} (layer {b})")
    assert not wrong, "imports against docs/architecture.md:\n" + "\n".join(wrong)


def test_training_reports_through_its_callback_not_the_dashboard() -> None:
    """dashboard/ is below train/, yet training publishes through the callback it is given."""
    graph = import_graph()
    bad = {
        module: sorted(t for t in imported if unit(t) == "dashboard")
        for module, imported in graph.items()
        if unit(module) == "train"
    }
    assert not {m: t for m, t in bad.items() if t}


def test_the_kalman_update_takes_the_public_objective_not_the_loop() -> None:
    imported = import_graph()["dparallel.train.kalman"]
    assert "dparallel.train.objective" in imported
    assert "dparallel.train.loop" not in imported


MAX_LINES = 600


def test_no_module_does_several_jobs_by_size() -> None:
    """Past ~600 lines a module holds more than one job (STYLE.md): split it at the seam."""
    large = {
        name: n
        for name, path in all_modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not large, f"modules over {MAX_LINES} lines: {large}"


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles() -> None:
    circles = strongly_connected(import_graph())
    assert not circles, f"modules that import each other (directly or round a circle): {circles}"


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": {"a"}, "c": {"c"}}, [["a", "b"]]),
    ],
)
def test_circle_finder(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert strongly_connected(graph) == expected


MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 8
#: Functions outside kernels/ allowed past those limits, each with its reason.
SIZE_EXCEPTIONS = {
    "dparallel.neighbors._small_cells._pairs": (
        "numba-compiled pair search: one loop nest over cells and images whose inputs and "
        "output buffers are plain array arguments (a compiled function takes no objects)"
    ),
}


def oversized_functions(path: Path, module: str) -> dict[str, str]:
    """``module.function`` → what is over the limits, for the functions of ``path``."""
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        a = node.args
        given = [*a.posonlyargs, *a.args, *a.kwonlyargs, *filter(None, (a.vararg, a.kwarg))]
        n_params = sum(p.arg not in ("self", "cls") for p in given)
        n_lines = (node.end_lineno or node.lineno) - node.lineno + 1
        over = [f"{n_lines} lines"] * (n_lines > MAX_FUNCTION_LINES)
        over += [f"{n_params} parameters"] * (n_params > MAX_PARAMETERS)
        if over:
            found[f"{module}.{node.name}"] = ", ".join(over)
    return found


def test_no_function_is_too_long_or_takes_too_many_parameters() -> None:
    """Outside kernels/ (compiled loop nests): at most 80 lines and 8 parameters a function
    (self and cls not counted); past that it does several jobs or needs an options type."""
    found = {}
    for name, path in all_modules().items():
        if unit(name) != "kernels":
            found.update(oversized_functions(path, name))
    over = {k: v for k, v in found.items() if k not in SIZE_EXCEPTIONS}
    assert not over, (
        f"functions over {MAX_FUNCTION_LINES} lines or {MAX_PARAMETERS} parameters: {over}"
    )
    stale = sorted(set(SIZE_EXCEPTIONS) - set(found))
    assert not stale, f"listed exceptions that are no longer over the limits: {stale}"


def test_the_size_rule_counts_lines_and_parameters(tmp_path: Path) -> None:
    """The checker itself: 81 lines or 9 parameters are caught, 80 and 8 (plus self) are not."""
    body = "\n".join(["    x = 1"] * 79)
    code = (
        f"def long():\n{body}\n    return x\n"  # 81 lines
        f"def fits():\n{body}\n"  # 80 lines
        "def wide(a, b, c, d, e, f, g, h, *rest):\n    pass\n"
        "class C:\n    def m(self, a, b, c, d, e, f, g, *, h):\n        pass\n"
    )
    path = tmp_path / "m.py"
    path.write_text(code)
    assert oversized_functions(path, "m") == {"m.long": "81 lines", "m.wide": "9 parameters"}


def test_the_rule_catches_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a kernel importing the training loop is an arrow that runs up."""
    bad = tmp_path / "dparallel" / "kernels" / "bad.py"
    loop = tmp_path / "dparallel" / "train" / "loop.py"
    for path in (bad, loop):
        path.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text("def f():\n    from dparallel.train import loop\n")
    loop.write_text("")
    modules = {"dparallel.kernels.bad": bad, "dparallel.train.loop": loop}
    assert imports_of(bad, modules, tmp_path) == {"dparallel.train.loop"}
    layers = documented_layers(DOC.read_text())
    assert layers[unit("dparallel.kernels.bad")] < layers[unit("dparallel.train.loop")]
