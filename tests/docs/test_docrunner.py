"""The runner of the documentation's examples can fail: its parser and runner on small pages
(no servers: a fake `horae` on PATH stands in for the long-running commands)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.docs.docrunner import (
    ExampleFailure,
    PageRun,
    check_page,
    console_address,
    examples,
    is_long_running,
    page_env,
    parse,
    problems,
)

PAGE = """# A page

Some text.

```python title="pkg/greet.py"
def hello() -> str:
    return "hello"
```

```python
from pkg.greet import hello
print(hello())
```

```console
$ python -c 'import pkg.greet' && \\
  echo ok
ok
$ horae --namespace x worker --app pkg.greet
worker w1 running (Ctrl-C to stop)
```

````markdown
```python
raise SystemExit(1)  # shown inside a markdown block: not run
```
````

```bash
make docs
```
"""

FAKE_HORAE = """#!/bin/bash
# Stands in for horae (its arguments say what to do); every run leaves its pid in horae.pid
echo $$ > horae.pid
case "$*" in
  *fails*) echo "boom: cannot start" >&2; exit 3;;
  *stubborn*) trap '' TERM; echo "Ctrl-C"; while true; do sleep 0.05; done;;
  *relay*) echo "not printing the mark"; while true; do sleep 0.05; done;;
  *console*) echo "horae console on http://127.0.0.1:$3/; Ctrl-C stops it"
             exec python3 -m http.server --bind 127.0.0.1 "$3" >/dev/null 2>&1;;
  *worker*) echo "worker w1 running (Ctrl-C to stop)" >&2
            trap 'echo stopped > stopped.txt; exit 0' TERM
            while true; do sleep 0.05; done;;
