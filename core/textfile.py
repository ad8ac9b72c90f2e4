"""A user's text file read with a bound: a device or a blob given as a file (/dev/zero, a binary with no line end, a
gzip bomb) is refused as it grows, not read forever or into all of the machine's memory."""
from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

MAX_LINE = 1 << 20  # characters of one CSV line: a history's or a job trace's lines are short
# Lines of a CSV (blank ones too: each is read) and characters in all: its rows are held in memory as read, some 400
# bytes each, so 5 million take 2 GB. A history of 5 million samples is as many as a Prometheus window may hold: a
# year 7 s apart, 57 days at 1 s; a job trace is of a year at most.
MAX_LINES = 5_000_000
MAX_CSV_CHARS = 1 << 30  # 5 million rows of 200 characters (a history's row is some 30, with label columns 100-200)
MAX_TEXT = 64 << 20  # characters of a YAML file: thousands of policies fit many times over
GZIP_MAGIC = b"\x1f\x8b"
MAX_GZIP_RATIO = 250  # decompressed bytes per compressed byte: a history or a job trace compresses 5 to 15 times
#                       (some 50 with long label columns), a gzip bomb (a byte or a short row repeated) 400 to 1,000


class TooLong(Exception):
    """The file is past its bound: what is read of it is no file of the kind asked for."""


# What MAX_LINES is, for a file refused past it (a Parquet file too, by its rows)
HELD = "the most a file is read with (its rows are held in memory)"


class TooBig(TooLong):
    """The file has more lines or characters than a CSV is read with (MAX_LINES, MAX_CSV_CHARS)."""


class BadGzip(Exception):
    """The file starts as gzip but does not decompress: corrupt or cut short."""


class _Counted:
    """A binary file's read, counting its bytes (a pipe's too, which has no position to tell)."""

    def __init__(self, raw: BinaryIO) -> None:
        self.raw, self.bytes = raw, 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.bytes += len(data)
        return data

    def seek(self, offset: int, /) -> int:  # GzipFile's interface asks for it; reading forward never seeks
        return self.raw.seek(offset)


class _Gunzip(gzip.GzipFile):
    """A gzip file's decompressed bytes, refused past MAX_GZIP_RATIO times the compressed bytes read: a gzip bomb of
    short rows passes the line bound and would fill memory with them."""

    def __init__(self, raw: BinaryIO) -> None:
        self._compressed, self._decompressed = _Counted(raw), 0
        super().__init__(mode="rb", fileobj=self._compressed)

    def read(self, size: int | None = -1) -> bytes:
        return self._counted(super().read(size))

    def read1(self, size: int = -1) -> bytes:
        return self._counted(super().read1(size))

    def _counted(self, data: bytes) -> bytes:
        self._decompressed += len(data)
        if self._decompressed > MAX_GZIP_RATIO * self._compressed.bytes:
            raise TooLong(f"gzip decompressing to over {MAX_GZIP_RATIO} times its size (a gzip bomb)")
        return data


@contextmanager
def open_csv(path: Path) -> Iterator[TextIO]:
    """The file's text for csv.reader (UTF-8, a byte-order mark dropped, line ends as written), gunzipped when it starts
    with gzip's magic bytes, whatever its name. Read it with bounded_lines: its bound is on the decompressed text, so a
    gzip bomb's endless line is refused as a plain file's is, and one of short rows by its ratio (_Gunzip)."""
    with path.open("rb") as raw:
        binary = _Gunzip(raw) if raw.peek(2)[:2] == GZIP_MAGIC else raw
        with io.TextIOWrapper(binary, encoding="utf-8-sig", newline="") as text:
            yield text


def bounded_lines(handle: TextIO) -> Iterator[str]:
    """The handle's lines, each refused past MAX_LINE characters as it is read (csv's own field limit applies only
    once a whole line is in memory), and all of them past MAX_LINES lines or MAX_CSV_CHARS characters: refused as
    they come, not once a file too large for memory (a 10 GB export, a stream that never ends, a gzip of blank lines
    compressing under the bomb ratio) is read whole. A gzip stream's own faults (open_csv's) are BadGzip."""
    lines = chars = 0
    while True:
        try:
            line = handle.readline(MAX_LINE + 1)
        except (gzip.BadGzipFile, EOFError, zlib.error) as exc:  # EOFError: the stream is cut short
            raise BadGzip(str(exc)) from None
        if not line:
            return
        if len(line) > MAX_LINE:
            raise TooLong(f"a line longer than {MAX_LINE} characters")
        lines, chars = lines + 1, chars + len(line)
        if lines > MAX_LINES:
            raise TooBig(f"over {MAX_LINES:,} lines, {HELD}")
        if chars > MAX_CSV_CHARS:
            raise TooBig(f"over {MAX_CSV_CHARS:,} characters by line {lines:,}, {HELD}")
        yield line


def read_text(path: Path) -> str:
    """The file's text (UTF-8, a byte-order mark dropped), refused past MAX_TEXT characters."""
    with path.open(encoding="utf-8-sig") as handle:
        text = handle.read(MAX_TEXT + 1)
    if len(text) > MAX_TEXT:
        raise TooLong(f"longer than {MAX_TEXT} characters")
    return text
