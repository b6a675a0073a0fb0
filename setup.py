"""Build the fused CPU kernels of the THC codec (host/thc/_fused.c), the transport's C slot
loop (host/transport/_slotloop.c) and the software target's C fast path
(host/softswitch/_fastpath.c) with its switch loop (host/softswitch/_swloop.c).

Everything else about the package lives in pyproject.toml. The extensions are optional at run
time: without a C compiler the codec falls back to its vectorized torch path, the slot
window to its Python loop and the software target to its numpy path.
"""

import os
import sys

from setuptools import Extension, setup

#: The generated C header of frame offsets and data-plane constants (p4/gen.py), and the
#: socket constants and UDP offload helpers the C loops share (hand-written), both there.
LAYOUT_INCLUDE = ["host/protocol"]
LAYOUT_HEADER = ["host/protocol/netco_layout.h", "host/protocol/netco_sockets.h"]

#: The C extensions are optional (every one has a Python fallback), except where
#: NETCO_C_REQUIRED=1 asks for a build that fails on a compiler error (./dev.sh tries that first,
#: so that a broken C source is reported instead of silently falling back).
OPTIONAL = os.environ.get("NETCO_C_REQUIRED", "0") != "1"

compile_args = ["-O3", "-ffp-contract=off", "-fno-math-errno"]
link_args: list[str] = []
if sys.platform.startswith("linux"):
    compile_args.append("-fopenmp")
    link_args.append("-fopenmp")
if os.environ.get("NETCO_NATIVE", "1") == "1" and sys.platform.startswith("linux"):
    compile_args.append("-march=native")

setup(
    ext_modules=[
        Extension(
            "host.thc._fused",
            sources=["host/thc/_fused.c"],
            extra_compile_args=compile_args,
            extra_link_args=link_args,
            optional=OPTIONAL,
        ),
        # The slot window's exchange loop (host/transport/slots.py falls back to Python).
        Extension(
            "host.transport._slotloop",
            sources=["host/transport/_slotloop.c"],
            include_dirs=LAYOUT_INCLUDE,
            depends=LAYOUT_HEADER,
            # -O3: each result's lane widening (lanes_into) vectorizes
            extra_compile_args=["-O3"],
            optional=OPTIONAL,
        ),
        # The software target's common case and its switch loop (host/softswitch/pipeline.py
        # falls back to numpy, host/softswitch/switch.py to its Python loop).
        Extension(
            "host.softswitch._fastpath",
            sources=["host/softswitch/_fastpath.c", "host/softswitch/_swloop.c"],
            include_dirs=LAYOUT_INCLUDE,
            depends=[*LAYOUT_HEADER, "host/softswitch/_fastpath.h"],
            libraries=["pthread"],
            # -O3: the lane conversions of every result vectorize (measured ~10 % less CPU)
            extra_compile_args=["-O3"],
            optional=OPTIONAL,
        ),
    ]
)
