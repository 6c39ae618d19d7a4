"""What spark-submit needs when the submitting host cannot `pip install horae`:
the project's packages as one zip (for `--py-files`, built from the installed
code at run time) and an entry file running `horae report`. Executors need
neither: the analysis has no Python UDFs (docs/how-to/scaling-out.md, the analytics on a
Spark cluster).

    python -m audit.analytics.bundle DIR    # writes DIR/horae.zip and DIR/horae_report.py
"""

from __future__ import annotations

import importlib
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from audit.analytics.errors import AnalyticsError

PACKAGES: Final = ("horae", "scheduler", "listeners", "audit")
ZIP_NAME: Final = "horae.zip"
ENTRY_NAME: Final = "horae_report.py"
ENTRY: Final = '''"""spark-submit entry: `horae report` (audit.analytics.cli.main), imported from
--py-files horae.zip."""

from audit.analytics.cli import main

if __name__ == "__main__":
    main(prog_name="horae_report.py")
'''
_SKIPPED_DIRS: Final = {"__pycache__"}


@dataclass(frozen=True)
class Bundle:
    """The two files to hand to spark-submit."""

    zip: Path
    entry: Path

    def submit_args(self) -> list[str]:
        """spark-submit's arguments before the report's own options."""
        return ["--py-files", str(self.zip), str(self.entry)]


def package_root(name: str) -> Path:
    """The directory of an importable package (the installed code, wherever it lives)."""
    module = importlib.import_module(name)
    if not module.__file__:
        raise AnalyticsError(
            f"package {name!r} has no files on disk to bundle (imported from {module!r})"
        )
    return Path(module.__file__).resolve().parent


def build_bundle(out_dir: Path, packages: tuple[str, ...] = PACKAGES) -> Bundle:
    """Write out_dir/horae.zip (the packages, their SQL, Lua and data files) and the entry file.

    Raises:
        AnalyticsError: when a package cannot be found on disk.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    archive = out_dir / ZIP_NAME
    staging = archive.with_suffix(".zip.tmp")
    with zipfile.ZipFile(staging, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name in packages:
            root = package_root(name)
            for path in sorted(root.rglob("*")):
                relative = path.relative_to(root.parent)
                if (
                    path.is_file()
                    and not _SKIPPED_DIRS.intersection(relative.parts)
                    and path.suffix != ".pyc"
                ):
                    zf.write(path, relative.as_posix())
    staging.replace(archive)
    entry = out_dir / ENTRY_NAME
    entry.write_text(ENTRY, encoding="utf-8")
    return Bundle(archive, entry)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m audit.analytics.bundle DIR", file=sys.stderr)
        sys.exit(2)
    made = build_bundle(Path(sys.argv[1]))
    print(
        "spark-submit --master spark://HOST:7077 "
        + " ".join(made.submit_args())
        + " [horae report options]"
    )
