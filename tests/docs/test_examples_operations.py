"""The examples of the how-to guides about operating horae run (the terminal, telemetry, the
console, deploying, scaling out...: docrunner.OPERATIONS). The other pages run from
test_examples.py and test_examples_guides.py, so that the pytest-xdist workers share them.
What a page must do: tests/docs/docrunner.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.docrunner import own_pages, run_page


@pytest.mark.timeout(900)
@pytest.mark.parametrize("page", own_pages("operations"), ids=str)
def test_examples_of_operations_guide_run(
    page: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    run_page(page, request, tmp_path)
