"""Test helpers: write pcaps, decode them with tshark and the generated dissector (PDML), and
check what the dissector shows against the packet bytes (imported by file name)."""

from __future__ import annotations

import struct
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from host.protocol import codec
from host.protocol import layout as lay
from host.protocol.capture import tshark_command


def udp_frame(payload: bytes, src: str = "127.0.0.11", sport: int = 40000,
              dst: str = "127.0.0.1", dport: int = lay.THC_UDP_PORT) -> bytes:
    """An Ethernet/IPv4/UDP frame carrying ``payload``."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))))
    return b"\x02\0\0\0\0\x01\x02\0\0\0\0\x02\x08\x00" + ip + udp


def write_pcap(path: Path, frames: list[bytes]) -> Path:
    """A classic (libpcap) file of Ethernet ``frames``."""
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", i, 0, len(fr), len(fr)) + fr)
    return path


@dataclass
class Decoded:
    """One packet as tshark showed it: its ``netco_thc.*`` fields in tree order."""

    number: int
    thc_pos: int | None
    fields: list[dict] = field(default_factory=list)

    def all(self, name: str) -> list[dict]:
        return [f for f in self.fields if f.get("name") == name]

    def one(self, name: str) -> dict:
        got = self.all(name)
        assert len(got) == 1, f"packet {self.number}: {len(got)} fields {name}"
        return got[0]


def decode(pcap: Path, ports: tuple[int, ...] = ()) -> list[Decoded]:
    """Every UDP packet of ``pcap`` as the generated dissector decodes it (tshark PDML)."""
    cmd = tshark_command(read=pcap, ports=ports, output="pdml", display_filter="udp")
    xml = subprocess.run(cmd, capture_output=True, check=True, timeout=120).stdout
    out = []
    for pk in ET.fromstring(xml).iter("packet"):
        num = int(next(f for f in pk.iter("field") if f.get("name") == "num").get("show"))
        thc = next((p for p in pk.iter("proto") if p.get("name") == "netco_thc"), None)
        fields = [dict(e.attrib) for e in thc.iter() if e.get("name", "").startswith("netco_thc.")] \
            if thc is not None else []
        out.append(Decoded(num, int(thc.get("pos")) if thc is not None else None, fields))
    return out


def read_udp_payloads(pcap: Path) -> dict[int, bytes]:
    """UDP payload of each frame (1-based frame numbers) of a pcap/pcapng file."""
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap

    return {i + 1: bytes(p[UDP].payload) for i, p in enumerate(rdpcap(str(pcap))) if UDP in p}


def _int(show: str) -> int:
    return int(show, 16) if show.startswith("0x") else int(show)


def check_against_bytes(pkt: Decoded, data: bytes) -> codec.Header:
    """Assert that every header field, the names, the flags and the payload elements tshark
    shows for ``pkt`` are what the bytes ``data`` (its UDP payload) hold; returns the header."""
    assert pkt.thc_pos is not None, f"packet {pkt.number} was not decoded as THC"
    h = codec.unpack_header(data)
    off = 0
    for f in lay.THC_HEADER:
        got = pkt.one(f"netco_thc.{f.name}")
        assert _int(got["show"]) == getattr(h, f.name), (pkt.number, f.name, got)
        assert int(got["pos"]) - pkt.thc_pos == off and int(got["size"]) * 8 == f.bits, (f.name, got)
        off += f.bits // 8
    mt = pkt.one("netco_thc.msg_type")["showname"]
    try:
        name = lay.MsgType(h.msg_type).name
    except ValueError:
        name = "Unknown"
    assert mt == f"msg_type: {name} ({h.msg_type})", mt
    for fl in lay.Flag:
        item = pkt.one(f"netco_thc.flags.{fl.name.lower()}")
        on = bool(h.flags & fl)
        assert item["showname"].endswith(f"{fl.name}: {on}"), item
    ranks = pkt.one("netco_thc.ranks")["show"]
    want = ",".join(str(r) for r in range(32) if h.bitmap >> r & 1) or "none"
    assert ranks == want
    p = lay.payload_for(h.msg_type, h.lane_bits)
    if p is None or len(data) < lay.THC_HEADER_BYTES + p.nbytes:
        return h
    body = data[lay.THC_HEADER_BYTES:lay.THC_HEADER_BYTES + p.nbytes]
    if p is lay.INDICES:
        want_vals, name = codec.unpack_indices(body).tolist(), "index"
        n = min(h.elem_count, lay.COORDS_PER_PACKET)
    elif p is lay.NORMS:
        want_vals, name = codec.unpack_norms(body).tolist(), "norm"
        n = min(h.elem_count, lay.NORMS_PER_PACKET)
    else:
        want_vals = codec.unpack_lanes(body, p.bits).tolist()
        name = "value" if h.msg_type == lay.MsgType.DATA else "lane"
        n = min(h.elem_count, lay.COORDS_PER_PACKET)
    items = pkt.all(f"netco_thc.{name}")
    assert len(items) == n, (pkt.number, name, len(items), n)
    for i, it in enumerate(items):
        if name == "norm":
            shown = float(it["showname"].split(": ", 1)[1])   # printed with 9 digits: exact float32
            assert struct.unpack("!f", struct.pack("!f", shown))[0] == want_vals[i], (i, it)
            assert bytes.fromhex(it["value"]) == body[4 * i:4 * i + 4]
        else:
            assert int(it["show"]) == want_vals[i], (pkt.number, i, it, want_vals[i])
        assert it["showname"].startswith(f"{name}[{i}]: ")
    if n < (lay.NORMS_PER_PACKET if p is lay.NORMS else lay.COORDS_PER_PACKET):
        pad = pkt.one("netco_thc.padding")
        used = (n + 1) // 2 if p is lay.INDICES else n * p.bits // 8
        assert int(pad["pos"]) - pkt.thc_pos == lay.THC_HEADER_BYTES + used
        assert int(pad["size"]) == p.nbytes - used
    else:
        assert not pkt.all("netco_thc.padding")
    return h


def drop_name(pkt: Decoded) -> str | None:
    """The drop reason the dissector names for ``pkt``, or None."""
    got = pkt.all("netco_thc.drop")
    if not got:
        return None
    return got[0]["showname"].split(": ", 1)[1].split(" (")[0]

