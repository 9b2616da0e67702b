"""An extxyz comment line read as ASE's ``key_val_str_to_dict`` reads it: the usual form
(``key`` or ``key=value`` words, a value plain or in double quotes) by one regular
expression, anything else by ASE itself. ASE reads a line character by character in
Python, ~19 % of ingesting small molecules; both give the same dict, value types included
(``tests/io/test_comment.py`` compares them on many variants)."""

from __future__ import annotations

import copy
import functools
import json
import re
from typing import Any

import numpy as np

__all__ = ["comment_info"]

#: a key or a plain value: none of the characters ASE gives a meaning (``=``, quotes,
#: brackets, the backslash) nor a space
_WORD = r"[^\s=\"\\'{}\[\]]+"
#: a value in double quotes: anything but another quote or a backslash (ASE keeps
#: brackets and ``=`` inside quotes as they are)
_QUOTED = r'"[^"\\]+"'
_PAIR = re.compile(rf"({_WORD})(?:=({_WORD}|{_QUOTED}))?(?:\s+|$)")
_LINE = re.compile(rf"(?:{_WORD}(?:=(?:{_WORD}|{_QUOTED}))?(?:\s+|$))*")
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,3})?")
_BOOLS = {
    "T": True,
    "F": False,
    "true": True,
    "false": False,
    "True": True,
    "False": False,
    "TRUE": True,
    "FALSE": False,
}
#: one word of a value (ASE splits values at spaces and commas)
_PARTS = re.compile(r"[^\s,]+")
#: a character neither ``int`` nor ``float`` accepts in any number (a Properties value)
_TEXT = re.compile(r"[:/@#%&*()!?;<>|~^$]")


def comment_info(line: str) -> dict[str, Any]:
    """``{key: value}`` of an extxyz comment line, exactly as
    ``ase.io.extxyz.key_val_str_to_dict`` gives it ({} for a blank line)."""
    text = line.strip()
    if not text:
        return {}
    if _LINE.fullmatch(text) is None:
        from ase.io.extxyz import key_val_str_to_dict

        return dict(key_val_str_to_dict(text))
    info: dict[str, Any] = {}
    for found in _PAIR.finditer(text):
        key, raw = found.group(1), found.group(2)
        value = "T" if raw is None else raw.strip('"')
        info[key] = _value(key, value) if _PARTS.fullmatch(value) else _several(key, value)
    return info


def _several(key: str, value: str) -> Any:
    """A value of several words (``Lattice``, ``pbc``), converted once per distinct
    ``(key, value)`` while it recurs (most frames of a file share them: 15 of the ~24 µs a
    usual line took), each caller getting its own copy to change."""
    converted = _several_cached(key, value)
    if isinstance(converted, np.ndarray):
        return converted.copy()
    if isinstance(converted, list):  # flags (pbc), or what a ``_JSON`` value holds
        flat = all(isinstance(item, (bool, int, float, str)) for item in converted)
        return list(converted) if flat else copy.deepcopy(converted)
    return converted


@functools.lru_cache(maxsize=256)
def _several_cached(key: str, value: str) -> Any:
    return _value(key, value)


@functools.cache
def _ase_keys() -> tuple[frozenset[str], frozenset[str]]:
    """ASE's keys left as text, and its keys of 3×3 matrices (read once)."""
    from ase.io.extxyz import SPECIAL_3_3_KEYS, UNPROCESSED_KEYS

    return frozenset(UNPROCESSED_KEYS), frozenset(SPECIAL_3_3_KEYS)


def _value(key: str, value: str) -> Any:
    """One value as ASE converts it: numbers, bools, or the text; the usual forms quickly
    (no exceptions raised and caught, as ASE's tries of ``int`` then ``float`` do)."""
    unprocessed, matrices = _ase_keys()
    if key.lower() in unprocessed:
        return value
    if _PARTS.fullmatch(value) and key not in matrices:  # one word: the usual case
        if _INT.fullmatch(value):
            return np.int64(int(value)) if len(value) <= 18 else _ase_value(key, value)
        if _FLOAT.fullmatch(value):
            return np.float64(float(value))
        if value in _BOOLS:
            return _BOOLS[value]
        return value if _TEXT.search(value) else _ase_value(key, value)
    parts = _PARTS.findall(value)
    if not parts or any(len(p) > 18 and _INT.fullmatch(p) for p in parts):
        return _ase_value(key, value)  # numpy decides whether an int64 holds it
    if all(_INT.fullmatch(p) for p in parts):
        number = np.array(parts, dtype=int)
    elif all(_FLOAT.fullmatch(p) for p in parts):  # not all ints: ASE reads floats
        number = np.array(parts, dtype=float)
    elif key in matrices:
        return _ase_value(key, value)  # ASE's error names the key
    elif all(p in _BOOLS for p in parts):
        flags = [_BOOLS[p] for p in parts]
        return flags[0] if len(flags) == 1 else flags
    else:
        return _ase_value(key, value)
    if key in matrices:  # ASE: 9 numbers, as a 3×3 matrix in Fortran order
        if number.shape != (9,):
            return _ase_value(key, value)
        return number.reshape((3, 3), order="F")
    return number[0] if len(number) == 1 else number


def _ase_value(key: str, value: str) -> Any:
    """ASE's own conversion of one value (``key_val_str_to_dict``, ASE 3.23–3.29)."""
    _, matrices = _ase_keys()
    converted: Any = value
    parts = _PARTS.findall(value)
    try:
        try:
            number = np.array(parts, dtype=int)
        except (ValueError, OverflowError):
            number = np.array(parts, dtype=float)
        converted = number[0] if len(number) == 1 else number
    except (ValueError, OverflowError):
        pass
    if key in matrices:
        if not isinstance(converted, np.ndarray) or converted.shape != (9,):
            raise ValueError(
                f"Got info item {key}, expecting special 3x3 matrix, but value is not in "
                "the form of a 9-long numerical vector"
            )
        converted = np.array(converted).reshape((3, 3), order="F")
    if isinstance(converted, str):
        try:
            flags = [_BOOLS[part] for part in _PARTS.findall(converted)]
            converted = flags[0] if len(flags) == 1 else flags
        except KeyError:
            if converted.startswith("_JSON "):
                loaded = json.loads(converted.replace("_JSON ", "", 1))
                array = np.array(loaded)
                converted = array if array.dtype.kind in ("i", "f", "b") else loaded
    return converted
