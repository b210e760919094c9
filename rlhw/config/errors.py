"""Turn pydantic's ValidationError into ONE ConfigError with a dotted path and a fix.

Works for every model derived from StrictModel: the path is rebuilt from pydantic's ``loc`` and,
for an unknown key, the model that rejected it is found by walking the field annotations along that
``loc`` so the message can suggest the closest known key.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from rlhw.errors import ConfigError


def join_path(prefix: str, sub: str) -> str:
    """Join dotted paths; a sub path starting with '[' is an index and takes no dot."""
    if not prefix:
        return sub
    if not sub:
        return prefix
    return prefix + sub if sub.startswith("[") else f"{prefix}.{sub}"


def config_error(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> ConfigError:
    """The first problem of ``exc`` as a ConfigError (with a count of the others)."""
    errors = exc.errors(include_url=False)
    # A typo shows up as an unknown key AND as the missing key it was meant to be: report the typo.
    errors.sort(key=lambda e: e.get("type") != "extra_forbidden")
    first = _one(errors[0], model, prefix)
    if len(errors) > 1:
        more = len(errors) - 1
        first = ConfigError(first.path, f"{first.message} (and {more} more problem{'s' if more > 1 else ''})")
    return first


def _one(err: dict, model: type[BaseModel], prefix: str) -> ConfigError:
    loc = tuple(err.get("loc", ()))
    path, parent = _walk(model, loc)
    path = join_path(prefix, path)
    kind = err.get("type", "")
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, ConfigError):
        # Raised by one of our validators with a path relative to the field it validated.
        return type(cause)(join_path(path, cause.path), cause.message)
    if kind == "extra_forbidden":
        return ConfigError(path, _unknown_key(str(loc[-1]) if loc else "?", parent))
    if kind == "missing" and loc and isinstance(loc[-1], int):
        return ConfigError(path, f"too few values: item [{loc[-1]}] is missing from this fixed-length list")
    if kind == "missing":
        return ConfigError(path, "required key is missing; add it")
    msg = str(err.get("msg", "invalid value"))
    for noise in ("Value error, ", "Assertion failed, "):
        if msg.startswith(noise):
            msg = msg[len(noise) :]
    value = err.get("input")
    if kind not in ("value_error", "assertion_error") and not isinstance(value, (dict, list)):
        msg = f"{msg} (got {value!r})"
    return ConfigError(path, msg)


def _unknown_key(key: str, parent: type[BaseModel] | None) -> str:
    if parent is None:
        return f"unknown key {key!r}; remove it"
    known = _field_names(parent)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key {key!r}; did you mean {close[0]!r}?"
    return f"unknown key {key!r}; known keys here: {', '.join(known)}"


def _field_names(model: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in model.model_fields.items()]


def _walk(model: type[BaseModel], loc: tuple) -> tuple[str, type[BaseModel] | None]:
    """Dotted path for ``loc`` and the model holding its last element (None if unknown)."""
    path = ""
    current: Any = model
    parent: type[BaseModel] | None = None
    for i, item in enumerate(loc):
        current = _strip_optional(current)
        if _is_model(current):
            fields = current.model_fields
            parent = current
            if isinstance(item, str) and item in fields:
                path = join_path(path, item)
                current = fields[item].annotation
                continue
            if i == len(loc) - 1:  # an unknown key in this model
                path = join_path(path, str(item))
                return path, parent
            return join_path(path, ".".join(map(str, loc[i:]))), None
        origin = typing.get_origin(current)
        args = typing.get_args(current)
        if isinstance(item, int) and origin in (list, tuple, set, frozenset):
            path += f"[{item}]"
            current = args[0] if args else Any
            continue
        if origin is dict:
            path = join_path(path, str(item))
            current = args[1] if len(args) == 2 else Any
            continue
        if isinstance(item, int):
            path += f"[{item}]"
        elif origin in (typing.Union, types.UnionType):
            # pydantic names the union member it tried; that is not part of the user's path
            match = [a for a in args if getattr(a, "__name__", None) == item]
            current = match[0] if match else Any
            continue
        else:
            path = join_path(path, str(item))
        current = Any
        parent = None
    return path, parent


def _strip_optional(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _strip_optional(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        models = [a for a in members if _is_model(a)]
        if len(members) == 1:
            return _strip_optional(members[0])
        if len(models) == 1:
            return models[0]
    return tp


def _is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)