esac
"""


@pytest.fixture
def runner(tmp_path: Path) -> PageRun:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "horae").write_text(FAKE_HORAE)
    (fake / "horae").chmod(0o755)
    workdir = tmp_path / "work"
    env = page_env(
        os.environ,
        workdir,
        redis_url="redis://unused",
        database_url="postgresql://unused",
        namespace="n",
    )
    env["PATH"] = f"{fake}{os.pathsep}{env['PATH']}"
    return PageRun(
        "docs/sample.md",
        workdir,
        tmp_path / "logs",
        env,
        settle_seconds=0.3,
        stop_timeout=2.0,
        port_wait=0.5,
    )


def run(runner: PageRun, markdown: str) -> PageRun:
    with runner:
        runner.run_all(parse(markdown))
    return runner


def test_parse_finds_top_level_blocks_in_order_with_their_lines() -> None:
    blocks = parse(PAGE)
    assert [(b.line, b.kind, b.lang) for b in blocks] == [
        (5, "file", "python"),
        (10, "python", "python"),
        (15, "console", "console"),
        (23, "shown", "markdown"),
        (29, "shown", "bash"),
    ]
    assert blocks[0].title == "pkg/greet.py"
    assert blocks[1].text == "from pkg.greet import hello\nprint(hello())"
    commands = blocks[2].commands()
    assert [(c.line, c.long_running) for c in commands] == [(16, False), (19, True)]
    assert commands[0].text == "python -c 'import pkg.greet' && \\\n  echo ok"
    assert "raise SystemExit(1)" in blocks[3].text  # the inner fence is the outer's content
    assert examples(blocks) == (1, 2)


def test_a_page_runs_files_programs_and_commands_in_order(runner: PageRun) -> None:
    run(runner, PAGE)
    assert (runner.workdir / "pkg" / "greet.py").read_text().startswith("def hello()")
    assert runner.executed == 3  # the program, the command, the worker
    # the worker was stopped by SIGTERM at the end of the page, its process group gone
    assert (runner.workdir / "stopped.txt").read_text() == "stopped\n"
    pid = int((runner.workdir / "horae.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_failing_python_block_fails_with_page_line_and_stderr(runner: PageRun) -> None:
    page = "Intro\n\n```python\nprint('fine')\n```\n\n```python\nimport nosuchmodule_x\n```\n"
    with pytest.raises(ExampleFailure) as failure:
        run(runner, page)
    message = str(failure.value)
    assert message.startswith("docs/sample.md:7 (python block) exited with status 1")
    assert "ModuleNotFoundError: No module named 'nosuchmodule_x'" in message


def test_a_file_block_that_does_not_compile_fails(runner: PageRun) -> None:
    page = 'Text\n```python title="app.py"\ndef f(:\n    pass\n```\n'
    with pytest.raises(ExampleFailure, match=r"sample.md:3 \(file block app.py\): SyntaxError"):
        run(runner, page)


def test_a_python_block_that_hangs_fails_on_its_timeout(runner: PageRun) -> None:
    runner.python_timeout = 1.0
    started = time.monotonic()
    with pytest.raises(ExampleFailure, match=r"sample.md:1 \(python block\) did not finish"):
        run(runner, "```python\nimport time\ntime.sleep(30)\n```\n")
    assert time.monotonic() - started < 10


def test_a_failing_console_command_fails_and_output_lines_are_not_run(runner: PageRun) -> None:
    page = "```console\n$ true\nfalse\n$ ls no-such-file\nls: cannot access\n$ echo never\n```\n"
    with pytest.raises(ExampleFailure) as failure:
        run(runner, page)
    message = str(failure.value)
    assert message.startswith("docs/sample.md:4 (console: $ ls no-such-file) exited with status 2")
    assert "No such file" in message
    assert runner.executed == 2  # `true`, then `ls`; `false` is output, `echo` never ran


def test_a_long_running_command_that_exits_with_an_error_fails(runner: PageRun) -> None:
    with pytest.raises(ExampleFailure) as failure:
        run(runner, "```console\n$ horae worker fails\n```\n")
    assert "sample.md:2 (console: $ horae worker fails) (long-running) exited with status 3" in str(
        failure.value
    )
    assert "boom: cannot start" in str(failure.value)


def test_a_long_running_command_that_never_gets_ready_fails(runner: PageRun) -> None:
    runner.ready_timeout = 1.0
    with pytest.raises(ExampleFailure, match="not ready within 1 s"):
        run(runner, "```console\n$ horae audit relay\n```\n")
    pid = int((runner.workdir / "horae.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # stopped anyway


def test_a_long_running_command_that_ignores_sigterm_fails_and_is_killed(runner: PageRun) -> None:
    with pytest.raises(ExampleFailure, match="did not stop within 2 s of SIGTERM"):
        run(runner, "```console\n$ horae worker stubborn\n$ true\n```\n")
    pid = int((runner.workdir / "horae.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_background_commands_are_stopped_when_a_later_block_fails(runner: PageRun) -> None:
    with pytest.raises(ExampleFailure, match=r"sample.md:4 \(python block\)"):
        run(runner, "```console\n$ horae worker\n```\n```python\nraise SystemExit(4)\n```\n")
    assert (runner.workdir / "stopped.txt").exists()


def test_a_console_waits_for_its_port_and_a_busy_port_fails(runner: PageRun) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    page = f"```console\n$ horae console --port {port}\n$ python -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:{port}/\")'\n```\n"
    with runner:
        runner.run_all(parse(page))  # the second command reached the console
        with pytest.raises(ExampleFailure, match=f"port {port} on 127.0.0.1 is in use"):
            runner.run_all(parse(page))


def test_long_running_commands_are_recognised() -> None:
    assert is_long_running("horae worker --app myapp")
    assert is_long_running("horae --namespace shop --redis-url=redis://x worker")
    assert is_long_running("HORAE_WORKER__CONCURRENCY=4 horae -v console --port 8081")
    assert is_long_running(".venv/bin/horae audit relay")
    assert is_long_running("python serve.py &")
    assert not is_long_running("horae workers")
    assert not is_long_running("horae audit show JOB")
    assert not is_long_running("horae jobs list --json && echo done")
    assert not is_long_running("echo horae worker")
    assert console_address("horae console") == ("127.0.0.1", 8080)
    assert console_address("horae console --host 0.0.0.0 --port=9000") == ("127.0.0.1", 9000)
    assert console_address("horae worker") is None


def test_shown_blocks_that_run_horae_and_indented_examples_are_flagged() -> None:
    page = (
        "```bash\npip install horae\nhorae jobs list\n```\n\n"
        "```text\n$ horae worker --app x\nthe horae worker prints\n"
        "  horae jobs list [OPTIONS]\n```\n\n"
        '!!! note\n    ```python\n    print("in an admonition")\n    ```\n\n'
        "- a list item\n\n  ```console\n  $ horae workers\n  ```\n\n"
        "- another\n\n  ```toml\n  [worker]\n  ```\n\n"
        "```console\n$ horae services status\n$ horae services stop\n```\n\n"
        "```bash\nHORAE_DATA_DIR=~/.local/share/horae horae services stop\n```\n"
    )
    found = [(p.line, p.message.split(" ")[0]) for p in problems(parse(page))]
    assert found == [
        (3, "```bash"),
        (7, "```text"),
        (13, "indented"),
        (19, "indented"),
        (31, "console"),
    ]
    with pytest.raises(AssertionError, match=r"docs/x.md:3: ```bash block runs horae"):
        check_page("docs/x.md", page)
    check_page("docs/ok.md", PAGE)  # nothing escapes in the sample page
