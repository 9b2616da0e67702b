"""Reading configuration: one YAML reader, one ``--set`` grammar, one rule for paths.

Every configuration file dparallel reads (workflow, descriptors, training config) goes
through :func:`read_yaml`; every ``--set key.path=value`` of every command through
:func:`apply_overrides` (values in YAML syntax); every relative path in a configuration is
taken from the current working directory (:func:`resolve_path`), whichever file named it.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dparallel.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = [
    "DEVICE_PATTERN",
    "ENV_CACHE_DIR",
    "TOP_LEVEL",
    "UNKNOWN_KEY",
    "apply_overrides",
    "cache_dir",
    "check_device",
    "describe_validation_error",
    "differences",
    "env_number",
    "named_overrides",
    "parse_value",
    "read_json_object",
    "read_yaml",
    "require_home",
    "resolve_path",
    "restore_environ",
    "section",
    "temporary_cache_dir",
    "writable_cache_dir",
]

#: What a ``device`` setting may be (training, the deployed model, the calculator).
DEVICE_PATTERN = r"^(auto|cpu|cuda|cuda:\d+)$"


def check_device(text: object, error: type[Exception] = ConfigError) -> str:
    """``text`` if it is a ``device`` setting (:data:`DEVICE_PATTERN`), else ``error`` (the
    caller's class: a spec's, argparse's, the device resolver's) with the one message."""
    if not isinstance(text, str) or not re.match(DEVICE_PATTERN, text):
        raise error(f"device {text!r}: expected auto, cpu, cuda or cuda:N")
    return text


def differences(old: Any, new: Any, depth: int | None = None) -> list[tuple[str, Any, Any]]:  # noqa: ANN401
    """``(dotted key, old value, new value)`` for each key whose values differ, sorted,
    descending into mappings down to ``depth`` levels (``None``: all); the key ``""``
    when the whole values differ (not both mappings). A key missing on one side has the
    value ``None`` there. The one config comparison (stores, run directories)."""
    if old == new:
        return []
    if depth == 0 or not (isinstance(old, Mapping) and isinstance(new, Mapping)):
        return [("", old, new)]
    out = []
    for key in sorted(set(old) | set(new), key=str):
        deeper = None if depth is None else depth - 1
        for sub, a, b in differences(old.get(key), new.get(key), deeper):
            out.append((f"{key}.{sub}" if sub else str(key), a, b))
    return out


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The JSON object in the file ``path``; ``{}`` where there is none (no file, one that
    cannot be read, not JSON, or JSON that is no object): how dparallel reads back a record
    it wrote (a marker, ``metrics.json``, a ``zarr.json``) without trusting it is there."""
    import json

    try:
        doc = json.loads(Path(path).read_bytes())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def read_yaml(path: str | os.PathLike[str], what: str = "config") -> Any:
    """The document of a YAML (or JSON) file; ``None`` for an empty file.

    Raises :class:`ConfigError` naming the file for a missing or unreadable file and for
    YAML errors (a ``yaml.SafeLoader``: no tags that build Python objects), for a key
    given twice in one mapping; ``1e-3`` is a number, as in YAML 1.2 and JSON.
    """
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the {what} file: {exc}") from None
    try:
        return yaml.load(text, Loader=_unique_keys_loader())  # a SafeLoader: no tags run code
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_one_line(exc)}") from None


def _unique_keys_loader() -> type:
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the
    last silently: a second ``training:`` section would replace the first whole)."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: dict[Any, Any] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: overridable
                    continue
                key = self.construct_object(key_node, deep=deep)
                try:
                    hash(key)
                except TypeError:  # PyYAML's own error for it follows
                    continue
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        problem=f"the key {key!r} is given twice (lines {seen[key].line + 1} "
                        f"and {key_node.start_mark.line + 1})"
                    )
                seen[key] = key_node.start_mark
            return super().construct_mapping(node, deep=deep)

    # YAML 1.1 (PyYAML) reads 1e-3, 1e4 and 1.0e4 as strings; YAML 1.2 and JSON as numbers
    UniqueKeys.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
        list("-+0123456789."),
    )
    return UniqueKeys


def parse_value(text: str, where: str) -> Any:
    """A value in YAML syntax (``1e-3``, ``[32, 32]``, ``true``), read as files are (a key
    given twice refused, ``1e-3`` a number); errors name ``where``."""
    import yaml

    try:
        return yaml.load(text, Loader=_unique_keys_loader())  # a SafeLoader: no tags run code
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: the value is not valid YAML: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def apply_overrides(
    data: Mapping[str, Any], overrides: Iterable[str], *, root: str | None = None
) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values in YAML syntax) to a copy of ``data``.

    ``root`` names the section a command's document is (``"training"`` for
    ``dparallel train``): there a key may be written with or without that prefix, so
    ``--set training.epochs=5`` means the same to ``dparallel train`` and ``dparallel run``.
    """
    out = copy.deepcopy(dict(data))
    for item in overrides:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"--set {item!r}: expected key.path=value")
        parts = key.split(".")
        if root is not None and parts[0] == root and len(parts) > 1:
            parts = parts[1:]
        node: dict[str, Any] = out
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: '{part}' is not a section")
            node = child
        node[parts[-1]] = parse_value(text, f"--set {item!r}")
    return out


def section(data: Any, name: str, source: str) -> dict[str, Any]:
    """``data[name]`` as a dict (``{}`` when the section is empty); errors name ``source``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping with a '{name}' section")
    if name not in data:
        raise ConfigError(f"{source}: no '{name}' section")
    value = data[name]
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: '{name}' must be a mapping, got {type(value).__name__}")
    return dict(value)


