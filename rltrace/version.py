"""The package version, in one place (read by the manifest writer and the CLI)."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rltrace")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
