"""The names of the bundle format a recording process needs before it writes anything: the tables and the
weight-sync methods.

Kept apart from :mod:`rltrace.schema`, which builds each table's Arrow schema under these names, so that a recorded
process loads pyarrow (and the numpy it imports) only once the job has imported torch (and numpy with it, in the
job's own order), or at its first shard write: one that records nothing never does.
"""

from __future__ import annotations

TABLE_NAMES = ("requests", "collectives", "weight_syncs", "spans", "iterations")
SYNC_METHODS = ("nccl", "gloo", "ipc", "rpc", "http", "disk", "rdma", "shm", "other")
