"""The docs name what exists: sections they point to, command-line options, environment
variables and workflow keys (and every one of those the code has is documented)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [ROOT / "README.md", *DOCS, *sorted((ROOT / "workflows").glob("*.yaml"))]
SOURCES = [p for d in ("dparallel", "tests", "benchmarks") for p in (ROOT / d).rglob("*.py")]


def _norm(title: str) -> str:
    return " ".join(title.replace("`", "").split()).rstrip(".").lower()


def _titles(doc: Path) -> list[str]:
    """Headings, bold run-in titles (``**Why few files.**``) and bullet labels (``* Memory:``)."""
    text = doc.read_text()
    found = [line.lstrip("#") for line in text.splitlines() if line.startswith("#")]
    # bold at a paragraph's or a bullet's start (elsewhere a `**kwargs` would pair wrongly)
    found += re.findall(r"^\s*(?:[*-]\s+)?\*\*(.+?)\*\*", text, re.M | re.S)
    found += re.findall(r"^\s*[*-] ([A-Z][\w ]+):", text, re.M)
    return [_norm(t) for t in found]


def test_every_section_a_reference_names_exists() -> None:
    # three pointed at titles that never existed: "Deployment", "Default descriptors",
    # "Reaching n2p2's accuracy with Adam"
    titles = {doc.name: _titles(doc) for doc in DOCS}
    broken = []
    for path in PAGES + SOURCES:
        text = path.read_text()
        for m in re.finditer(r"docs/([\w-]+\.md),?\s+\"([^\"]+)\"", text):
            doc, title = m.groups()
            if not any(t.startswith(_norm(title)) for t in titles.get(doc, [])):
                broken.append(f"{path.relative_to(ROOT)}: {doc}, {title!r}")
        for m in re.finditer(r"docs/([\w-]+\.(?:md|png))", text):
            if not (ROOT / "docs" / m.group(1)).exists():
                broken.append(f"{path.relative_to(ROOT)}: no docs/{m.group(1)}")
    assert not broken, broken


def _options() -> dict[str, set[str]]:
    from dparallel.cli.main import build_parser

    (sub,) = (a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {
        name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()
    }


def test_every_option_the_docs_give_a_command_exists() -> None:
    options = _options()
    unknown = []
    for path in PAGES:
        text = re.sub(r"\\\n\s*", " ", path.read_text())  # shell line continuations
        for m in re.finditer(r"dparallel (\w+)([^\n`|;]*)", text):
            for option in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", m.group(2)):
                if m.group(1) in options and option not in options[m.group(1)] | {"-v"}:
                    unknown.append(f"{path.name}: dparallel {m.group(1)} {option}")
    assert not unknown, unknown


def _variables(paths: list[Path], pattern: str) -> set[str]:
    return {v for p in paths for v in re.findall(pattern, p.read_text())}


def test_every_environment_variable_is_documented_and_every_documented_one_is_read() -> None:
    quoted = r"[\"'](DPARALLEL_[A-Z0-9_]+)[\"']"  # os.environ[...], env_number(...)
    package = [p for p in SOURCES if p.is_relative_to(ROOT / "dparallel")]
    documented = _variables(PAGES, r"\b(DPARALLEL_[A-Z0-9_]+)")
    assert _variables(package, quoted) - documented == set(), "read by dparallel, in no doc"
    assert documented - _variables(SOURCES, quoted) == set(), "documented, read by nothing"


def _yaml_blocks(doc: Path, first_key: str) -> list[dict]:
    blocks = re.findall(r"```yaml\n(.*?)```", doc.read_text(), re.S)
    return [d for d in map(yaml.safe_load, blocks) if isinstance(d, dict) and first_key in d]


def _keys(model: type, prefix: str = "") -> set[str]:
    from pydantic import BaseModel

    keys = set()
    for name, field in model.model_fields.items():
        keys.add(prefix + name)
        for kind in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                keys |= _keys(kind, f"{prefix}{name}.")
    return keys


def _flat(data: dict, prefix: str = "") -> set[str]:
    keys = set()
    for name, value in data.items():
        keys.add(prefix + name)
        if isinstance(value, dict) and name != "storage_options":
            keys |= _flat(value, f"{prefix}{name}.")
    return keys


def test_deploy_md_cluster_section_is_every_cluster_key_and_valid() -> None:
    from dparallel.cluster import ClusterSpec

    block = max(
        _yaml_blocks(ROOT / "docs" / "deploy.md", "cluster"), key=lambda b: len(b["cluster"])
    )
    ClusterSpec.model_validate(block["cluster"])  # no key there that the spec lacks
    shown = _flat(block["cluster"]) | {"tls.ca_file", "tls.cert", "tls.key"}  # tls: {…}
    assert _keys(ClusterSpec) <= shown, _keys(ClusterSpec) - shown


@pytest.mark.parametrize("section", ["dataset", "partitioning", "store", "output"])
def test_quickstart_yaml_annotates_every_key_of_the_sections_no_other_doc_has(section) -> None:
    from dparallel.workflow.spec import WorkflowSpec

    quickstart = yaml.safe_load((ROOT / "workflows" / "quickstart.yaml").read_text())
    model = WorkflowSpec.model_fields[section].annotation
    model = next(k for k in (model, *getattr(model, "__args__", ())) if hasattr(k, "model_fields"))
    assert _keys(model) <= _flat(quickstart[section]), _keys(model) - _flat(quickstart[section])


def test_workflows_md_names_every_section() -> None:
    from dparallel.workflow.spec import WorkflowSpec

    text = (ROOT / "docs" / "workflows.md").read_text()
    named = set(re.findall(r"`(\w+)`", re.search(r"with the sections (.*?);", text, re.S)[1]))
    assert set(WorkflowSpec.model_fields) - {"name"} <= named


def test_every_benchmark_and_option_the_docs_give_exists() -> None:
    unknown = []
    for path in PAGES:
        text = re.sub(r"\\\n\s*", " ", path.read_text())
        for m in re.finditer(r"benchmarks/(\w+\.py)((?:(?!benchmarks/)[^\n`|;#])*)", text):
            script = ROOT / "benchmarks" / m.group(1)
            source = script.read_text() if script.exists() else ""
            for option in ["", *re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(2))]:
                if f'"{option}"' not in source:  # "": the script itself is missing
                    unknown.append(f"{path.name}: benchmarks/{m.group(1)} {option}")
    assert not unknown, unknown


#: modules that act when imported (a worker's or the warm server's preloads: importing
#: forkserver_exit here would make pytest ignore Ctrl-C and end through os._exit)
_ACT_ON_IMPORT = {
    "dparallel.cluster.forkserver_exit",
    "dparallel.workflow.featurize_forkserver_preload",
    "dparallel.workflow.featurize_worker_preload",
}


def _top_level_names(module: str) -> set[str]:
    """Names a module's source defines at its top level (functions, classes, assignments)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    tree = ast.parse(Path(spec.origin).read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _resolves(name: str) -> bool:
    """``dparallel.a.b``: the longest module prefix, then attributes (a module named alone is
    found, not imported: preload modules act when imported)."""
    import importlib
    import importlib.util

    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[: i - 1]) in _ACT_ON_IMPORT:  # find_spec would import it
            continue
        try:
            if importlib.util.find_spec(".".join(parts[:i])) is None:
                continue
        except ModuleNotFoundError:  # a parent is a module, not a package
            continue
        if i == len(parts):
            return True
        module = ".".join(parts[:i])
        if module in _ACT_ON_IMPORT:  # its top-level names, read, not imported
            return len(parts) == i + 1 and parts[i] in _top_level_names(module)
        found = importlib.import_module(module)
        for part in parts[i:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


#: dotted names in the docs that are not Python: a zarr attribute key
NOT_PYTHON = {"dparallel.format_version"}
FILE_ENDINGS = (".md", ".py", ".yaml", ".json", ".log", ".pt", ".ts", ".pt2", ".zarr")


def test_every_python_name_the_docs_give_exists() -> None:
    names = {
        m.group(1).rstrip("."): path.name
        for path in PAGES
        for m in re.finditer(r"(?<![\w/.])(dparallel(?:\.\w+)+)", path.read_text())
    }
    missing = [
        f"{doc}: {name}"
        for name, doc in sorted(names.items())
        if name not in NOT_PYTHON and not name.endswith(FILE_ENDINGS) and not _resolves(name)
    ]
    assert not missing, missing
