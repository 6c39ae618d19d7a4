"""The examples of the documentation run (tests/docs/docrunner.py says what a page must do).

One test per page (`-k first-job` selects one): its python programs and console commands run in
document order against the test run's servers, in a namespace and a database of the page's own.
This file runs README.md and the pages outside docs/how-to/; the how-to guides run from
test_examples_guides.py and test_examples_operations.py (docrunner.group_of), so that the
pytest-xdist workers share them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.docrunner import (
    OPERATIONS,
    ROOT,
    check_page,
    examples,
    own_pages,
    pages,
    parse,
    run_page,
)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", own_pages("pages"), ids=str)
def test_examples_of_page_run(page: Path, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    run_page(page, request, tmp_path)


def test_no_example_escapes_the_runner() -> None:
    """No python/console fence is indented (the runner reads top-level fences), and no shown
    block (bash, text, ...) holds a line that runs horae."""
    failures = []
    for page in pages():
        try:
            check_page(str(page), (ROOT / page).read_text())
        except AssertionError as exc:
            failures.append(str(exc))
    assert not failures, "\n".join(failures)


def test_every_page_is_in_one_group() -> None:
    groups = [own_pages(g) for g in ("pages", "guides", "operations")]
    assert sorted(p for g in groups for p in g) == sorted(pages())
    missing = sorted(p for p in OPERATIONS if not (ROOT / p).exists())
    assert not missing, f"pages of docrunner.OPERATIONS missing (renamed?): {missing}"


def test_every_getting_started_page_runs_examples() -> None:
    """The tutorial must run: each page under docs/getting-started/ has executed examples."""
    tutorial = [p for p in pages() if p.is_relative_to(Path("docs/getting-started"))]
    assert tutorial, "no page under docs/getting-started/"
    counts = {str(p): sum(examples(parse((ROOT / p).read_text()))) for p in tutorial}
    empty = [p for p, n in counts.items() if n == 0]
    assert not empty, f"getting-started pages without an executed example: {empty}"
