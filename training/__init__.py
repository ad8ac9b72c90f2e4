"""Forecast training: backtest candidates, track them in MLflow, promote a champion, watch realized accuracy.

`training.tracking` is the only module that imports mlflow (lazily)."""
