"""The JVM a report starts shares this process's stderr, and Spark's launcher always adds
`--add-modules=jdk.incubator.vector`, so every report printed the JDK's "WARNING: Using incubator
modules" line, which tells an operator nothing they can act on. While the JVM is launched, fd 2
is a pipe; a thread copies what comes through it to the real stderr, without that line, for as
long as the JVM lives (it keeps the pipe's write end after fd 2 is restored)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

DROPPED: Final = (b"WARNING: Using incubator modules",)


def _copy(read_fd: int, out_fd: int) -> None:
    with os.fdopen(read_fd, "rb", buffering=0) as source:
        pending = b""
        while chunk := source.read(65536):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                if not line.startswith(DROPPED):
                    os.write(out_fd, line + b"\n")
        if pending and not pending.startswith(DROPPED):
            os.write(out_fd, pending)
    os.close(out_fd)


@contextmanager
def quiet_jvm_launch() -> Iterator[None]:
    """Run the block (the JVM's launch) with fd 2 filtered; fd 2 is this process's own again
    after it, whatever the block raised."""
    try:
        original = os.dup(2)
    except OSError:  # no stderr at all: nothing to filter
        yield
        return
    read_fd, write_fd = os.pipe()
    threading.Thread(
        target=_copy, args=(read_fd, os.dup(original)), name="jvm-stderr", daemon=True
    ).start()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    try:
        yield
    finally:
        os.dup2(original, 2)
        os.close(original)
