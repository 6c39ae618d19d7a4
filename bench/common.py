"""Paths, the systems compared and the Pythons that run them: shared by the bench scripts."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
VENVS = BENCH / ".venvs"
RESULTS = BENCH / "results"
README = BENCH / "README.md"
DATA = BENCH / ".data"

PEERS = ("bullmq", "arq", "saq")
# horae+audit: the default settings (the worker's relay in a child process of its own);
# horae+audit-proc: workers relay nothing, a `horae audit relay` process of its own does
# (bench/adapters/horae_relay.py).
AUDIT_SYSTEMS = {"horae+audit": "audit on", "horae+audit-proc": "audit on, relay service"}
ALL_SYSTEMS = ("horae", *AUDIT_SYSTEMS, *PEERS)


def log(msg: str) -> None:
    print(msg, flush=True)


def python_of(system: str) -> Path:
    """The Python that runs `system`: the project venv for horae (HORAE_PYTHON overrides), a peer's
    own venv."""
    if system.startswith("horae"):
        env = os.environ.get("HORAE_PYTHON")
        return Path(env) if env else ROOT / ".venv" / "bin" / "python"
    return VENVS / system / "bin" / "python"


@contextmanager
def scratch_dir(prefix: str, keep: bool) -> Iterator[Path]:
    """A temporary directory for a run's files (callgrind dumps, a server's data): removed at the
    end, or kept and its path printed (`keep`: --keep)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield work
    finally:
        if keep:
            print(f"files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
