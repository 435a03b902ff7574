"""Collectors that record a live RL job into a trace bundle (installed as ``rltrace.collectors``).

The torch.distributed and vLLM collectors and ``rltrace record`` arrive with the collectors issue; they will
write shards through :class:`rltrace.TableWriter`.
"""
