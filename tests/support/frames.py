"""Frame helpers for the packet tests: build THC frames from hosts, parse what comes back."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from host.protocol import codec
from host.protocol import layout as lay
from tests.support.aggnet import Host
from tests.support.token import TOKEN

SWITCH_MAC = "02:00:00:00:ff:fe"


def thc_frame(src: Host, dst_ip: str, header: codec.Header, values: np.ndarray,
              sport: int = lay.THC_UDP_PORT) -> bytes:
    """Ethernet/IPv4/UDP frame from ``src`` (UDP source port ``sport``) carrying
    ``codec.encode(header, values)``."""
    pkt = (Ether(src=src.mac, dst=SWITCH_MAC) / IP(src=src.ip, dst=dst_ip, ttl=64)
           / UDP(sport=sport, dport=lay.THC_UDP_PORT)
           / codec.encode(header, values))
    return bytes(pkt)


@dataclass
class Received:
    """A THC message received at a host, with its addressing."""

    src_ip: str
    dst_ip: str
    dst_mac: str
    msg: codec.Message


def parse(frame: bytes) -> Received | None:
    """Decode a THC frame (``None`` for anything else)."""
    pkt = Ether(frame)
    if not (pkt.haslayer(UDP) and pkt[UDP].dport == lay.THC_UDP_PORT):
        return None
    raw = bytes(pkt[UDP].payload)
    return Received(pkt[IP].src, pkt[IP].dst, pkt[Ether].dst, codec.decode(raw))


def thc_only(frames: list[bytes]) -> list[Received]:
    """The THC messages among ``frames``."""
    out = [parse(f) for f in frames]
    return [r for r in out if r is not None]


def wait_count(net, host: Host, dst_ip: str, job_id: int, rank: int, slot: int, rnd: int,
               want: int, kind: int = 1, timeout: float = 3.0, token: int = TOKEN) -> int:
    """Poll the switch with PEEK requests until copy (slot, rnd) counts ``want`` contributions.

    Frames from different hosts enter the switch on different ports, whose processing order is
    not guaranteed; a PEEK (which changes no state, docs/protocol.md) is the barrier. Returns
    the last count seen. ``kind`` is the message type (DATA or NORM); ``token`` the job's.
    """
    import time

    lane = 32 if kind == lay.MsgType.NORM else lay.INDEX_BITS
    lo, hi = lay.round_fields(rnd)       # rnd: the 48-bit round
    hd = codec.Header(msg_type=kind, job_id=job_id, slot=slot, round=lo, round_hi=hi, rank=rank,
                      lane_bits=lane, flags=lay.Flag.RETX | lay.Flag.PEEK, token=token)
    frame = thc_frame(host, dst_ip, hd, np.zeros(0, dtype=np.uint8))
    end = time.monotonic() + timeout
    seen = -1
    while seen != want and time.monotonic() < end:
        net.send(host.name, frame)
        for r in thc_only(net.recv(host.name, count=1, timeout=0.5)):
            if r.msg.header.flags & lay.Flag.PEEK and r.msg.header.round == rnd:
                seen = r.msg.header.count
    return seen


def collect(net, hosts, timeout: float = 2.0, more: int = 8) -> dict[str, list[Received]]:
    """THC messages received by each host within ``timeout``.

    Results are multicast at once, so after the first host got one the others get 0.3 s more
    (and each host up to ``more`` further messages).
    """
    out = {}
    deadline = time.monotonic() + timeout
    for h in hosts:
        got = thc_only(net.recv(h, count=1, timeout=max(0.0, deadline - time.monotonic())))
        if got:
            deadline = min(deadline, time.monotonic() + 0.3)
        out[h] = got + thc_only(net.recv(h, count=more, timeout=0.05))
    return out
