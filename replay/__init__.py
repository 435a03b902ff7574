"""What-if replay of a trace bundle under other schedulers, GPUs, pool splits and fabrics
(installed as ``rltrace.replay``). The engine arrives with the replay-engine issue.
"""
