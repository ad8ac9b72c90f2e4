"""A user's text file read with a bound: a device or a blob given as a file (/dev/zero, a binary with no line end) is
refused as it grows, not read forever or into all of the machine's memory."""
from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

MAX_LINE = 1 << 20  # characters of one CSV line: a history's or a job trace's lines are short
MAX_TEXT = 64 << 20  # characters of a YAML file: thousands of policies fit many times over


class TooLong(Exception):
    """The file is past its bound: what is read of it is no file of the kind asked for."""


def bounded_lines(handle: TextIO) -> Iterator[str]:
    """The handle's lines, each refused past MAX_LINE characters as it is read (csv's own field limit applies only
    once a whole line is in memory)."""
    while line := handle.readline(MAX_LINE + 1):
        if len(line) > MAX_LINE:
            raise TooLong(f"a line longer than {MAX_LINE} characters")
        yield line


def read_text(path: Path) -> str:
    """The file's text (UTF-8, a byte-order mark dropped), refused past MAX_TEXT characters."""
    with path.open(encoding="utf-8-sig") as handle:
        text = handle.read(MAX_TEXT + 1)
    if len(text) > MAX_TEXT:
        raise TooLong(f"longer than {MAX_TEXT} characters")
    return text
