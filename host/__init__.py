"""netco host library: THC codec, transports, all-reduce API, PyTorch hooks, FL client pieces."""

__version__ = "0.1.0"
