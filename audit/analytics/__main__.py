"""`python -m audit.analytics [options]` and
`spark-submit .../audit/analytics/__main__.py [options]`: the report as a standalone program (the
nightly listener runs it in a subprocess)."""

from __future__ import annotations

from audit.analytics.cli import main

if __name__ == "__main__":
    main(prog_name="python -m audit.analytics")
