"""Progress a person can follow: stage lines with the time elapsed, and a counter on an interactive terminal (stage
lines elsewhere)."""
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


def counter(label: str) -> Callable[..., None]:
    """A progress callback (done, total, what): one line rewritten in place on an interactive stderr; elsewhere (a
    log, a pipe, CI) a stage line each time `what` changes and at the end, so minutes of work are never silent."""
    if not sys.stderr.isatty():
        say, said = stage_printer(label), [""]

        def line(done: int, total: int, what: str = "") -> None:
            if done == 1 or what != said[0] or done >= total:
                said[0] = what
                say(f"{what}: {done}/{total} folds scored" if what else f"{done}/{total}")

        return line

    def report(done: int, total: int, what: str = "") -> None:
        end = "\n" if done >= total else ""
        sys.stderr.write(f"\r{label}: {done}/{total} {what}\033[K{end}")
        sys.stderr.flush()

    return report
