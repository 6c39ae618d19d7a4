"""The JDK's incubator-module warning of a launched child is dropped from stderr, every other
line of it (and of this process) gets through, and fd 2 is the process's own again after the
launch, even while the child goes on writing."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent(
    """
    import subprocess, sys, time
    from audit.analytics.jvm_stderr import quiet_jvm_launch

    child = (
        "import sys, time\\n"
        "sys.stderr.write('WARNING: Using incubator modules: jdk.incubator.vector\\\\n')\\n"
        "sys.stderr.write('child says hello\\\\n'); sys.stderr.flush()\\n"
        "time.sleep(0.5)\\n"
        "sys.stderr.write('child later\\\\n'); sys.stderr.flush()\\n"
    )
    with quiet_jvm_launch():
        proc = subprocess.Popen([sys.executable, "-c", child])
        print("inside", file=sys.stderr, flush=True)
    print("after", file=sys.stderr, flush=True)
    proc.wait()
    time.sleep(0.3)
    """
)


def test_the_incubator_warning_is_dropped_and_the_rest_kept() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=30, check=True
    )
    # The copying thread and this process write to the same stderr: lines may interleave.
    assert "incubator" not in done.stderr, done.stderr
    for said in ("child says hello", "child later", "inside", "after"):
        assert said in done.stderr, (said, done.stderr)
