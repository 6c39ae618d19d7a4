"""Lazy public names (PEP 562) for the `scheduler` and `horae` packages: a name's module
is imported on first use, so importing the package imports neither redis nor OpenTelemetry.
Imports nothing itself but importlib."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from importlib import import_module
from typing import Any


def lazy_exports(
    package: str, sources: Mapping[str, str], namespace: MutableMapping[str, Any], public: list[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` of `package`: `sources` maps each public name to
    its defining module; a loaded name is kept in `namespace` (the package's globals), so
    later lookups skip `__getattr__`."""

    def getattr_(name: str) -> Any:
        source = sources.get(name)
        if source is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(source), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *public})

    return getattr_, dir_
