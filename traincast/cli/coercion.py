"""Parameter values converted without pydantic where typer's conversion is known in advance.

typer (0.2x and later) converts every command-line value, an absent option's ``None`` included,
through a pydantic ``TypeAdapter`` it builds per parameter: importing pydantic and building the
adapters costs about a tenth of a second at every start. :func:`install` wraps typer's
``_TyperParameter.get_runtime_param`` so that the values whose result is known without pydantic
are converted by typer's own functions:

- ``None`` (an option not given): ``()`` for a repeatable parameter, else ``None``, as typer
  returns before it validates;
- ``str`` parameters given a ``str``: the value itself;
- ``Enum`` parameters: typer's ``coerce_cli_choice``;
- ``pathlib.Path`` parameters given a ``str`` or a ``Path``: typer's ``coerce_cli_path`` given
  ``Path(value)`` (pydantic's conversion of a string to a ``Path`` is ``Path(value)``);
- ``int`` parameters without bounds given an ``int`` or a string of ASCII digits: ``int(value)``;
- ``list[X]`` of the above given a tuple or a list: a list of each item converted.

Anything else (files, custom parsers, tuples, floats, dates, bounds, a conversion that raises)
goes through typer's own pydantic path, which gives its usual result or error message: the
command line's behaviour, help and errors are typer's. With a typer that lacks these internals
(before 0.2x, which converted through click types without pydantic) :func:`install` does
nothing.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any, get_args, get_origin

__all__ = ["install"]

_MISS = object()  # "not known without pydantic": typer's own path decides


def _leaf(annotation: Any, info: Any, value: Any, param: Any, ctx: Any, fns: dict) -> Any:
    """``value`` converted as typer's adapter for ``annotation`` would, or ``_MISS``."""
    if getattr(info, "parser", None) is not None:
        return _MISS
    if not isinstance(annotation, type):
        return _MISS
    if issubclass(annotation, Enum):
        return fns["choice"](value, choices=list(annotation),
                             case_sensitive=info.case_sensitive, ctx=ctx)
    if annotation is str:
        return value if type(value) is str else _MISS
    if annotation is int:
        if info.min is not None or info.max is not None or info.clamp:
            return _MISS
        if type(value) is int:
            return value
        if type(value) is str and value.isascii() and value.isdigit():
            return int(value)
        return _MISS
    if issubclass(annotation, Path) and fns["routes_to_path"](annotation, info):
        path_type = info.path_type if info.path_type is not None else annotation
        if path_type is not Path or type(value) not in (str, Path):
            return _MISS
        return fns["path"](Path(value), info, path_type=path_type, param=param, ctx=ctx)
    return _MISS


def _convert(param: Any, value: Any, ctx: Any, fns: dict) -> Any:
    desc = param.type_descriptor
    if value is None:
        return () if param.multiple or param.nargs == -1 else None
    if desc.file_annotation is not None:
        return _MISS
    annotation, info = desc.annotation, desc.parameter_info
    if get_origin(annotation) is list:
        args = get_args(annotation)
        if len(args) != 1 or not isinstance(value, (list, tuple)):
            return _MISS
        out = [_leaf(args[0], info, v, param, ctx, fns) for v in value]
        return _MISS if any(v is _MISS for v in out) else out
    if (param.multiple or param.nargs == -1) and not isinstance(value, (list, tuple)):
        return _MISS
    return _leaf(annotation, info, value, param, ctx, fns)


class _Known:
    """The runtime conversion of one parameter: known values here, the rest through typer."""

    __slots__ = ("fns", "original", "param")

    def __init__(self, param: Any, original: Any, fns: dict) -> None:
        self.param, self.original, self.fns = param, original, fns

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            out = _convert(param, value, ctx, self.fns)
        except Exception:  # noqa: BLE001 - typer's own path raises its own error for it
            out = _MISS
        if out is _MISS:
            return self.original(self.param).coerce(value, param=param, ctx=ctx)
        return out


def install() -> bool:
    """Wrap typer's parameter conversion (once); False when this typer has no such hook."""
    try:
        from typer import core
        from typer._param_types import coerce_cli_choice, coerce_cli_path, routes_to_path
    except ImportError:  # an older typer: click types, no pydantic
        return False
    cls = getattr(core, "_TyperParameter", None)
    original = getattr(cls, "get_runtime_param", None)
    if original is None:
        return False
    if getattr(original, "_traincast", False):
        return True
    fns = {"choice": coerce_cli_choice, "path": coerce_cli_path,
           "routes_to_path": routes_to_path}

    def get_runtime_param(self):  # noqa: ANN001, ANN202 - typer's own signature
        return _Known(self, original, fns)

    get_runtime_param._traincast = True  # type: ignore[attr-defined]
    cls.get_runtime_param = get_runtime_param
    return True
