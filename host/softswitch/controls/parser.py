"""ThcParser (``p4/v1model/include/parser.p4``): Ethernet / IPv4 (no options, not fragmented)
/ UDP / THC, vectorized over a batch.

The payload a THC header announces is chosen by ``layout.payload_for`` (the
``PAYLOAD_BYTES``/``PAYLOAD_CLASS`` tables of :mod:`.common`); :mod:`.thc_validate` drops the
combinations it does not define.
"""

from __future__ import annotations

import numpy as np

from host.protocol import framing as fr
from host.protocol import layout as lay
from host.softswitch.controls.common import ETH, IP4, THC_OFF


def parse(v: np.ndarray, L: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(THC frames, other IPv4 frames to route) of a batch, as boolean masks.

    ``v``: the header view of the rows (``ROW_DTYPE_HDR``), ``L``: their lengths. A frame in
    neither mask did not parse as IPv4 (dropped as ``NOT_IPV4``).
    """
    is_ip = (L >= ETH) & (v["ethertype"] == fr.ETHERTYPE_IPV4)
    ip_ok = is_ip & (L >= ETH + IP4)
    to_udp = (ip_ok & (v["verihl"] & 0x0F == IP4 // 4) & (v["frag"] & 0x1FFF == 0)
              & (v["proto"] == fr.IP_PROTO_UDP))
    udp_short = to_udp & (L < THC_OFF)
    thc = to_udp & ~udp_short & (v["dport"] == lay.THC_UDP_PORT)
    # non-THC: routed when IPv4 parsed without error
    routable = ip_ok & ~udp_short & ~thc
    return thc, routable
