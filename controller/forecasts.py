"""The forecaster for each policy's series: the MLflow champion, else automatic selection."""
from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass, field


from adapters.mlflow import TrackingError
from forecast.backtest import AutoForecaster
from training.pipeline import TrainingError, load_champion

log = logging.getLogger(__name__)


@dataclass
class Models:
    """The forecaster for a series: the MLflow champion (refit on fresh history), else automatic selection.
    An unreachable MLflow keeps the last champion loaded."""
    tracking_uri: str | None = None
    _champions: dict[str, object] = field(default_factory=dict, repr=False)

    def for_series(self, series: str) -> tuple[object, str, str | None]:
        """(forecaster, its name, why the champion could not serve or None)."""
        if self.tracking_uri:
            try:
                self._champions[series] = load_champion(series, self.tracking_uri)
            except (TrainingError, TrackingError) as exc:
                log.debug("%s: no champion from %s (%s)", series, self.tracking_uri, exc)
            if series in self._champions:
                champion = self._champions[series]
                meta = getattr(champion, "headroom_meta", {})
                return pickle.loads(pickle.dumps(champion)), f"champion v{meta.get('version', '?')}", None
        return AutoForecaster("fast", horizon=24), "auto", None
