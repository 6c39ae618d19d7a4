"""The four implementation packages horae installs beside itself (`scheduler`, `listeners`,
`audit`, `console`) have generic names: a user's own module of the same name earlier on
sys.path (the current directory, PYTHONPATH) would be imported instead, and fail somewhere
far away. `import horae` and the `horae` command check first that each name resolves to
this distribution (the directory holding `horae/`), and refuse otherwise, naming the
shadowing file. Only the standard library is imported here: the point is not to import
the packages before they are known to be ours.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

PACKAGES = ("scheduler", "listeners", "audit", "console")
LIBRARY = PACKAGES[
    :3
]  # what `import horae` and a Scheduler use; `console` only `horae console` (the CLI checks it)


class PackageShadowed(ImportError):
    """A module of the user's hides one of horae's packages (an ImportError, not a
    SchedulerError: `scheduler.core.errors` may be the very module that cannot be trusted)."""


def _origin(name: str) -> str | None:
    """Where `name` is (or would be) imported from: a file, a namespace package's folders, or
    None."""
    module = sys.modules.get(name)
    if module is not None:
        file = getattr(module, "__file__", None)
        return file or ", ".join(getattr(module, "__path__", []) or []) or None
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    if spec.origin and spec.origin != "namespace" and spec.has_location:
        return spec.origin
    return ", ".join(spec.submodule_search_locations or []) or spec.origin


def check_packages(names: tuple[str, ...] = PACKAGES, home: Path | None = None) -> None:
    """Raise PackageShadowed unless each of `names` is `home/<name>/__init__.py` (default:
    the directory holding this `horae` package, site-packages or a source checkout)."""
    home = (home or Path(__file__).resolve().parent.parent).resolve()
    for name in names:
        expected = home / name / "__init__.py"
        origin = _origin(name)
        if origin is not None and Path(origin).resolve() == expected:
            continue
        found = f"{origin}" if origin else "nowhere"
        raise PackageShadowed(
            f"horae's package {name!r} is shadowed: `import {name}` resolves to {found}, not to "
            f"{expected} (horae's own). Rename that module of yours, or take its directory off "
            f"sys.path (the current directory, PYTHONPATH); a missing package means a broken "
            f"install: reinstall horae.",
            name=name,
            path=origin,
        )
