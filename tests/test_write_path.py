"""dparallel writes its files in one place: ``dparallel/_files.py``.

Every module's AST is read; a call that opens a file for writing anywhere else fails this
test: ``open(…, "w"/"a"/"x"/"+")``, ``Path.open`` in such a mode, ``os.open`` /
``os.fdopen`` with write flags or mode, ``Path.write_text`` / ``write_bytes``,
``torch.save`` / ``torch.export.save`` / ``torch.jit.save`` / ``np.save*`` /
``ase.io.write`` / ``savefig`` to a path, ``shutil.copy*`` / ``copyfile``, ``logging.FileHandler``.
Calls inside a ``lambda`` handed to :func:`dparallel._files.write_with` are not writes of
their own: the library writes the new temporary file made there; nor are those handed to
:func:`dparallel._files.write_serialized`: the library writes into memory.
The allowed exceptions are listed below with their reasons.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dparallel"

#: module (relative path) → (the writes it may make itself, None for any; why).
ALLOWED: dict[str, tuple[frozenset[str] | None, str]] = {
    "dparallel/_files.py": (None, "the write module itself"),
    "dparallel/store/_lease.py": (
        None,
        "the store lease: a lock file created with O_CREAT|O_EXCL and renewed by a renamed "
        "temp file; owned by the store-location work (issue 28), a protocol of its own",
    ),
    "dparallel/cli/main.py": (
        frozenset({"os.open with write flags"}),
        "os.open(os.devnull, O_WRONLY) to silence a closed stdout pipe",
    ),
}

_WRITE_MODES = set("wax+")
_PATH_WRITERS = {"write_text", "write_bytes"}
_SAVERS = {
    ("torch", "save"),
    ("export", "save"),
    ("jit", "save"),
    ("np", "save"),
    ("np", "savez"),
    ("np", "savez_compressed"),
    ("np", "savetxt"),
    ("io", "write"),
    ("shutil", "copy"),
    ("shutil", "copy2"),
    ("shutil", "copyfile"),
    ("shutil", "copytree"),
    ("logging", "FileHandler"),
}
_METHOD_SAVERS = {"savefig", "to_csv", "to_netcdf", "to_zarr"}
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _mode(call: ast.Call, position: int) -> str | None:
    """The constant mode argument of ``call`` (positional ``position`` or ``mode=``)."""
    for kw in call.keywords:
        if kw.arg == "mode" and isinstance(kw.value, ast.Constant):
            return str(kw.value.value)
    if len(call.args) > position and isinstance(call.args[position], ast.Constant):
        return str(call.args[position].value)
    return None


def _dotted(node: ast.AST) -> tuple[str, ...]:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def _names(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)
    }


def writes_in(source: str, filename: str) -> list[str]:
    """``line: what`` for every call in ``source`` that opens a file for writing."""
    found = []
    tree = ast.parse(source, filename)
    handed = {  # calls in a lambda given to write_with: they write its new temporary file
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and _dotted(node.func)[-1:] in (("write_with",), ("write_serialized",))
        for arg in [*node.args, *(kw.value for kw in node.keywords)]
        if isinstance(arg, ast.Lambda)
        for inner in ast.walk(arg.body)
    }
    for node in ast.walk(tree):  # ``with new_file(...) as f``: writes to f write its new file
        if not isinstance(node, ast.With):
            continue
        names = {
            item.optional_vars.id
            for item in node.items
            if isinstance(item.context_expr, ast.Call)
            and _dotted(item.context_expr.func)[-1:] == ("new_file",)
            and isinstance(item.optional_vars, ast.Name)
        }
        handed |= {
            id(inner)
            for statement in node.body
            for inner in ast.walk(statement)
            if isinstance(inner, ast.Call)
            and any(isinstance(a, ast.Name) and a.id in names for a in inner.args[:2])
        }
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(
            _dotted(b)[-1:] == ("FileHandler",) for b in node.bases
        ):
            found.append(f"{node.lineno}: logging.FileHandler")
        if not isinstance(node, ast.Call) or id(node) in handed:
            continue
        name = _dotted(node.func)
        what = None
        if name == ("open",):
            mode = _mode(node, 1)
            if mode is not None and _WRITE_MODES & set(mode):
                what = f"open(..., {mode!r})"
        elif name[-1:] == ("open",) and name[:1] != ("os",):  # Path.open / gzip.open
            mode = _mode(node, 0 if len(name) == 2 and name[0] not in ("gzip", "bz2") else 1)
            if mode is not None and _WRITE_MODES & set(mode):
                what = f"{'.'.join(name)}(..., {mode!r})"
        elif name == ("os", "open"):
            if len(node.args) > 1 and _WRITE_FLAGS & _names(node.args[1]):
                what = "os.open with write flags"
        elif name == ("os", "fdopen"):
            mode = _mode(node, 1)
            if mode is not None and _WRITE_MODES & set(mode):
                what = f"os.fdopen(..., {mode!r})"
        elif name[-1:] and name[-1] in _PATH_WRITERS:
            what = f".{name[-1]}()"
        elif name[-2:] in _SAVERS:
            what = ".".join(name)
        elif name[-1:] and name[-1] in _METHOD_SAVERS:
            what = f".{name[-1]}()"
        if what is not None:
            found.append(f"{node.lineno}: {what}")
    return found


def test_the_scanner_finds_each_kind_of_write() -> None:
    """The scanner itself: every form it must see, and reads it must not flag."""
    source = "\n".join(
        [
            "open(p, 'w')",
            "open(p, mode='ab')",
            "open(p, 'r+')",
            "p.open('x')",
            "os.open(p, os.O_WRONLY | os.O_CREAT)",
            "os.fdopen(fd, 'wb')",
            "p.write_text('x')",
            "p.write_bytes(b'x')",
            "torch.save(obj, p)",
            "torch.export.save(ep, p)",
            "np.savez(f, a=a)",
            "ase.io.write(p, atoms)",
            "shutil.copyfile(a, b)",
            "logging.FileHandler(p)",
            "fig.savefig(p)",
            # reads: none of these is a write
            "open(p)",
            "open(p, 'rb')",
            "p.open()",
            "os.open(p, os.O_RDONLY)",
            "p.read_text()",
            "class H(logging.FileHandler): pass",
            "write_with(p, lambda tmp: torch.save(obj, tmp))",
            "with new_file(p) as f:\n    np.savez(f, a=a)",
        ]
    )
    lines = sorted(int(x.split(":")[0]) for x in writes_in(source, "<probe>"))
    assert lines == [*range(1, 16), 21]


@pytest.mark.parametrize(
    "path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: p.relative_to(ROOT).as_posix()
)
def test_no_module_but_the_write_module_writes_files(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    allowed, _ = ALLOWED.get(rel, (frozenset(), ""))
    found = [
        w
        for w in writes_in(path.read_text(), str(path))
        if allowed is not None and w.split(": ", 1)[1] not in allowed
    ]
    assert not found, (
        f"{rel} writes files itself ({'; '.join(found)}): write through dparallel._files "
        "(write_file, new_file, write_with, open_log), or list the module in ALLOWED with why"
    )


def test_every_allowed_exception_still_exists_and_writes() -> None:
    for rel in ALLOWED:
        if rel == "dparallel/_files.py":
            continue
        assert writes_in((ROOT / rel).read_text(), rel), f"{rel} no longer writes: drop it"
