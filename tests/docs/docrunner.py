"""Run the examples of a Markdown page, so the documentation cannot rot.

What a page must do (docs/**/*.md and README.md; tests/docs/test_examples*.py run every page):

- Only top-level fences count: a fence line that starts in column 0 (```` ``` ```` or ``~~~``,
  three or more). A ```python or ```console fence with leading spaces (inside a list, an
  admonition or a content tab) is an error: the runner would not see it.
- ```` ```python ```` is a whole program: run as ``python -`` (the project's interpreter, the
  block on stdin) in the page's working directory; it must exit 0 within 60 s.
- ```` ```python title="myapp.py" ```` is a file: written into the working directory under that
  path (subfolders allowed), not run (a ``.py`` must compile); the directory is on PYTHONPATH,
  so later blocks and commands import it. Blocks run in document order.
- ```` ```console ````: a line starting with ``$ `` is a command (``bash -c``), a line ending with
  ``\\`` continues on the next one; every other line is output (shown, not compared). Each
  command must exit 0 within 120 s. Each is a ``bash -c`` of its own in the working directory:
  ``cd`` and ``export`` do not carry over to the next command (write ``VAR=value horae ...``).
- Long-running commands: ``horae worker``, ``horae console`` and ``horae audit relay`` (after
  the global options, e.g. ``horae --namespace x worker``; ``VAR=value`` prefixes allowed) and
  any command ending with `` &``. They start in the background, in a process group of their
  own, output to a log file. The runner waits until the process printed its ``Ctrl-C`` line
  (all three do once they run; a console also until its port accepts connections; at most
  30 s), and ~3 s after the start it must still run or have exited 0. At the end of the page
  (also when the page failed) each gets SIGTERM and must exit within 20 s (0 or by the signal);
  then its whole process group is killed.
- ``horae console`` binds a fixed port (``--port``, default 8080, host ``--host`` or
  127.0.0.1): the runner waits (up to 60 s) until it is free before the command starts (the
  pages of one test file run one after another, those of the other files may run at the same
  time), then fails with a clear message. So pages may use the default port; nothing else in
  the suite binds 8080. ``--health-port``/``--metrics-port`` are not checked: pick ports above
  9000 that no other page uses.
- Every other language (bash, sh, shell, text, toml, yaml, ini, json, sql, ...) is shown, not
  run; a line in it that runs horae (``horae ...`` in column 0 or after ``$ ``) is an error: put
  it in a ```console block as a whole runnable line. The one exception: ``horae services start``
  and ``horae services stop`` must be in a shown block (```bash), never in a console block: they
  start or stop the embedded servers of the data directory, which are the test run's own.
- A page uses the namespace and the database it is given: one that names another
  (``--namespace shop``, ``Scheduler(namespace="shop")``) leaves keys behind in the shared Redis.
  Keys of namespaces that start with the page's (``horae demo``'s ``<ns>-demo``) are deleted.
- The environment of a page: HORAE_REDIS_URL and HORAE_DATABASE_URL (the test run's servers, a
  fresh database of the page's own), HORAE_NAMESPACE (a namespace of the page's own, its keys
  deleted afterwards), HORAE_DATA_DIR (the test run's), PATH with the venv's bin first (so
  ``horae``, ``python``, ``pytest`` are the project's), PYTHONPATH = the working directory.

``python -m tests.docs.docrunner`` prints the examples each page has (for the release notes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent

PYTHON_TIMEOUT = 60.0  # a python block
COMMAND_TIMEOUT = 120.0  # a console command
SETTLE_SECONDS = 3.0  # a long-running command must still run (or have exited 0) after this
READY_TIMEOUT = 30.0  # ... and have printed its "Ctrl-C" line within this
STOP_TIMEOUT = 20.0  # after SIGTERM at the end of the page
PORT_WAIT = 60.0  # for a console's port to be free (another page's console stopping)
READY_MARK = "Ctrl-C"  # horae worker / console / audit relay print it once they run
TAIL = 3000  # characters of stderr shown in a failure

PYTHON_LANGS = {"python", "py", "python3"}
CONSOLE_LANGS = {"console"}
LONG_RUNNING = {("worker",), ("console",), ("audit", "relay")}
# Global options of `horae` that take a value (scheduler/cli/main.py: cli)
_GLOBAL_WITH_VALUE = {"--config", "--redis-url", "--database-url", "--namespace"}
_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_TITLE = re.compile(r"""title=(?:"([^"]*)"|'([^']*)'|(\S+))""")
# horae services start/stop: shown only (they would start or stop the test run's servers)
_SERVICES_CONTROL = re.compile(r"\bhorae\b.*\bservices\s+(?:start|stop)\b")
_ENV_ASSIGN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# a line of a shown block that runs horae: `horae ...` in column 0 or after `$ `
_RUNS_HORAE = re.compile(r"^(?:\$\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\S*/)?horae(?:\s|$)")


