"""ARCHITECTURE.md holds against the code: every path and symbol it names exists, the imports
between scheduler's sub-packages point only down its floors, the inner floors never import the
packages above scheduler, and no folder grows past a screen of modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"
PRODUCT = ("horae", "scheduler", "listeners", "audit", "console")

# scheduler's floors, lowest first: a module may import its own floor and the ones below.
FLOORS = ("core", "observe", "store", "worker", "facade", "ops", "api", "testing", "cli")
# The composition roots: the only modules of scheduler that may import audit or console.
ROOTS = ("api", "testing", "cli")
MAX_MODULES = 25


def _named() -> list[str]:
    """Every `backticked` token of the document that names a file, a folder or `file:Symbol`."""
    tokens = re.findall(r"`([^`\s]+)`", DOC.read_text(encoding="utf-8"))
    return [t for t in tokens if re.match(r"^[\w./-]+/|^[\w./-]+\.(py|lua|sql|md|toml)(:|$)", t)]


def test_the_document_names_paths_and_symbols() -> None:
    named = _named()
    assert len(named) >= 30, named  # a map, not a vague text
    assert any(":" in t for t in named)


@pytest.mark.parametrize("token", _named())
def test_every_path_and_symbol_it_names_exists(token: str) -> None:
    path, _, symbol = token.partition(":")
    assert (ROOT / path).exists(), f"ARCHITECTURE.md names {path}, which does not exist"
    if symbol:
        assert symbol in _definitions(ROOT / path), f"{path} defines no {symbol}"


def _definitions(path: Path) -> set[str]:
    """Top-level names of a module and Class.method names."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}.{item.name}")
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
    return names


def _imports(path: Path) -> set[str]:
    """Every module a file imports (at the top, inside functions, under TYPE_CHECKING alike)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
    return found


def _floor(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "scheduler" and len(parts) > 1 and parts[1] in FLOORS else None


def _scheduler_modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted((ROOT / "scheduler").rglob("*.py")):
        floor = _floor(".".join(path.relative_to(ROOT).with_suffix("").parts))
        if floor is not None:
            out.append((floor, path))
    return out


def test_imports_between_scheduler_floors_point_down() -> None:
    up = []
    for floor, path in _scheduler_modules():
        for module in _imports(path):
            target = _floor(module)
            if target is not None and FLOORS.index(target) > FLOORS.index(floor):
                up.append(f"{path.relative_to(ROOT)} ({floor}) imports {module} ({target})")
    assert not up, "\n".join(sorted(set(up)))


def test_only_the_composition_roots_import_audit_or_console() -> None:
    bad = []
    for floor, path in _scheduler_modules():
        if floor in ROOTS:
            continue
        bad += [
            f"{path.relative_to(ROOT)} imports {m}"
            for m in _imports(path)
            if m.split(".")[0] in ("audit", "console")
        ]
    assert not bad, "\n".join(sorted(set(bad)))


def test_listeners_import_nothing_of_ours_and_audit_never_imports_console() -> None:
    bad = []
    for package, above in (
        ("listeners", ("scheduler", "audit", "console", "horae")),
        ("audit", ("console",)),
    ):
        for path in (ROOT / package).rglob("*.py"):
            bad += [
                f"{path.relative_to(ROOT)} imports {m}"
                for m in _imports(path)
                if m.split(".")[0] in above
            ]
    assert not bad, "\n".join(sorted(set(bad)))


def test_no_folder_holds_more_than_a_screen_of_modules() -> None:
    crowded = {}
    for package in PRODUCT:
        for folder in [ROOT / package, *(p for p in (ROOT / package).rglob("*") if p.is_dir())]:
            modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
            if len(modules) > MAX_MODULES:
                crowded[str(folder.relative_to(ROOT))] = len(modules)
    assert not crowded, crowded
