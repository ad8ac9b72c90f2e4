"""Units every layer parses the same way: durations, aggregation statistics and time zones."""
from __future__ import annotations

import difflib
import math
import re
from functools import cache
from zoneinfo import available_timezones

import numpy as np
import pandas as pd

STATISTICS = ("mean", "max", "sum")  # plus "pNN", e.g. "p95"
# the CRD's pattern (core.policy, deploy/crds): percentiles written plainly from p1 to p100, one form everywhere
STATISTIC_PATTERN = r"^(mean|max|sum|p(100|[1-9][0-9]?(\.[0-9]+)?))$"
_DURATION = re.compile(r"(\d+(\.\d+)?(ms|s|m|h|d|w))+")


def duration(value: str) -> pd.Timedelta:
    """A Go/Prometheus-style duration ("90s", "10m", "1h30m", "28d") as a pandas Timedelta."""
    if not isinstance(value, str) or not _DURATION.fullmatch(value):
        raise ValueError(f"{value!r} is not a duration like 90s, 10m, 1h30m or 28d")
    return pd.Timedelta(re.sub(r"(\d)d", r"\1D", value.replace("w", "W")))


def seconds(value: str) -> float:
    return float(duration(value).total_seconds())


def go_duration(value: float | pd.Timedelta) -> str:
    """Seconds (or a Timedelta) as a person, Go and Prometheus write a duration, largest unit first, and `duration`
    reads back exactly: 600 -> "10m", 5400 -> "1h30m", 1.5 -> "1s500ms" (never pandas' "0 days 00:10:00")."""
    total = value.total_seconds() if isinstance(value, pd.Timedelta) else float(value)
    if not total >= 0:
        raise ValueError(f"a duration cannot be negative, got {total}")
    millis = round(total * 1000)
    if not math.isclose(millis, total * 1000, rel_tol=1e-12, abs_tol=1e-6):  # finer than a millisecond: seconds
        return f"{total:.9g}s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts) or "0s"


def replica_count(gpus: int, per_replica: int) -> int:
    """The replicas of `per_replica` GPUs a target scaled to `gpus` runs: ceil(gpus / per_replica), in integers."""
    return -(-gpus // per_replica)


def whole_replicas(gpus: int, per_replica: int) -> int:
    """`gpus` rounded up to whole replicas of `per_replica` GPUs: a reservation of part of a replica holds a whole
    one."""
    return replica_count(gpus, per_replica) * per_replica


# the planner's recent past: its fallback is last week's peaks, and demand seen before it is no demand now
WEEK_SECONDS = 7 * 86400.0
UTC = "UTC"  # the seasonal clock's default: UTC hours, the history's own

# an IANA time zone's shape (Region/City, UTC, Etc/GMT+5), the CRD's schema's too (tests/test_sameness_real.py)
TIMEZONE_PATTERN = r"^[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z0-9_+-]+)*$"


@cache
def _zones() -> frozenset[str]:
    return frozenset(available_timezones()) - {"localtime"}  # the machine's own zone, whichever it is: no IANA name


def check_timezone(zone: str) -> str:
    """An IANA time zone this machine's time zone database knows (Europe/Berlin, America/New_York, UTC)."""
    if zone == UTC:  # the default needs no zone database (pandas brings the tzdata package for the others)
        return zone
    if not (isinstance(zone, str) and re.fullmatch(TIMEZONE_PATTERN, zone) and zone in _zones()):
        meant = _zone_meant(zone) if isinstance(zone, str) else None
        raise ValueError(f"{zone!r} is not an IANA time zone: did you mean {meant}?" if meant else
                         f"{zone!r} is not an IANA time zone, e.g. Europe/Berlin, America/New_York or UTC")
    return zone


def _zone_meant(zone: str) -> str | None:
    """The zone a name that is none likely means: the same name in another case or with spaces, its city alone
    (Berlin: Europe/Berlin) when one zone has it, else a close spelling of a longer name (Europe/Berln); never for an
    abbreviation (CEST is one letter from EST, a zone six hours away) nor an offset's Etc zone (Etc/GMT+2 is UTC-2)."""
    typed = zone.strip().replace(" ", "_").lower()
    by_name = {z.lower(): z for z in _zones()}
    if typed in by_name:
        return by_name[typed]
    by_name = {name: z for name, z in by_name.items() if not name.startswith("etc/")}
    by_city: dict[str, list[str]] = {}
    for z in by_name.values():
        by_city.setdefault(z.rsplit("/", 1)[-1].lower(), []).append(z)
    city = by_city.get(typed, [])
    close = difflib.get_close_matches(typed, by_name, n=1, cutoff=0.9) if len(typed) > 5 else []
    return city[0] if len(city) == 1 else by_name[close[0]] if close else None


def check_statistic(statistic: str) -> str:
    """mean, max, sum or a percentile written plainly from p1 to p100 (p95, p99.9): what the ReservationPolicy CRD
    takes, so a statistic a configuration or a flag accepts is one a policy can be written with."""
    if isinstance(statistic, str) and re.fullmatch(STATISTIC_PATTERN, statistic):
        return statistic
    raise ValueError(f"statistic must be one of {', '.join(STATISTICS)} or a percentile written pNN from p1 to p100 "
                     f"(e.g. p95 or p99.9), got {statistic!r}")


def epoch_seconds(index: pd.Index | pd.Series | list[pd.Timestamp]) -> np.ndarray:
    """A DatetimeIndex as float epoch seconds, whatever its resolution (pandas 3 parses to microseconds)."""
    # through numpy's datetime64[ns]: what as_unit("ns").asi8 gives, without pandas' per-call overhead
    values = (index if isinstance(index, pd.DatetimeIndex) else pd.DatetimeIndex(index)).to_numpy("datetime64[ns]")
    seconds: np.ndarray = values.view(np.int64) / 1e9
    return seconds


def iso_time(text: str) -> pd.Timestamp:
    """`text` read as an ISO-8601 time (its zone, if any, kept); ValueError if it is not one. pandas' free-form
    parser guesses each text's date order on its own: in a file of day-first dates it read 05/01/2026 as May 1 and
    13/01/2026 as January 13, a jumble of days with no error, and it reads words (now, today) as the moment it runs."""
    if not re.match(r"\d{4}", text):  # the year first, as ISO-8601 writes it (the ISO parser reads "now" too)
        raise ValueError(f"{text!r} is not ISO-8601")
    return pd.to_datetime(text.upper(), format="ISO8601")  # upper: RFC 3339 allows a lower-case t and z


def parse_time(text: str, what: str) -> pd.Timestamp:
    """An ISO-8601 moment with its zone given on the command line, in UTC (one without a zone is refused, as a
    history's timestamps are: taken as UTC, a local time would shift the plan by the user's offset)."""
    from core.errors import BadRequest

    try:
        moment = iso_time(text)
    except (ValueError, TypeError):
        raise BadRequest(f"{what}: {text!r} is not an ISO-8601 time like 2026-05-04T09:00:00Z") from None
    if moment.tzinfo is None:
        raise BadRequest(f"{what}: {text!r} has no time zone: give Z or an offset, e.g. 2026-05-04T09:00:00Z")
    return moment.tz_convert("UTC")
