"""JSON round-tripping for mkc's frozen dataclass IRs.

Every IR between stages is a frozen dataclass of ints, floats, strings, tuples and nested
dataclasses. `to_jsonable` turns one into plain JSON values; `from_jsonable` rebuilds it from
the type hints, turning lists back into tuples so the result compares equal to the original.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


def to_jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj


def _build(tp: Any, value: Any) -> Any:
    origin = typing.get_origin(tp)
    if value is None:
        return None
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kwargs = {f.name: _build(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value}
        return tp(**kwargs)
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_build(args[0], v) for v in value)
        if args:
            return tuple(_build(a, v) for a, v in zip(args, value))
        return tuple(value)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        for a in typing.get_args(tp):
            if a is type(None):
                continue
            try:
                return _build(a, value)
            except (TypeError, KeyError, ValueError):
                continue
        return value
    if origin is dict:
        kt, vt = typing.get_args(tp)
        return {k: _build(vt, v) for k, v in value.items()}
    if tp is float and isinstance(value, int):
        return float(value)
    return value


def from_jsonable(cls: type[T], data: Any) -> T:
    return _build(cls, data)


def save_json(obj: Any, path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_jsonable(obj), indent=1, sort_keys=False) + "\n")


def load_json(cls: type[T], path: str | Path) -> T:
    return from_jsonable(cls, json.loads(Path(path).read_text()))
