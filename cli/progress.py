"""Progress a person can follow: stage lines with the time elapsed, and a counter on an interactive terminal."""
from __future__ import annotations

import sys
import time
from collections.abc import Callable


def stage_printer(label: str, quiet: bool = False) -> Callable[[str], None]:
    """Progress lines on stderr with the seconds elapsed since this printer was made (none if `quiet`)."""
    started = time.perf_counter()

    def say(what: str) -> None:
        if quiet:
            return
        sys.stdout.flush()  # keep results and progress in order when both go to one terminal or file
        print(f"[{label} +{time.perf_counter() - started:5.1f}s] {what}", file=sys.stderr, flush=True)

    return say


def counter(label: str):
    """A one-line progress callback on an interactive stderr, else nothing."""
    if not sys.stderr.isatty():
        return None

    def report(done: int, total: int, what: str = "") -> None:
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r{label}: {done}/{total} {what}\033[K{end}")
        sys.stderr.flush()

    return report
