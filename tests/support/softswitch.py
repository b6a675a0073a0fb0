"""Helpers of the software-target tests: an in-process switch with entries, frames, workers.

Worker rank r sits on port r + 1 with address 10.0.0.(r+1); the switch's aggregation address
is 10.0.0.254. Entries are written through the same validation as P4Runtime writes
(:class:`host.softswitch.entities.EntityStore`) from finsy entities (names from the P4Info).
"""

from __future__ import annotations

from dataclasses import dataclass

import finsy as fy
import numpy as np
from finsy.proto import p4r

from host.protocol import codec
from host.protocol import layout as lay
from host.softswitch.frames import ipv4_checksum, read_frame, thc_frame
from host.softswitch.p4info import netco_p4info
from host.softswitch.switch import SoftSwitch
from host.thc.table import DEFAULT_TABLE
from tests.support.token import TOKEN

#: THC default table (b = 4, g = 30; Li et al. NSDI 2024 artifact)
TABLE = list(DEFAULT_TABLE)
SELF_IP = "10.0.0.254"
C = lay.COORDS_PER_PACKET


@dataclass(frozen=True)
class Peer:
    """A contributor at the switch: rank (or child id), port, address, MAC."""

    rank: int
    port: int
    ip: str
    mac: str
    is_switch: bool = False
    #: the UDP source port its sender binding names (0: any)
    udp_port: int = 0


def worker(rank: int) -> Peer:
    """Worker ``rank`` on port rank+1."""
    return Peer(rank, rank + 1, f"10.0.0.{rank + 1}", f"02:00:00:00:00:{rank + 1:02x}")


class Bench:
    """An in-process software switch loaded with the program's P4Info."""

    def __init__(self, pool_slots: int = 256, coords: int = C, absent_silence: float = 0.0) -> None:
        self.info = netco_p4info()
        self.schema = fy.P4Schema(self.info)
        self.coords = coords
        # absent ranks by release counts alone (no clock): the C path and the reference agree
        self.sw = SoftSwitch(pool_slots=pool_slots, coords=coords, absent_silence=absent_silence)
        self.sw.load_pipeline(self.info)

    @property
    def store(self):
        return self.sw.service.store

    def write(self, entities: list, op: int = p4r.Update.INSERT) -> None:
        """Write finsy entities through the store's validation, then recompile."""
        for ent in entities:
            e = ent.encode(self.schema)
            which = e.WhichOneof("entity")
            if which == "table_entry":
                self.store.write_table_entry(op, e.table_entry)
            elif which == "packet_replication_engine_entry":
                self.store.write_multicast_group(op, e.packet_replication_engine_entry.multicast_group_entry)
            else:
                self.store.write_counter(op, e.counter_entry)
        self.sw._on_write(self.store)

    def job(self, job_id: int, contributors: list[Peer], **kw) -> None:
        """Install a job the way the controller does (see :func:`job_entities`)."""
        self.write(job_entities(job_id, contributors, **kw))

    def send(self, *frames: tuple[int, bytes]) -> list[tuple[int, tuple]]:
        """Process frames in one batch; returns (port, (dst_mac, src, dst, message))."""
        out = self.sw.process_frames(list(frames))
        for _p, f in out:   # every emitted IPv4 header carries a valid checksum
            assert ipv4_checksum(f[14:34]) == 0, f[14:34].hex()
        return [(p, read_frame(f, self.coords)) for p, f in out]

    def drops(self) -> dict[int, int]:
        c = self.sw.pipeline.counters.drops
        return {i: int(v) for i, v in enumerate(c) if v}

    def counter(self, which: str) -> np.ndarray:
        return getattr(self.sw.pipeline.counters, which).copy()


def job_entities(job_id: int, contributors: list[Peer], *, index: int = 0, lane_bits: int = 8,
                 table: list[int] = TABLE, slot_base: int = 0, num_slots: int = 8,
                 members: list[Peer] | None = None, parent: tuple[int, str] | None = None,
                 self_id: int = 0, expected: int | None = None, mcast_grp: int | None = None,
                 self_ip: str = SELF_IP, token: int = TOKEN) -> list:
    """finsy entities of one job: the group, then jobs, tables, senders and members entries
    (the controller's order: a job entry names its group, which must exist)."""
    members = contributors if members is None else members
    grp = index + 1 if mcast_grp is None else mcast_grp
    ents: list = [
        fy.P4MulticastGroupEntry(grp, replicas=[m.port for m in members]),
        fy.P4TableEntry("ingress.thc_validate.jobs", match=fy.P4TableMatch(job_id=job_id),
                        action=fy.P4TableAction(
                            "ingress.thc_validate.set_job", index=index, slot_base=slot_base,
                            num_slots=num_slots,
                            expected=len(contributors) if expected is None else expected,
                            lane_bits=lane_bits, mcast_grp=grp, has_parent=int(parent is not None),
                            parent_port=parent[0] if parent else 0,
                            parent_addr=parent[1] if parent else "0.0.0.0",
                            self_addr=self_ip, self_id=self_id, token=token)),
        fy.P4TableEntry("ingress.thc_load.tables", match=fy.P4TableMatch(job_id=job_id),
                        action=fy.P4TableAction("ingress.thc_load.load_table",
                                                **{f"v{i}": v for i, v in enumerate(table)})),
    ]
    for c in contributors:
        ents.append(fy.P4TableEntry(
            "ingress.thc_validate.senders",
            match=fy.P4TableMatch(job_id=job_id, rank=c.rank, ingress_port=c.port, src_addr=c.ip),
            action=fy.P4TableAction("ingress.thc_validate.sender", is_switch=int(c.is_switch),
                                    udp_port=c.udp_port)))
    for m in members:
        ents.append(fy.P4TableEntry(
            "egress.thc_members.members", match=fy.P4TableMatch(job_id=job_id, egress_port=m.port),
            action=fy.P4TableAction("egress.thc_members.set_member", dst_mac=m.mac, dst_addr=m.ip)))
    return ents


def data(p: Peer, job_id: int, slot: int, rnd: int, idx, flags: int = 0, rank: int | None = None,
         msg_type: int = lay.MsgType.DATA, lane_bits: int = lay.INDEX_BITS, coords: int = C,
         sport: int = lay.THC_UDP_PORT, **hdr) -> tuple[int, bytes]:
    """(port, frame) of a contribution from ``p`` (UDP source port ``sport``; ``coords``: the
    packet width; the header carries the harness's job token unless ``token=`` says
    otherwise)."""
    hdr.setdefault("token", TOKEN)
    lo, hi = lay.round_fields(rnd)       # rnd: the 48-bit round
    hdr.setdefault("round_hi", hi)
    h = codec.Header(msg_type=msg_type, job_id=job_id, slot=slot, round=lo,
                     rank=p.rank if rank is None else rank, flags=flags, lane_bits=lane_bits, **hdr)
    return p.port, thc_frame(p.mac, p.ip, SELF_IP, h, idx, coords=coords, sport=sport)


def sums(idxs, table=TABLE) -> np.ndarray:
    """Expected lane sums: Σ L[q] (THC step 9)."""
    t = np.asarray(table)
    return np.sum([t[np.asarray(i)] for i in idxs], axis=0)