class ExampleFailure(AssertionError):
    """An example of a page failed; the message names the page and the line."""


# ----------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Command:
    """One `$ ` command of a console block (continuations joined)."""

    line: int  # 1-based line of its `$ ` in the page
    text: str

    @property
    def long_running(self) -> bool:
        return is_long_running(self.text)


@dataclass(frozen=True)
class Block:
    """One fenced block: `line` is the 1-based line of its opening fence in the page."""

    line: int
    lang: str
    info: str
    text: str
    indent: str = ""

    @property
    def title(self) -> str | None:
        m = _TITLE.search(self.info)
        return None if m is None else next(g for g in m.groups() if g is not None)

    @property
    def kind(self) -> str:
        """python (a program), file (python with a title), console, or shown."""
        if self.lang in PYTHON_LANGS:
            return "file" if self.title else "python"
        if self.lang in CONSOLE_LANGS:
            return "console"
        return "shown"

    @property
    def runnable(self) -> bool:
        return self.kind in ("python", "file", "console")

    def commands(self) -> list[Command]:
        """The `$ ` commands of a console block, `\\` continuations joined."""
        out: list[Command] = []
        lines = self.text.split("\n")
        i = 0
        while i < len(lines):
            raw = lines[i]
            if raw.startswith("$ ") or raw == "$":
                start, parts = self.line + 1 + i, [raw[2:]]
                while parts[-1].endswith("\\") and i + 1 < len(lines):
                    i += 1
                    parts.append(lines[i])
                text = "\n".join(parts).strip()
                if text:
                    out.append(Command(start, text))
            i += 1
        return out


def parse(markdown: str) -> list[Block]:
    """Every fenced block of `markdown` in document order, indented ones included (they carry
    their indent: the runner does not run them, `problems` reports them).

    A fence closes on a line of the same character, at least as long, with nothing after it;
    a block left open runs to the end of the page (as CommonMark does)."""
    blocks: list[Block] = []
    lines = markdown.split("\n")
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, info, start = m["fence"], m["info"].strip(), i
        body: list[str] = []
        i += 1
        while i < len(lines):
            close = _FENCE.match(lines[i])
            if (
                close is not None
                and close["fence"][0] == fence[0]
                and len(close["fence"]) >= len(fence)
                and not close["info"].strip()
            ):
                break
            body.append(lines[i])
            i += 1
        i += 1
        indent = m["indent"]
        if indent:  # the content of an indented block is indented too
            body = [b[len(indent) :] if b.startswith(indent) else b.lstrip() for b in body]
        lang = info.split()[0].lstrip(".{").lower() if info else ""
        blocks.append(Block(start + 1, lang, info, "\n".join(body), indent))
    return blocks


def is_long_running(command: str) -> bool:
    """`horae [global options] worker|console|audit relay ...` or a command ending with `&`."""
    if background(command):
        return True
    try:
        argv = shlex.split(command, comments=True)
    except ValueError:
        return False
    while argv and _ENV_ASSIGN.match(argv[0]):
        argv = argv[1:]
    if not argv or Path(argv[0]).name != "horae":
        return False
    rest = argv[1:]
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in _GLOBAL_WITH_VALUE and rest:
            rest.pop(0)
    return any(tuple(rest[: len(words)]) == words for words in LONG_RUNNING)


