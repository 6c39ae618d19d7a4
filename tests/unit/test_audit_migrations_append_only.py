"""Migrations are append-only: a migration file that landed never changes or
disappears (a database migrated in between would refuse to start, or miss a step).

The guard is `audit/migrations/SHA256SUMS` (`sha256sum -c` format), which is only
ever appended to: every migration file is listed with its checksum, every listed
file exists unchanged, and every committed version of the list (its git history,
and origin/main when the clone has it) is a prefix of the current one. Adding a
migration: `cd audit/migrations && sha256sum NNNN_name.sql >> SHA256SUMS`.
(History before this guard: 0002_job_index_applied.sql was replaced by
0002_audit_applied.sql; the list starts after that.)
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIGRATIONS = ROOT / "audit" / "migrations"
MANIFEST = MIGRATIONS / "SHA256SUMS"
MANIFEST_PATH = "audit/migrations/SHA256SUMS"


def _entries(text: str) -> list[tuple[str, str]]:
    """(checksum, file name) per line of a SHA256SUMS text."""
    out = []
    for line in text.splitlines():
        checksum, _, name = line.partition("  ")
        assert len(checksum) == 64 and name, f"malformed SHA256SUMS line {line!r}"
        out.append((checksum, name))
    return out


def _git(*args: str) -> str | None:
    """Output of a git command in the repository, or None without git or outside a clone."""
    if shutil.which("git") is None:
        return None
    done = subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
    )
    return done.stdout if done.returncode == 0 else None


def _committed_manifests() -> dict[str, str]:
    """{ref: SHA256SUMS text} of every commit that changed it, and of origin/main when present."""
    refs = (_git("log", "--format=%H", "--", MANIFEST_PATH) or "").split()
    if _git("rev-parse", "--verify", "--quiet", "origin/main") is not None:
        refs.append("origin/main")
    found = {}
    for ref in refs:
        text = _git("show", f"{ref}:{MANIFEST_PATH}")
        if (
            text is not None
        ):  # absent there (a commit deleting it shows up as a broken prefix below)
            found[ref] = text
    return found


def test_every_migration_is_listed_and_unchanged() -> None:
    listed = _entries(MANIFEST.read_text())
    files = sorted(p.name for p in MIGRATIONS.glob("*.sql"))
    assert sorted(name for _, name in listed) == files, (
        "every migration file is listed in "
        "audit/migrations/SHA256SUMS (append a line for a new one)"
    )
    for checksum, name in listed:
        actual = hashlib.sha256((MIGRATIONS / name).read_bytes()).hexdigest()
        assert actual == checksum, f"{name} changed after it landed: add a new migration instead"


def test_the_list_only_grows() -> None:
    current = _entries(MANIFEST.read_text())
    committed = _committed_manifests()
    if not committed:
        # Only an export without git may lack the history; in a checkout it is a failure.
        if _git("rev-parse", "--is-inside-work-tree") is not None:
            pytest.fail("audit/migrations/SHA256SUMS has no committed version in this checkout")
        pytest.skip("not a git checkout: the history of audit/migrations/SHA256SUMS cannot be read")
    for ref, text in committed.items():
        before = _entries(text)
        assert current[: len(before)] == before, (
            f"audit/migrations/SHA256SUMS at {ref[:12]} is not a prefix of the current one: "
            "a migration that landed was changed or removed"
        )
