"""Demand history in, calibrated hourly quantile forecasts out."""