def describe_validation_error(
    exc: ValidationError,
    overrides: Iterable[str] = (),
    root: str | None = None,
    schema: Mapping[str, Any] | None = None,
) -> str:
    """One indented line per problem: the key path and what is wrong; a value that came
    from ``--set`` (``overrides``, keys below ``root`` as :func:`apply_overrides` reads
    them) is named as the user wrote it (:func:`named_overrides`). An unknown key
    (:data:`UNKNOWN_KEY`) gets the closest known one of its section in the JSON
    ``schema`` (``did you mean 'training'?``)."""
    problems: dict[str, list[str]] = {}  # key path → what is wrong (each member of a union)
    shown: dict[str, str] = {}  # key path → the scalar given, where its type is wrong
    unknown: set[str] = set()  # key paths of unknown keys
    for err in exc.errors():
        named = err["type"] in (*UNKNOWN_KEY, "missing")  # a key, whatever its name
        key = ".".join(str(p) for p in err["loc"] if named or not _UNION_MEMBER.match(str(p)))
        key = key or TOP_LEVEL
        msg = err["msg"].removeprefix("Input should be " if key in problems else "")
        if err["type"] in UNKNOWN_KEY:
            unknown.add(key)
            msg += _closest_key(schema, err["loc"]) if schema is not None and err["loc"] else ""
        problems.setdefault(key, []).append(msg)
        got = err["input"]
        if err["type"].endswith("_type") and isinstance(got, bool | int | float | str):
            shown[key] = f", got {str(got).lower() if isinstance(got, bool) else repr(got)}"
    lines = []
    for where, msgs in problems.items():
        text = " or ".join(msgs)
        origin = "".join(
            f" (--set {item})"
            for item in named_overrides(where, text, overrides, root, below=where in unknown)
        )
        lines.append(f"  {where}: {text}{shown.get(where, '')}{origin}")
    return "\n".join(lines)


#: The key path of a problem with the whole document (a check across sections).
TOP_LEVEL = "(top level)"

#: Validation error types that mean "no such key here" (a misspelling, most often).
UNKNOWN_KEY = ("extra_forbidden", "unknown_key")


def _expand(nodes: list[Mapping[str, Any]], schema: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``nodes`` of a JSON ``schema`` and what each stands for: its ``$ref`` (a ``$defs``
    entry) and the members of its unions."""
    defs, out, todo = schema.get("$defs", {}), [], list(nodes)
    while todo:
        node = todo.pop()
        out.append(node)
        ref = str(node.get("$ref", "")).rpartition("/")[2]
        todo += [defs[ref]] if ref in defs else []
        todo += [*node.get("anyOf", []), *node.get("oneOf", []), *node.get("allOf", [])]
    return out


def _closest_key(schema: Mapping[str, Any], loc: tuple[Any, ...]) -> str:
    """``"; did you mean 'KEY'?"`` for the unknown key at ``loc``: the closest key of its
    section in the JSON ``schema``, or ``""``."""
    import difflib

    nodes = [schema]
    for part in loc[:-1]:
        nodes = [
            n["properties"][part] for n in _expand(nodes, schema) if part in n.get("properties", {})
        ]
    names = sorted({name for n in _expand(nodes, schema) for name in n.get("properties", {})})
    close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def named_overrides(
    where: str, text: str, overrides: Iterable[str], root: str | None = None, below: bool = False
) -> list[str]:
    """The ``--set`` items behind a problem at key path ``where`` (:data:`TOP_LEVEL`: the
    whole document) that ``text`` describes: the last item that gave ``where`` or a key
    above it; else every item below ``where`` whose key ``text`` names, whole (its dotted
    path or its last part, not a part of a longer key: ``descriptor`` is not named by
    ``descriptor_source``, ``dataset.path`` not by ``store.path``). Keys below ``root``
    may be written without it, as :func:`apply_overrides` reads them; ``below``: every
    item below ``where`` (an unknown key: whatever was set under it). The one rule for
    schema errors (:func:`describe_validation_error`) and a workflow's checks."""
    given: dict[str, str] = {}  # dotted key → the item, the last one winning
    for item in overrides:
        parts = item.partition("=")[0].strip().split(".")
        if root is not None and parts[0] == root and len(parts) > 1:
            parts = parts[1:]
        given[".".join(parts)] = item
    said = [k for k in given if where == k or where.startswith(k + ".")]
    under = [k for k in given if below and k.startswith(where + ".")]
    said = said[-1:] or under or [k for k in given if _named_below(k, where, text)]
    return [given[k] for k in said]


def _named_below(key: str, where: str, text: str) -> bool:
    """Whether ``key`` (a dotted path) lies below ``where`` and ``text`` names it whole."""
    if where != TOP_LEVEL and not key.startswith(where + "."):
        return False
    names = {key, key.rsplit(".", 1)[-1]}
    return any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w|\.\w)", text) for n in names)


