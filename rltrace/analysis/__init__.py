"""Analysis of replay runs and trace bundles: every function returns a polars DataFrame (or a small dict of
them); ``rltrace.dashboards`` draws them and ``rltrace export`` converts them. Nothing here plots."""

from rltrace.analysis.runs import Run, load_run, load_runs

__all__ = ["Run", "load_run", "load_runs"]
