"""The forecaster for each policy's series: the MLflow champion, else automatic selection."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from adapters.mlflow import TrackingError
from controller.observe import default_forecaster
from core.settings import shown_url
from forecast.base import Forecaster
from training.pipeline import Champion, ModelRefused, TrainingError, load_champion

log = logging.getLogger(__name__)


@dataclass
class Models:
    """The forecaster for a series: the MLflow champion's kind of model (refit on fresh history), else automatic
    selection. An unreachable MLflow keeps the last champion loaded; a champion refused (unreadable, tampered
    with, invalid) is reported and the previous champion, else automatic selection, serves; none (its alias
    deleted) is automatic selection, as for a controller started since."""
    tracking_uri: str | None = None
    _champions: dict[str, Champion] = field(default_factory=dict, repr=False)

    def for_series(self, series: str) -> tuple[Forecaster, str, str | None]:
        """(forecaster, its name, why the champion could not serve or None)."""
        fault = None
        if self.tracking_uri:
            try:
                self._champions[series] = load_champion(series, self.tracking_uri)
            except ModelRefused as exc:
                log.warning("%s: %s", series, exc)
                fault = f"ChampionRefused: {exc}"
            except TrackingError as exc:
                log.debug("%s: no champion from %s (%s)", series, shown_url(self.tracking_uri), exc)
            except TrainingError as exc:  # the store answered it has none
                log.debug("%s: %s", series, exc)
                self._champions.pop(series, None)
        champion = self._champions.get(series)
        if champion is not None:
            return champion.make(), f"champion v{champion.version}", fault
        return default_forecaster(), "auto", fault

    def forget(self, series: str) -> None:
        """The champion kept for `series` (its policy deleted) is forgotten."""
        self._champions.pop(series, None)
