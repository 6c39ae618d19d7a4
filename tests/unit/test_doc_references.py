"""Product code, messages and deployment files point at documentation pages, not at README
sections (the README is a first visit's page now): every `docs/....md` they name exists, and no
"README: Section" or 'README "Section"' is left to go stale."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("scheduler", "audit", "listeners", "console", "horae", "config", "deploy")
FILES = ("Makefile", "Dockerfile", "pyproject.toml")
# SQL migrations are left out: a file that ran is never edited (audit/migrations/SHA256SUMS).
SUFFIXES = {".py", ".lua", ".toml", ".yaml", ".yml", ".env", ".service", ".html", ".js"}
DOC_PATH = re.compile(r"docs/[a-z0-9_/-]+\.md")
README_SECTION = re.compile(r"(?<![/\w])README(?:\.md)?(?::\s|,\s|\s\")")


def product_files() -> list[Path]:
    found = [ROOT / name for name in FILES]
    for folder in PRODUCT:
        found += [p for p in (ROOT / folder).rglob("*") if p.is_file() and p.suffix in SUFFIXES]
    return sorted(found)


def test_product_code_names_doc_pages_that_exist() -> None:
    named: dict[str, list[str]] = {}
    for path in product_files():
        for match in DOC_PATH.finditer(path.read_text(encoding="utf-8")):
            named.setdefault(match.group(0), []).append(str(path.relative_to(ROOT)))
    assert len(named) >= 8, f"expected the product to name its doc pages, found {sorted(named)}"
    missing = {page: where for page, where in named.items() if not (ROOT / page).is_file()}
    assert missing == {}


def test_no_readme_section_is_named() -> None:
    left = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in product_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if README_SECTION.search(line)
    ]
    assert left == []
