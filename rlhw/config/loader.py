"""Load a config: YAML file -> OmegaConf (+ ``key=value`` overrides) -> plain dict -> pydantic.

Validation happens once, here, at the edge; everything downstream receives a frozen ``Config``.
Every failure is one rlhw.errors.ConfigError naming the path and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rlhw.config.errors import config_error
from rlhw.config.root import Config
from rlhw.errors import ConfigError


def load_config(path: str | Path, overrides: Iterable[str] = ()) -> Config:
    """Read ``path`` (YAML), apply dotted ``key=value`` overrides, validate into a Config."""
    from omegaconf import OmegaConf

    p = Path(path)
    if not p.is_file():
        hint = " (it is a directory)" if p.is_dir() else ""
        raise ConfigError(
            "", f"config file {str(p)!r} not found{hint}; pass a YAML file such as configs/sim_reach.yaml"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError("", f"cannot read config file {str(p)!r}: {e}") from None
    try:
        base = OmegaConf.create(text) if text.strip() else OmegaConf.create({})
    except Exception as e:
        what = getattr(e, "problem", None) or _first_line(e)
        mark = getattr(e, "problem_mark", None)
        lines = text.splitlines()
        if mark is not None and mark.line < len(lines) and "\t" in lines[mark.line]:
            what += " (a tab: indent YAML with spaces)"
        raise ConfigError("", f"{p}: invalid YAML{_yaml_where(e)}: {what}") from None
    if not isinstance(base, Mapping) and not OmegaConf.is_dict(base):
        raise ConfigError("", f"{p}: the top level must be a map of sections (cluster:, env:, ...), not a list")
    return _finish(base, overrides, source=str(p))


def load_config_dict(data: Mapping[str, Any], source: str = "<dict>", overrides: Iterable[str] = ()) -> Config:
    """Validate an in-memory mapping the same way (tests, programmatic use)."""
    from omegaconf import OmegaConf

    if isinstance(data, Config):
        data = data.model_dump()
    if not isinstance(data, Mapping):
        raise ConfigError(
            "", f"{source}: a config is a map of sections (cluster:, env:, ...), got {type(data).__name__}"
        )
    try:
        base = OmegaConf.create(dict(data))
    except Exception as e:
        raise ConfigError("", f"{source}: {_first_line(e)}") from None
    return _finish(base, overrides, source)


def validate_config(data: Mapping[str, Any]) -> Config:
    """Validate a plain dict (already merged) into a Config, converting errors."""
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise config_error(e, Config) from None


def parse_override(text: str) -> tuple[str, str]:
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError(
            "", f"override {text!r} is not key=value; write e.g. cluster.num_nodes=2 (no spaces around '=')"
        )
    key, value = text.split("=", 1)
    key = key.strip()
    if not key or any(c.isspace() for c in key) or key.startswith(".") or key.endswith(".") or ".." in key:
        raise ConfigError("", f"override {text!r} has no valid dotted key before '='; write e.g. train.seed=3")
    return key, value


def _finish(base: Any, overrides: Iterable[str], source: str) -> Config:
    from omegaconf import OmegaConf

    if isinstance(overrides, str):
        overrides = [overrides]
    for text in overrides:
        key, value = parse_override(text)
        try:
            parsed = OmegaConf.from_dotlist([f"{key}={value}"])
            OmegaConf.update(base, key, OmegaConf.select(parsed, key), merge=True, force_add=True)
        except Exception as e:
            raise ConfigError(key, f"cannot apply override {text!r}: {_first_line(e)}") from None
    try:
        data = OmegaConf.to_container(base, resolve=True)
    except Exception as e:
        raise ConfigError("", f"{source}: {_first_line(e)}") from None
    if "cluster" not in data:
        raise ConfigError("cluster", f"{source} has no cluster section; add cluster: with num_nodes and node_groups")
    return validate_config(data)


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


def _yaml_where(e: Exception) -> str:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)  # yaml.MarkedYAMLError
    if mark is None:
        return ""
    return f" at line {mark.line + 1}, column {mark.column + 1}"
