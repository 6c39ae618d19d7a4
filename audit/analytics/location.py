"""Where the exported dataset lives: one URI that both pyarrow and Spark read.

A plain path or file:// URI is local; s3a://, s3://, gs:// and hdfs:// are
handed to pyarrow's filesystems (s3a is Hadoop's name for s3) and to Spark as
they are. Layout: <root>/<table>/day=YYYY-MM-DD/part-00000.parquet, with a
`_EXPORTED.json` marker per day (Spark and pyarrow skip `_` files).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from audit.analytics.errors import AnalyticsError

if (
    TYPE_CHECKING
):  # pyarrow is imported on use: `horae --help` must work without the analytics extra
    import pyarrow.fs as pafs

MARKER = "_EXPORTED.json"

_ARROW_SCHEMES = {
    "s3a": "s3",
    "s3n": "s3",
    "s3": "s3",
    "gs": "gs",
    "gcs": "gs",
    "hdfs": "hdfs",
    "viewfs": "hdfs",
}


@dataclass(frozen=True)
class DatasetLocation:
    """The dataset root, as a URI (local paths are made absolute)."""

    uri: str

    @staticmethod
    def parse(text: str) -> DatasetLocation:
        """Accept a path or a URI.

        Raises:
            AnalyticsError: for an empty value or a scheme neither side reads.
        """
        if not text.strip():
            raise AnalyticsError("the analytics dataset location is empty")
        parts = urlsplit(text)
        if parts.scheme in ("", "file") or len(parts.scheme) == 1:  # len 1: a Windows drive letter
            path = Path(parts.path if parts.scheme == "file" else text).expanduser().resolve()
            return DatasetLocation(path.as_uri())
        if parts.scheme not in _ARROW_SCHEMES:
            raise AnalyticsError(
                f"dataset URI {text!r}: scheme {parts.scheme!r} is not one of "
                f"file, {', '.join(sorted(_ARROW_SCHEMES))}"
            )
        return DatasetLocation(text.rstrip("/"))

    @property
    def is_local(self) -> bool:
        return self.uri.startswith("file:")

    def arrow(self) -> tuple[pafs.FileSystem, str]:
        """(pyarrow filesystem, root path inside it)."""
        import pyarrow.fs as pafs

        parts = urlsplit(self.uri)
        if self.is_local:
            return pafs.LocalFileSystem(), parts.path
        scheme = _ARROW_SCHEMES[parts.scheme]
        fs, path = pafs.FileSystem.from_uri(f"{scheme}://{parts.netloc}{parts.path}")
        return fs, path

    def spark(self, *parts: str) -> str:
        """A URI under the root for Spark (file:/..., s3a://..., hdfs://...)."""
        return "/".join([self.uri, *parts])

    def table(self, name: str) -> str:
        """Arrow-side path of a table directory."""
        return "/".join([self.arrow()[1], name])


def partition(day: date) -> str:
    """The partition directory name of a UTC day."""
    return f"day={day.isoformat()}"


def read_marker(fs: pafs.FileSystem, directory: str) -> dict[str, object] | None:
    """A partition's export marker, or None when the day was never (completely) exported."""
    try:
        with fs.open_input_stream(f"{directory}/{MARKER}") as handle:
            data = json.loads(handle.read().decode())
    except (FileNotFoundError, OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_exported(fs: pafs.FileSystem, directory: str) -> bool:
    """True when the partition directory holds a completed export."""
    import pyarrow.fs as pafs

    return bool(fs.get_file_info(f"{directory}/{MARKER}").type == pafs.FileType.File)
