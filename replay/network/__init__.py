"""Flow-level network model: max-min fair sharing, collectives and weight syncs as flows, fabric cost."""