def background(command: str) -> bool:
    """A command ending with a single `&` (not `&&`)."""
    stripped = command.rstrip()
    return stripped.endswith("&") and not stripped.endswith("&&")


def console_address(command: str) -> tuple[str, int] | None:
    """(host, port) a `horae console` command binds, or None for any other command."""
    try:
        argv = shlex.split(command, comments=True)
    except ValueError:
        return None
    if "console" not in argv or not is_long_running(command):
        return None
    host, port = "127.0.0.1", 8080
    for j, word in enumerate(argv):
        value = argv[j + 1] if j + 1 < len(argv) else ""
        if word.startswith("--port="):
            port = int(word.split("=", 1)[1])
        elif word == "--port" and value.isdigit():
            port = int(value)
        elif word.startswith("--host="):
            host = word.split("=", 1)[1]
        elif word == "--host" and value:
            host = value
    return ("127.0.0.1" if host in ("0.0.0.0", "::", "localhost") else host), port


@dataclass(frozen=True)
class Problem:
    """A block the runner would miss or that shows a horae command it cannot run."""

    line: int
    message: str


def problems(blocks: Iterable[Block]) -> list[Problem]:
    """Indented python/console fences, shown blocks with a line that runs horae, and console
    commands that start or stop the embedded servers."""
    found: list[Problem] = []
    for b in blocks:
        if b.kind == "console":
            found.extend(
                Problem(
                    c.line,
                    f"console command {c.text!r} starts or stops the embedded servers of the "
                    "data directory (the test run's): show it in a ```bash block",
                )
                for c in b.commands()
                if _SERVICES_CONTROL.search(c.text)
            )
        if b.indent and b.runnable:
            found.append(
                Problem(
                    b.line,
                    f"indented ```{b.lang} fence (in a list, an admonition or a tab?): the "
                    "runner reads top-level fences only; move it to column 0",
                )
            )
        if b.kind == "shown":
            for k, text in enumerate(b.text.split("\n")):
                if _RUNS_HORAE.match(text) and not _SERVICES_CONTROL.search(text):
                    found.append(
                        Problem(
                            b.line + 1 + k,
                            f"```{b.lang or '(no language)'} block runs horae ({text.strip()!r}):"
                            " put the command in a ```console block (`$ horae ...`)",
                        )
                    )
    return found


def examples(blocks: Iterable[Block]) -> tuple[int, int]:
    """(python programs, console commands) the runner executes among `blocks`."""
    top = [b for b in blocks if not b.indent]
    return (
        sum(1 for b in top if b.kind == "python"),
        sum(len(b.commands()) for b in top if b.kind == "console"),
    )


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and every docs/**/*.md, relative to `root`, sorted."""
    found = sorted(p.relative_to(root) for p in (root / "docs").rglob("*.md"))
    readme = root / "README.md"
    return ([Path("README.md")] if readme.exists() else []) + found


# ----------------------------------------------------------------------------- running


def page_env(
    base: Mapping[str, str],
    workdir: Path,
    *,
    redis_url: str,
    database_url: str,
    namespace: str,
) -> dict[str, str]:
    """The environment of a page's blocks and commands (see the module docstring)."""
    env = {k: v for k, v in base.items() if not k.startswith("HORAE_") or k == "HORAE_DATA_DIR"}
    env.pop("PYTHONHOME", None)
    env.update(
        HORAE_REDIS_URL=redis_url,
        HORAE_DATABASE_URL=database_url,
        HORAE_NAMESPACE=namespace,
        PYTHONPATH=str(workdir),
        PATH=os.pathsep.join([str(VENV_BIN), base.get("PATH", os.defpath)]),
        PYTHONUNBUFFERED="1",
        NO_COLOR="1",
    )
    return env


