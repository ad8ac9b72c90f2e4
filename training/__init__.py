"""Forecast training: backtest candidates, track them in MLflow, promote a champion, watch realized accuracy.

`adapters.mlflow` is the only module that imports mlflow (lazily)."""
