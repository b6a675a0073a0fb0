"""netco host library: THC codec, transports, all-reduce API, PyTorch hooks, FL client pieces."""

from importlib.metadata import PackageNotFoundError, version

try:
    #: The installed distribution's version (``pyproject.toml`` is the one place it is written).
    __version__ = version("netco")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