def _tail(path: Path, limit: int = TAIL) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text if len(text) <= limit else "..." + text[-limit:]


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


@dataclass
class Background:
    """A long-running command of the page."""

    where: str
    command: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    started: float = field(default_factory=time.monotonic)

    def output(self) -> str:
        self.log.flush()
        return _tail(self.log_path)


@dataclass
class PageRun:
    """Runs the blocks of one page in order; `close()` stops what it started in the background.

    `workdir` is the page's working directory (files land there, commands run there); logs
    and captured output go to `logdir` (outside workdir, so `ls` in a page shows only its own
    files)."""

    page: str
    workdir: Path
    logdir: Path
    env: dict[str, str]
    python_timeout: float = PYTHON_TIMEOUT
    command_timeout: float = COMMAND_TIMEOUT
    settle_seconds: float = SETTLE_SECONDS
    ready_timeout: float = READY_TIMEOUT
    stop_timeout: float = STOP_TIMEOUT
    port_wait: float = PORT_WAIT
    executed: int = 0
    running: list[Background] = field(default_factory=list)
    _n: int = 0

    def __post_init__(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logdir.mkdir(parents=True, exist_ok=True)

    # -- one block

    def run(self, block: Block) -> None:
        if block.indent:
            return  # not run: problems() reports a runnable one
        if block.kind == "file":
            self._write(block)
        elif block.kind == "python":
            self._foreground(
                f"{self.page}:{block.line} (python block)",
                [sys.executable, "-"],
                block.text + "\n",
                self.python_timeout,
            )
        elif block.kind == "console":
            for command in block.commands():
                where = f"{self.page}:{command.line} (console: $ {command.text})"
                if command.long_running:
                    self._start(where, command.text)
                else:
                    self._foreground(where, ["bash", "-c", command.text], "", self.command_timeout)

    def run_all(self, blocks: Iterable[Block]) -> None:
        for block in blocks:
            self.run(block)

    def _write(self, block: Block) -> None:
        title = block.title or ""
        target = (self.workdir / title).resolve()
        if not target.is_relative_to(self.workdir.resolve()) or not title:
            raise ExampleFailure(
                f"{self.page}:{block.line} (file block): title {title!r} is not a relative path"
            )
        if target.suffix == ".py":  # written, not run: it must compile at least
            try:
                compile(block.text + "\n", title, "exec")
            except SyntaxError as exc:
                raise ExampleFailure(
                    f"{self.page}:{block.line + (exc.lineno or 0)} (file block {title}): "
                    f"SyntaxError: {exc.msg}"
                ) from None
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(block.text + "\n")

    def _files(self) -> tuple[Path, Path]:
        self._n += 1
        return self.logdir / f"{self._n:03d}.out", self.logdir / f"{self._n:03d}.err"

    def _foreground(self, where: str, argv: list[str], stdin: str, timeout: float) -> None:
        """Run to completion with output in files (a grandchild holding a pipe cannot hang us);
        whatever it left in its process group is killed afterwards."""
        out_path, err_path = self._files()
        stdin_path = self.logdir / f"{self._n:03d}.in"
        stdin_path.write_text(stdin)
        with (
            stdin_path.open("rb") as fin,
            out_path.open("wb") as fout,
            err_path.open("wb") as ferr,
        ):
            proc = subprocess.Popen(
                argv,
                cwd=self.workdir,
                env=self.env,
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                start_new_session=True,
            )
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                proc.wait()
                raise ExampleFailure(
                    f"{where} did not finish within {timeout:.0f} s\n"
                    f"--- stderr (tail):\n{_tail(err_path)}\n--- stdout (tail):\n"
                    f"{_tail(out_path, 1000)}"
                ) from None
            finally:
                _kill_group(proc.pid)
        self.executed += 1
        if rc != 0:
            raise ExampleFailure(
                f"{where} exited with status {rc}\n--- stderr (tail):\n{_tail(err_path)}\n"
                f"--- stdout (tail):\n{_tail(out_path, 1000)}"
            )

    def _start(self, where: str, command: str) -> None:
        address = console_address(command)
        if address is not None:  # another page's console may be about to stop: wait a little
            deadline = time.monotonic() + self.port_wait
            while _port_open(*address):
                if time.monotonic() > deadline:
                    raise ExampleFailure(
                        f"{where}: port {address[1]} on {address[0]} is in use before the "
                        f"console starts (still after {self.port_wait:.0f} s: another process "
                        "or test): stop it, or give the page's console another --port"
                    )
                time.sleep(0.2)
        text = command.rstrip()
        if background(text):
            text = text[:-1].rstrip()
        log_path = self.logdir / f"bg-{len(self.running) + 1}.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(
            ["bash", "-c", text],
            cwd=self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        bg = Background(where, command, proc, log_path, log)
        self.running.append(bg)
        self.executed += 1
        self._settle(bg, address, ready_mark=not background(command))

    def _settle(self, bg: Background, address: tuple[str, int] | None, ready_mark: bool) -> None:
        """Until it printed READY_MARK (and a console's port is open), and at least
        settle_seconds after the start: still running, or exited 0."""
        deadline = bg.started + self.ready_timeout
        ready = not ready_mark
        while True:
            rc = bg.proc.poll()
            if rc is not None:
                if rc != 0:
                    raise ExampleFailure(
                        f"{bg.where} (long-running) exited with status {rc}\n"
                        f"--- output (tail):\n{bg.output()}"
                    )
                return  # exited 0: fine
            if not ready:
                ready = READY_MARK in bg.output() and (address is None or _port_open(*address))
            if ready and time.monotonic() - bg.started >= self.settle_seconds:
                return
            if time.monotonic() > deadline:
                what = f"its {READY_MARK!r} line" + (
                    f" and port {address[1]} open" if address else ""
                )
                raise ExampleFailure(
                    f"{bg.where} (long-running) not ready within {self.ready_timeout:.0f} s "
                    f"(waited for {what})\n--- output (tail):\n{bg.output()}"
                )
            time.sleep(0.05)

    # -- the end of the page

    def close(self) -> None:
        """SIGTERM each background command (last first), wait, kill its group; raises
        ExampleFailure when one did not stop within stop_timeout or stopped with an error."""
        failures: list[str] = []
        for bg in reversed(self.running):
            if bg.proc.poll() is None:
                _kill_group(bg.proc.pid, signal.SIGTERM)
                try:
                    bg.proc.wait(timeout=self.stop_timeout)
                except subprocess.TimeoutExpired:
                    failures.append(
                        f"{bg.where} (long-running) did not stop within "
                        f"{self.stop_timeout:.0f} s of SIGTERM\n--- output (tail):\n{bg.output()}"
                    )
                rc = bg.proc.returncode
                if rc not in (None, 0, -signal.SIGTERM, 128 + signal.SIGTERM):
                    failures.append(
                        f"{bg.where} (long-running) exited with status {rc} on SIGTERM\n"
                        f"--- output (tail):\n{bg.output()}"
                    )
            _kill_group(bg.proc.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                bg.proc.wait(timeout=5)
            bg.log.close()
        self.running.clear()
        if failures:
            raise ExampleFailure("\n".join(failures))

    def __enter__(self) -> PageRun:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:  # the page failed already: stop everything, report the first failure
            with contextlib.suppress(ExampleFailure):
                self.close()


def _port_open(host: str, port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.settimeout(0.2)
        return s.connect_ex((host, port)) == 0


def check_page(page: str, markdown: str) -> None:
    """ExampleFailure when the page has blocks the runner would miss (see `problems`)."""
    found = problems(parse(markdown))
    if found:
        raise ExampleFailure(
            "\n".join(f"{page}:{p.line}: {p.message}" for p in found)
            + "\n(tests/docs/docrunner.py)"
        )


# The example pages run from three test files, so that pytest-xdist (one file per worker at a
# time) spreads them: the how-to guides about operating horae, the other how-to guides (those
# about code; a new guide lands here), and every other page (README.md included).
OPERATIONS = {
    f"docs/how-to/{name}.md"
    for name in (
        "terminal telemetry console analytics configuring deploying scaling-out security "
        "upgrading chaos"
    ).split()
}


def group_of(page: Path) -> str:
    """ "operations", "guides" or "pages": which test file runs the page's examples."""
    if str(page) in OPERATIONS:
        return "operations"  # test_examples_operations.py
    if page.is_relative_to("docs/how-to"):
        return "guides"  # test_examples_guides.py
    return "pages"  # test_examples.py


def own_pages(group: str) -> list[Path]:
    """The pages of one group (`group_of`)."""
    return [p for p in pages() if group_of(p) == group]


def run_page(page: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    """Run every example of `page` on the test run's servers (tests/conftest.py: redis_url,
    namespace, database_url); a page without any costs no database."""
    blocks = parse((ROOT / page).read_text())
    if not any(b.runnable and not b.indent for b in blocks):
        return
    redis_url = request.getfixturevalue("redis_url")
    namespace = request.getfixturevalue("namespace")  # its keys are deleted afterwards
    database_url = request.getfixturevalue("database_url")  # dropped afterwards
    workdir = tmp_path / "work"
    env = page_env(
        os.environ, workdir, redis_url=redis_url, database_url=database_url, namespace=namespace
    )
    text = (ROOT / page).read_text()
    creates_roles = "CREATE ROLE" in text
    roles_before = asyncio.run(_roles(database_url)) if creates_roles else set()
    try:
        with PageRun(str(page), workdir, tmp_path / "logs", env) as run:
            run.run_all(blocks)
    finally:
        delete_keys_of_namespaces(redis_url, namespace)
        if creates_roles:
            asyncio.run(_drop_new_roles(database_url, roles_before, text))


async def _roles(database_url: str) -> set[str]:
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        return {r["rolname"] for r in await conn.fetch("SELECT rolname FROM pg_roles")}
    finally:
        await conn.close()


async def _drop_new_roles(database_url: str, before: set[str], text: str) -> None:
    """Roles are the server's, not the page's database's: those a page created (the security
    guide's horae_relay and horae_reader) are dropped with what they were granted, so no run
    leaves them behind on a shared server. Only a page that says CREATE ROLE drops roles, and
    only new ones its text names: a page running meanwhile on the other xdist worker must
    neither drop a role this page is about to grant to nor have this page drop its own."""
    import asyncpg

    conn = await asyncpg.connect(database_url)
    try:
        for role in sorted(await _roles(database_url) - before):
            if role not in text:
                continue
            name = '"' + role.replace('"', '""') + '"'
            await conn.execute(f"DROP OWNED BY {name}")
            try:
                await conn.execute(f"DROP ROLE {name}")
            except asyncpg.DependentObjectsStillExistError:
                continue  # another page's database depends on it: that page drops it
    finally:
        await conn.close()


def delete_keys_of_namespaces(redis_url: str, prefix: str) -> None:
    """Delete the keys of every namespace that starts with `prefix` (`{prefix...}:*`): the
    page's own (the namespace fixture deletes it too) and those derived from it (`horae demo`
    uses `<ns>-demo`)."""
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        keys = list(client.scan_iter(match="{" + prefix + "*", count=1000))
        for start in range(0, len(keys), 500):
            client.delete(*keys[start : start + 500])
    finally:
        client.close()


def main() -> None:
    """Print the examples of each page: python programs, console commands, files."""
    totals = [0, 0, 0]
    for page in pages():
        blocks = parse((ROOT / page).read_text())
        py, commands = examples(blocks)
        files = sum(1 for b in blocks if b.kind == "file" and not b.indent)
        totals = [totals[0] + py, totals[1] + commands, totals[2] + files]
        print(f"{py:4d} python {commands:4d} commands {files:4d} files  {page}")
    print(f"{totals[0]:4d} python {totals[1]:4d} commands {totals[2]:4d} files  total")


if __name__ == "__main__":
    main()
