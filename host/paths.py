"""Where the repository's files are, computed once.

Modules that read committed files (the compiled P4Info, scenarios, the Mininet topologies)
take their paths from here instead of walking up from their own location.
"""

from __future__ import annotations

from pathlib import Path

#: The repository root (the folder holding ``host/``, ``control_plane/`` and ``p4/``).
REPO = Path(__file__).resolve().parents[1]
#: The P4 programs, their generator (``gen.py``) and build script (``build.py``).
P4 = REPO / "p4"
#: Committed compiler outputs (``p4/build.py``).
P4_BUILD = P4 / "build"
#: The P4 build script (``netco p4`` loads it).
P4_BUILD_SCRIPT = P4 / "build.py"
#: Mininet testbed topologies (``mininet/*.yaml``).
MININET = REPO / "mininet"
#: ScaleAcross scenarios shipped with the package.
SCALEACROSS_SCENARIOS = REPO / "control_plane" / "scaleacross" / "scenarios"
#: P4Info of the v1model program (BMv2 and the software target).
V1MODEL_P4INFO = P4_BUILD / "netco.p4info.txtpb"
#: BMv2 JSON of the v1model program.
V1MODEL_BMV2_JSON = P4_BUILD / "netco.json"
#: P4Info of the TNA program compiled for Tofino.
TOFINO_P4INFO = P4_BUILD / "tofino" / "netco.p4info.txtpb"
