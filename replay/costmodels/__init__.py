"""Cost models: how long a decode iteration, a prefill or a training step takes on a GPU kind.

One small class per model; the replay engine asks them for per-iteration times (closed form, no per-token
loop). ``roofline`` is the analytic default; calibrated models plug in behind the same methods.
"""

from rltrace.replay.costmodels.roofline import Estimate, Roofline

__all__ = ["Estimate", "Roofline"]
