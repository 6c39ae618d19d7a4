"""The Java check: PySpark 4 needs a JVM of version 17 or newer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from audit.analytics.errors import JavaMissing

MIN_JAVA = 17
INSTALL_HINT = (
    "install a Java 17+ runtime, e.g. `apt-get install openjdk-17-jre-headless` (Debian/Ubuntu), "
    "`brew install openjdk@17` (macOS), or set JAVA_HOME to a JDK 17+"
)
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')


def java_executable(env: Mapping[str, str] | None = None) -> str | None:
    """The java Spark will start: $JAVA_HOME/bin/java when JAVA_HOME is set, else `java` on PATH."""
    env = os.environ if env is None else env
    home = env.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / "java"
        return str(candidate) if candidate.is_file() else None
    return shutil.which("java", path=env.get("PATH"))


def parse_java_version(output: str) -> int | None:
    """The major version in `java -version` output ("1.8.0_392" -> 8, "17.0.15" -> 17)."""
    match = _VERSION.search(output)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):
        return int(match.group(2))
    return major


def java_version(env: Mapping[str, str] | None = None) -> int | None:
    """The major version of the java Spark would use, or None when there is none."""
    java = java_executable(env)
    if java is None:
        return None
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_java_version(done.stderr + done.stdout)


def java_problem(env: Mapping[str, str] | None = None, minimum: int = MIN_JAVA) -> str | None:
    """None when a usable Java is present, else a message saying what is wrong and what to
    install."""
    version = java_version(env)
    if version is None:
        where = "JAVA_HOME" if (env or os.environ).get("JAVA_HOME") else "PATH"
        return (
            f"PySpark needs Java {minimum}+, but no working "
            f"`java` was found on {where}: {INSTALL_HINT}"
        )
    if version < minimum:
        return (
            f"PySpark needs Java {minimum}+, but `java -version` reports {version}: {INSTALL_HINT}"
        )
    return None


def require_java(env: Mapping[str, str] | None = None) -> None:
    """Raise JavaMissing with an actionable message unless Java 17+ is available.

    Raises:
        JavaMissing: when java is absent or too old.
    """
    problem = java_problem(env)
    if problem is not None:
        raise JavaMissing(problem)


if __name__ == "__main__":  # `python -m audit.analytics.java`: the Makefile's check
    import sys

    message = java_problem()
    print(message or f"java {java_version()} OK", file=sys.stderr if message else sys.stdout)
    sys.exit(1 if message else 0)
