"""`horae config show`: every setting's effective value, one line each, with where the value
comes from (the defaults, the config file, an environment variable, an option), secrets
masked; `--defaults`: the annotated settings file shipped in the package (the copy of
config/horae.toml: every setting, its default and what it means). Nothing is started."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from horae.settings import Settings
from scheduler.core.procutil import hide_password

DEFAULTS_FILE = "horae-defaults.toml"  # package data of `scheduler`: a link to config/horae.toml
MASK = "***"
# Keys of a free-form mapping (analytics.spark_conf) whose values are masked.
SECRET_KEY = re.compile(r"(?i)secret|password|passwd|token|credential|access\.key")


def annotated_defaults() -> str:
    """The settings file shipped in the package: every setting, its default, what it means."""
    return resources.files("scheduler").joinpath(DEFAULTS_FILE).read_text(encoding="utf-8")


def setting_fields(
    model: type[BaseModel] = Settings, prefix: str = ""
) -> Iterator[tuple[str, FieldInfo]]:
    """(dotted name, field) of every setting, sections walked: the lines `config show` prints."""
    for name, field in model.model_fields.items():
        kind = field.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            yield from setting_fields(kind, f"{prefix}{name}.")
        else:
            yield f"{prefix}{name}", field


def value_of(settings: BaseModel, name: str) -> Any:
    value: Any = settings
    for part in name.split("."):
        value = getattr(value, part)
    return value


def shown(value: Any, field: FieldInfo) -> str:
    """The value as TOML would write it, with URL passwords, tokens and secret-looking
    entries of a mapping as ***."""
    if field.repr is False:  # the console's tokens
        return json.dumps(MASK if value else "")
    if value is None:  # redis_url, database_url: the embedded servers
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(hide_password(value) if "://" in value else value)
    if isinstance(value, Mapping):
        items = (
            f"{json.dumps(k)} = {json.dumps(MASK if SECRET_KEY.search(k) else v)}"
            for k, v in value.items()
        )
        return "{" + ", ".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return (
            "["
            + ", ".join(json.dumps(hide_password(v) if isinstance(v, str) else v) for v in value)
            + "]"
        )
    return repr(value)


def show_lines(settings: Settings, sources: Mapping[str, str], data_dir_default: str) -> list[str]:
    """One line per setting: `name = value  # source` (source: "default", "file PATH",
    "environment VAR", "option --x"; a value derived from another setting says so)."""
    rows = []
    for name, field in setting_fields():
        value = value_of(settings, name)
        source = sources.get(name)
        if source is None and name == "data_dir":
            source = f"default: {data_dir_default}"
        elif source is None:
            default = field.get_default(call_default_factory=True)
            source = (
                "default"
                if value == default
                else "derived from other settings (e.g. the redis URL)"
            )
        rows.append((name, shown(value, field), source))
    width = max(len(name) + len(text) for name, text, _ in rows) + 3
    return [f"{f'{name} = {text}':<{width}}  # {source}" for name, text, source in rows]


def data_dir_default(config: Path | None) -> str:
    """Why the default data directory is where it is (docs/how-to/configuring.md)."""
    from scheduler.core.datadir import working_tree

    if config is not None and config.is_file():
        return f".horae/ next to {config}"
    return f"the per-user directory of the working tree {working_tree()}"
