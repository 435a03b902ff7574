"""Plotly HTML reports and Perfetto timelines (installed as ``rltrace.dashboards``): one figure per module,
each drawing a DataFrame from ``rltrace.analysis``; ``report`` assembles the page, ``perfetto`` exports
Chrome trace-event JSON."""
