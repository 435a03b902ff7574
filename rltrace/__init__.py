"""rltrace: record, replay and compare RL post-training workloads.

The trace bundle is the one artifact everything passes through::

    import rltrace
    b = rltrace.open("sample_traces/rollpacker_qwen7b")
    b.requests.select("output_tokens").collect()

Subpackages: ``rltrace.collectors`` (recording a live job), ``rltrace.replay`` (what-if simulation),
``rltrace.dashboards`` (HTML reports). Importing rltrace never imports torch.
"""

from rltrace.bundle import Bundle, TableWriter, open_bundle, write_bundle
from rltrace.errors import BundleError, ConfigError, RltraceError, ValidationError
from rltrace.manifest import Manifest, ModelInfo, Pool, RLConfig
from rltrace.schema import FORMAT_VERSION, TABLES
from rltrace.version import __version__

open = open_bundle  # noqa: A001  - `rltrace.open(path)` is the documented entry point

__all__ = [
    "FORMAT_VERSION",
    "TABLES",
    "Bundle",
    "BundleError",
    "ConfigError",
    "Manifest",
    "ModelInfo",
    "Pool",
    "RLConfig",
    "RltraceError",
    "TableWriter",
    "ValidationError",
    "__version__",
    "open",
    "open_bundle",
    "write_bundle",
]
