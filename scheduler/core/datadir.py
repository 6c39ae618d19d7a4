"""Where horae finds its config file and keeps its data, whatever the current directory.

Config file: `--config` / HORAE_CONFIG, else the first `horae.toml` found walking up
from the current directory. Data directory (embedded servers, analytics dataset):
the `data_dir` setting (HORAE_DATA_DIR, or the file's `data_dir`, relative to the
file), else `.horae/` next to the config file, else one directory per working tree under
the per-user data directory: `$XDG_DATA_HOME/horae/projects/<name>-<hash>` (by default
under `~/.local/share/horae`), the working tree being the nearest directory upward holding
`.git` (a clone or a `git worktree`), else the current directory. So two checkouts never
share embedded servers unless told to (the same HORAE_DATA_DIR or config file).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

CONFIG_NAME = "horae.toml"
PROJECT_DATA = ".horae"
PROJECTS = "projects"  # under the per-user data directory: one directory per working tree


def find_config(start: Path | None = None) -> Path | None:
    """The nearest `horae.toml` in `start` (default: the current directory) or its parents."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


def config_file(path: str | Path | None, env: Mapping[str, str]) -> Path | None:
    """The config file to read: `path`, else HORAE_CONFIG, else the nearest horae.toml (may not
    exist)."""
    if path:
        return Path(path).expanduser()
    if env.get("HORAE_CONFIG"):
        return Path(env["HORAE_CONFIG"]).expanduser()
    return find_config()


def user_data_dir(env: Mapping[str, str]) -> Path:
    """`$XDG_DATA_HOME/horae`, else `$HOME/.local/share/horae` (a relative XDG_DATA_HOME is ignored,
    per XDG)."""
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "horae"
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".local" / "share" / "horae"


def working_tree(start: Path | None = None) -> Path:
    """The nearest directory upward from `start` (default: the current directory) holding
    `.git` (a directory in a clone, a file in a `git worktree`), else `start` itself."""
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        if (directory / ".git").exists():
            return directory
    return here


def project_data_dir(tree: Path, env: Mapping[str, str]) -> Path:
    """The per-user data directory of one working tree: `projects/<name>-<hash of its path>`
    (the name for people, the hash so that two trees of the same name stay apart)."""
    digest = hashlib.sha256(str(tree).encode()).hexdigest()[:10]
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", tree.name)[:24] or "root"
    return user_data_dir(env) / PROJECTS / f"{name}-{digest}"


def default_data_dir(config: Path | None, env: Mapping[str, str]) -> Path:
    """`.horae/` next to the config file in use, else the per-user directory of the working
    tree (never one directory shared by every project of the user)."""
    if config is not None and config.is_file():
        return config.resolve().parent / PROJECT_DATA
    return project_data_dir(working_tree(), env)


def absolute(value: str, base: Path) -> str:
    """`value` (with `~` expanded) as an absolute path, relative ones taken from `base`."""
    return str((base / Path(value).expanduser()).resolve())


class _DataDirSetting(Protocol):
    """Settings with a data directory (the root Settings, or the engine's view of them)."""

    @property
    def data_dir(self) -> str: ...


def data_dir_of(settings: _DataDirSetting) -> Path:
    """The data directory of `settings`: its `data_dir`, or the default when it is empty.

    load_settings always fills `data_dir`; Settings built by hand may leave it empty.
    """
    if settings.data_dir:
        return Path(settings.data_dir)
    return default_data_dir(find_config(), os.environ)
