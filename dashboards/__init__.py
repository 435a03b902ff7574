"""Plotly HTML reports and Perfetto timelines (installed as ``rltrace.dashboards``); one figure per module.
The report builder arrives with the dashboards issue.
"""
