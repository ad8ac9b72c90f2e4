"""Where a policy's demand comes from: the reader interface, and the embedded one (a history file).

The real reader, Prometheus, is adapters.prometheus.PrometheusDemand."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pandas as pd

from forecast.history import HistoryError, at_own_step_reported, load_history

DemandRead = tuple[str, str, pd.Timestamp, pd.Timestamp]  # a policy's key, its query, the range (start, end]


class DemandReader(Protocol):
    def read(self, key: str, query: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
        """Raw demand samples of policy `key` (its `query`) in (start, end], UTC index; NaN = missing."""

    def read_many(self, reads: Sequence[DemandRead]) -> list[pd.Series | Exception]:
        """read() of each, in order, a read's error in its place (a source that can, reads many in one request)."""
        out: list[pd.Series | Exception] = []
        for key, query, start, end in reads:
            try:
                out.append(self.read(key, query, start, end))
            except Exception as exc:  # noqa: BLE001 - raised again in that policy's own observe
                out.append(exc)
        return out


@dataclass
class FileDemand(DemandReader):
    """The embedded source: each policy's demand replayed from a file at its own step (a missing sample is a gap,
    NaN, as Prometheus returns it), never past `end` (no look-ahead)."""
    files: Mapping[str, Path]  # policy key -> file
    counter: bool | None = None  # history.counter: a cumulative counter read as its increments per step
    _loaded: dict[str, pd.Series] = field(default_factory=dict, repr=False)
    _unreadable: dict[str, HistoryError | OSError] = field(default_factory=dict, repr=False)
    repairs: dict[str, list[str]] = field(default_factory=dict, repr=False)  # what cleaning changed, per policy

    def series(self, key: str) -> pd.Series:
        """The whole history of policy `key`, read once: the clock, the cluster and every step see the same samples
        (a file being written to would otherwise differ between reads), and one that cannot be read says so each
        time without being read again."""
        if key not in self.files:
            raise HistoryError(f"no history file for policy {key}")
        if key in self._unreadable:
            raise self._unreadable[key]
        if key not in self._loaded:
            try:
                self._loaded[key], report = at_own_step_reported(load_history(self.files[key]), self.counter)
            except (HistoryError, OSError) as exc:
                self._unreadable[key] = exc
                raise
            self.repairs[key] = report.repairs()
        return self._loaded[key]

    def read(self, key: str, query: str, start: pd.Timestamp, end: pd.Timestamp) -> pd.Series:
        raw = self.series(key)
        return raw[(raw.index > start) & (raw.index <= end)]