#: What pydantic adds to an error's key path for each member of a union (``int``,
#: ``literal['auto']``, ``function-after[…]``); the specs' keys are snake_case words.
_UNION_MEMBER = re.compile(r"^(?:str|int|float|bool|none|[a-z-]+\[.*\])$")


def resolve_path(path: str | os.PathLike[str]) -> Path:
    """A configured path: ``~`` expanded, relative paths taken from the working directory."""
    return Path(path).expanduser().absolute()


#: Environment variable: the folder dparallel keeps files of its own in (indexes of inputs
#: that cannot hold one beside them, logs of runs whose store is a URL).
ENV_CACHE_DIR = "DPARALLEL_CACHE_DIR"


def cache_dir() -> Path:
    """dparallel's cache folder: ``$DPARALLEL_CACHE_DIR``, default ``~/.cache/dparallel``
    (not created here; the home folder is asked only when the variable is unset)."""
    given = os.environ.get(ENV_CACHE_DIR)
    return Path(given) if given else Path.home() / ".cache" / "dparallel"


def require_home() -> None:
    """A :class:`ConfigError` where the process has no home folder (``HOME`` unset and a uid
    without a passwd entry, as containers run): ASE reads ``~`` when it is imported."""
    try:
        Path.home()
    except RuntimeError:
        raise ConfigError(
            f"no home folder: HOME is unset and uid {os.getuid()} has no passwd entry; set "
            "HOME to a folder (ASE reads its configuration there; caches go there unless "
            f"{ENV_CACHE_DIR} names another)"
        ) from None


def temporary_cache_dir() -> Path:
    """``dparallel-UID`` in the temporary folder, made private (0700): the caches' last
    resort. A :class:`ConfigError` where it is there but not this user's alone (another
    user could have put files in it: numba's cache holds code)."""
    import stat
    import tempfile

    root = Path(tempfile.gettempdir()) / f"dparallel-{os.getuid()}"
    root.mkdir(mode=0o700, exist_ok=True)
    info = root.lstat()
    ours = stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid()
    if ours and info.st_mode & 0o077 and not info.st_mode & 0o022:  # readable by others:
        root.chmod(0o700)  # made by an older run, before it was private
        info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise ConfigError(
            f"{root} is not a folder of this user's alone (owner uid {info.st_uid}, mode "
            f"{stat.filemode(info.st_mode)}): remove it, or set {ENV_CACHE_DIR}"
        )
    return root


def writable_cache_dir(name: str) -> Path:
    """``cache_dir() / name``, created; where that cannot be written (a read-only or no
    home folder, as in containers) ``temporary_cache_dir() / name``. A
    :class:`ConfigError` naming :data:`ENV_CACHE_DIR` when neither can."""
    tried: list[str] = []
    for root in (cache_dir, temporary_cache_dir):
        try:
            folder = root() / name
            folder.mkdir(parents=True, exist_ok=True)
        except (OSError, RuntimeError, ConfigError) as exc:  # RuntimeError: no home folder
            tried.append(str(exc))
            continue
        if os.access(folder, os.W_OK | os.X_OK):
            return folder
        tried.append(f"{folder}: not writable")
    raise ConfigError(
        f"no writable folder for dparallel's {name} cache ({'; '.join(tried)}): set "
        f"{ENV_CACHE_DIR} to a writable folder"
    )


def restore_environ(saved: Mapping[str, str | None]) -> None:
    """Give environment variables back the values ``saved`` took of them (``None``: unset)."""
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def env_number(name: str, default: float, unit: str, *, positive: bool = False) -> float:
    """The number in environment variable ``name`` (``default`` where unset or empty), in
    ``unit``; one that is not a finite number ≥ 0 (> 0 with ``positive``) is a
    :class:`ConfigError` naming the variable (not a bare ``ValueError`` from deep inside)."""
    import math

    raw = os.environ.get(name, "").strip()
    if not raw:
        return float(default)
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        bound = "> 0" if positive else "≥ 0"
        raise ConfigError(
            f"environment variable {name}={raw!r}: not a number {bound} ({unit}); "
            f"set a number such as {default:g}, or unset it for the default"
        )
    return value
