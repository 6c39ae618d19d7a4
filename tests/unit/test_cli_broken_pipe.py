"""`horae ... | head`: a reader that goes away is not an error of horae's or of a server's. The
command ends quietly with the status a shell gives a process killed by SIGPIPE (141), no
"Error:" line blaming the server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HORAE = Path(sys.executable).parent / "horae"


def test_a_closed_pipe_ends_the_command_quietly() -> None:
    proc = subprocess.Popen(
        [str(HORAE), "config", "show", "--defaults"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the command (a second of imports) writes anything
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert err == ""
