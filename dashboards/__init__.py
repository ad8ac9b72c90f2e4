"""Grafana dashboards generated from code, and HTML reports."""
