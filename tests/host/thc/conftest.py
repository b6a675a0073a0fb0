import pytest

from host.thc import fused
from host.thc.codec import THCCodec

BACKENDS = ["torch"] + (["fused"] if fused.available() else [])


@pytest.fixture(params=BACKENDS)
def codec(request):
    """A default codec on each backend (both must pass the same statistical tests)."""
    return THCCodec(backend=request.param)
