"""The software aggregation target: ports, data plane loop and P4Runtime server in one process.

:class:`SoftSwitch` receives batches of frames from all its ports (``recvmmsg`` into one
preallocated buffer), runs :class:`~host.softswitch.pipeline.Pipeline` on the batch and sends
the outputs grouped by egress port (``sendmmsg``) from a second thread, so that the kernel's
send work of batch k (the system call releases the GIL) runs on the other core while batch
k + 1 is received and processed (:attr:`SoftSwitch.send_thread`; outputs double-buffered).
With the C fast path built, :meth:`SoftSwitch.run` runs the whole receive -> validate ->
aggregate -> learn -> send loop in C with the GIL released (``_fastpath.loop``,
``host/softswitch/_swloop.c``; sends on a second C thread), batch after batch, and comes back
to this module only on a control event (stop, a P4Runtime write or commit) or with a batch the
C path does not take, which the Python pipeline (the reference) then processes
(:attr:`SoftSwitch.c_loop`; ``NETCO_SOFTSWITCH_CLOOP=0`` keeps the Python loop).
The P4Runtime server runs in gRPC worker
threads; a write compiles a new configuration snapshot that the loop picks up with its next
batch, and a pipeline commit starts from empty aggregation state and zeroed counters, exactly
like loading a program onto a P4 target.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor

import grpc
import numpy as np
from finsy.proto import p4r

from host.busywait import SPIN_US
from host.protocol import framing as fr
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.softswitch import config as cfgmod
from host.softswitch.controls.common import ABSENT_SILENCE, INVALID_LIMIT
from host.softswitch.controls.native import LOOP_STATS, native_jobs
from host.softswitch.entities import EntityStore
from host.softswitch.learned import LearnedPorts
from host.softswitch.netio import GSO_SEGMENTS, SOCKADDR_IN, MsgBatch, Port, UdpPort
from host.softswitch.p4info import P4InfoIndex
from host.softswitch.pipeline import ROW, THC_OFF, Counters, Outputs, Pipeline, _fastpath
from host.softswitch.server import P4RuntimeService, TLSFiles, start_server

log = logging.getLogger(__name__)

#: Offset of the IPv4 destination address in a frame.
_DST = fr.offset("dst")
#: Offset of the THC header's job id in a frame (the learned ports' key: job and address).
_JOB = fr.offset("job_id")

#: Groups of datagrams received per UDP_GRO receive call of the C loop.
GRO_MSGS = 16

#: Most UDP reply addresses kept (learned only from validated datagrams, so at most one per
#: installed sender address; the bound is a guard).
MAX_LEARNED = 4096


def _at(field: str) -> slice:
    """The bytes of header ``field`` in a frame (:data:`host.protocol.framing.FIELDS`)."""
    off, bits = fr.FIELDS[field]
    return slice(off, off + bits // 8)


def _source(key: int) -> str:
    """``ADDRESS:PORT`` of a rate-limit source key (IPv4 address << 16 | UDP port)."""
    return f"{ipaddress.IPv4Address(key >> 16)}:{key & 0xFFFF}"


class SoftSwitch:
    """One software switch.

    Parameters
    ----------
    ports : iterable of Port
        Opened ports (:func:`host.softswitch.netio.open_port`).
    device_id : int
        P4Runtime device id.
    pool_slots : int
        Aggregation slots shared by the jobs (``THC_SLOTS`` in ``p4/v1model/include/size.p4``).
    batch : int
        Frames received per batch at most.
    coords : int
        Packet width: coordinates per DATA, RESULT and PARTIAL (``layout.PACKET_WIDTHS``;
        docs/protocol.md, "Packet width"). Jobs whose lanes do not fit are refused at Write.
    absent_silence : float
        Seconds a rank's deadline misses must last before the switch holds it absent
        (docs/protocol.md, "Absent contributors"; tests use 0).
    """

    def __init__(self, ports: Iterable[Port] = (), device_id: int = 1, pool_slots: int = dp.THC_SLOTS,
                 batch: int = 1024, coords: int = lay.COORDS_PER_PACKET,
                 absent_silence: float = ABSENT_SILENCE) -> None:
        self.ports: dict[int, Port] = {p.number: p for p in ports}
        self.pool_slots = pool_slots
        self.batch = batch
        self.coords = coords
        #: seconds of deadline misses before a rank is held absent (docs/protocol.md)
        self.absent_silence = absent_silence
        self.pipeline = Pipeline(pool_slots, coords=coords, absent_silence=absent_silence)
        self.service = P4RuntimeService(device_id, self._on_commit, self._on_write,
                                        cfgmod.job_entry_check(pool_slots, coords))
        self.server: grpc.Server | None = None
        self.rxb = MsgBatch(batch)
        self.lens = np.zeros(batch, dtype=np.int64)
        self.inports = np.zeros(batch, dtype=np.int64)
        self.stamps = np.zeros(batch, dtype=np.int64)
        #: send each batch's outputs from a second thread (set before :meth:`run`)
        self.send_thread = True
        #: microseconds the C loop polls before it sleeps (host/busywait.py; set before :meth:`run`)
        self.spin_us = SPIN_US
        #: frames failing validation one source (address and UDP port) may send per second
        #: before the C loop holds it for 2 s (0: no limit; docs/security.md, "Rate limit")
        self.invalid_limit = INVALID_LIMIT
        self._spare_out = Outputs(256)
        self._tx_pool: ThreadPoolExecutor | None = None
        self._tx_future: Future | None = None
        self.stop_event = threading.Event()
        self.tx_lost = 0
        #: frames the kernel refused to send (a destination it cannot reach from the port)
        self.tx_refused = 0
        self.batches = 0
        self.errors = 0
        self.any_udp = any(isinstance(p, UdpPort) for p in self.ports.values())
        #: run the data plane loop in C (``_fastpath.loop``) where the pipeline's C fast path
        #: is on; the Python loop otherwise (set before :meth:`run`)
        self.c_loop = (self.c_loop_available()
                       and os.environ.get("NETCO_SOFTSWITCH_CLOOP", "1") != "0")
        #: control flags of the C loop: [stop, configuration changed]
        self._ctl = np.zeros(2, dtype=np.uint8)
        #: the C loop's switch-level totals (LOOP_STATS)
        self.cstats = np.zeros(max(len(LOOP_STATS), 1), dtype=np.int64)
        #: the C loop's runs: returns for a batch the C path did not take, control events
        self.c_handoffs = 0
        #: frames those hand-backs gave the Python pipeline (a batch the C loop split keeps
        #: only the frames the reference drops before any state: ``_swloop.c``,
        #: ``partition_rejected``)
        self.c_handoff_frames = 0
        self.c_events = 0
        self._rate_trips = 0    # the C loop's rate-limit trips already logged
        self._c_memory = None   # the C loop's buffers (kept between its runs)
        self._port_tables()

    @staticmethod
    def c_loop_available() -> bool:
        """Whether the C loop is built (``_fastpath.loop``)."""
        return _fastpath is not None and hasattr(_fastpath, "loop")

    # -- control plane hooks --------------------------------------------------------------
    def _on_commit(self, store: EntityStore) -> None:
        idx = store.index

        def arr(name: str) -> np.ndarray:
            return store.counters[idx.counter(name).id]

        def optional(name: str) -> np.ndarray:
            return arr(name) if name in idx.counter_by_name else np.zeros(0, dtype=np.int64)

        counters = Counters(arr(cfgmod.DROPS), arr(cfgmod.CONTRIBUTIONS), arr(cfgmod.RESULTS),
                            arr(cfgmod.RESENT), optional(cfgmod.RANK_CONTRIBUTIONS),
                            optional(cfgmod.RATE_TRIPS))
        pipe = Pipeline(self.pool_slots, counters, coords=self.coords,
                        absent_silence=self.absent_silence)
        pipe.cfg = cfgmod.compile_store(store)
        self.pipeline = pipe
        self._ctl[1] = 1   # the C loop takes the new pipeline

    def _on_write(self, store: EntityStore) -> None:
        self.pipeline.cfg = cfgmod.compile_store(store)
        self._ctl[1] = 1   # the C loop takes the new configuration

    def load_pipeline(self, p4info) -> None:
        """Commit a P4Info locally (as a controller's SetForwardingPipelineConfig would)."""
        store = EntityStore(P4InfoIndex(p4info))
        store.entry_check = self.service.entry_check
        missing = cfgmod.check_program(store)
        if missing:
            raise ValueError(f"P4Info lacks {', '.join(missing)}")
        with self.service.lock:
            self.service.config = p4r.ForwardingPipelineConfig(p4info=p4info)
            self.service.store = store
            self._on_commit(store)

    def serve(self, address: str, tls: TLSFiles | None = None) -> str:
        """Start the P4Runtime server on ``address`` (TLS with ``tls``); returns the bound
        address (``host:port`` with the port actually listened on)."""
        self.server, bound = start_server(self.service, address, tls)
        return bound

    # -- data plane -----------------------------------------------------------------------
    def process_frames(self, frames: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
        """Run the pipeline on ``(port, frame)`` pairs in-process; returns ``(port, frame)``s.

        For tests; must not be used while :meth:`run` is looping.
        """
        n = len(frames)
        buf = np.zeros((max(n, 1), ROW), dtype=np.uint8)
        lens = np.zeros(max(n, 1), dtype=np.int64)
        ports = np.zeros(max(n, 1), dtype=np.int64)
        for i, (p, f) in enumerate(frames):
            m = min(len(f), ROW)
            buf[i, :m] = np.frombuffer(f[:m], dtype=np.uint8)
            lens[i] = m
            ports[i] = p
        return self.pipeline.process(buf, lens, ports, n).frames()

    def _port_tables(self) -> None:
        """Per-port lookup arrays so that receive/send bookkeeping is done per batch."""
        size = 512
        self.p_off = np.zeros(size, dtype=np.int64)
        self.p_udp = np.zeros(size, dtype=bool)
        self.p_bind = np.zeros(size, dtype=np.uint32)
        self.p_peer = np.zeros(size, dtype=bool)
        self.p_peer_addr = np.zeros(size, dtype=np.uint32)
        self.p_peer_port = np.zeros(size, dtype=np.int64)
        for p in self.ports.values():
            self.p_off[p.number] = p.offset
            if isinstance(p, UdpPort):
                self.p_udp[p.number] = True
                self.p_bind[p.number] = int.from_bytes(socket.inet_aton(p.bind[0]), "big")
                if p.peer is not None:
                    self.p_peer[p.number] = True
                    self.p_peer_addr[p.number] = p.peer_addr
                    self.p_peer_port[p.number] = p.peer[1]
        kinds = {(p.offset, p.named) for p in self.ports.values()}
        self.uniform = kinds.pop() if len(kinds) == 1 else None
        if self.uniform is not None:
            self.rxb.prepare(*self.uniform)
        #: UDP peers learned from validated datagrams: IPv4 address -> UDP port (shared with
        #: the C loop)
        self.learned = LearnedPorts(MAX_LEARNED)
        t = np.zeros(THC_OFF, dtype=np.uint8)
        t[_at("dst_mac")] = list(fr.mac_bytes("02:00:00:00:ff:fe"))
        t[_at("src_mac")] = list(fr.mac_bytes("02:00:00:00:ff:00"))
        t[_at("ethertype")] = (fr.ETHERTYPE_IPV4 >> 8, fr.ETHERTYPE_IPV4 & 0xFF)
        t[_at("verihl")], t[_at("ttl")], t[_at("proto")] = (fr.IPV4_VER_IHL, fr.DEFAULT_TTL,
                                                            fr.IP_PROTO_UDP)
        t[_at("dport")] = (lay.THC_UDP_PORT >> 8, lay.THC_UDP_PORT & 0xFF)
        self.udp_template = t

    def _udp_rx(self, n: int) -> None:
        """Give the UDP datagrams of rows ``0..n-1`` their Ethernet/IPv4/UDP headers
        (source = the datagram's sender, destination = the port's bound address)."""
        sel = self.p_udp[self.inports[:n]]
        allrows = sel.all()
        idx = slice(0, n) if allrows else np.flatnonzero(sel)
        rows = self.rxb.buf[idx] if not allrows else self.rxb.buf[:n]
        names = self.rxb.names[idx]
        k = len(names)
        if k == 0:
            return
        rows[:, :THC_OFF] = self.udp_template
        rows[:, _at("src")] = names["addr"].astype(">u4").view(np.uint8).reshape(k, 4)
        rows[:, _at("dst")] = self.p_bind[self.inports[idx]].astype(">u4").view(np.uint8).reshape(k, 4)
        rows[:, _at("sport")] = names["port"].astype(">u2").view(np.uint8).reshape(k, 2)
        ln = self.lens[idx]
        udp_len = ln + fr.UDP_HEADER_BYTES
        rows[:, _at("ip_len")] = (udp_len + fr.IPV4_HEADER_BYTES).astype(">u2").view(np.uint8).reshape(k, 2)
        rows[:, _at("udp_len")] = udp_len.astype(">u2").view(np.uint8).reshape(k, 2)
        self.lens[idx] = ln + THC_OFF
        if not allrows:
            self.rxb.buf[idx] = rows

    def _learn(self, n: int) -> None:
        """Learn the UDP port of each sender among rows ``0..n-1`` that passed validation
        (:attr:`Pipeline.accepted`: a bound job, sender and well-formed header). A datagram
        that failed any check teaches nothing, so junk from a member's address cannot redirect
        its results, and the table holds at most the senders the controller installed
        (issue 16, H1 and R1)."""
        rows = np.sort(self.pipeline.accepted)
        rows = rows[rows < n]
        rows = rows[self.p_udp[self.inports[rows]]]
        if rows.size == 0:
            return
        names = self.rxb.names[rows]
        jobs = self.rxb.buf[rows, _JOB:_JOB + 2].view(">u2")[:, 0].astype(np.uint64)
        # a port's datagrams mostly come from one host: a handful of changes per batch
        keys = (jobs << np.uint64(32)) | names["addr"].astype(np.uint64)
        sport = names["port"].astype(np.int64)
        change = np.flatnonzero((keys[1:] != keys[:-1]) | (sport[1:] != sport[:-1])) + 1
        learned = self.learned
        for i in [0, *change.tolist()]:
            learned[int(keys[i])] = int(sport[i])   # (emptied when full: a guard)

    def _send(self, out) -> None:
        n = out.n
        if n == 0:
            return
        txb = getattr(out, "txb", None)   # one message batch per output buffer
        if txb is None or txb.buf is not out.buf or txb.capacity < len(out.lens):
            txb = out.txb = MsgBatch(len(out.lens), out.buf)
        order = out.order
        ports = out.ports[order]
        off = self.p_off[ports]
        txb.iov["base"][:n] = txb.rows[order] + off.astype(np.uint64)
        txb.iov["len"][:n] = out.lens[order] - off
        txb.hdr["controllen"][:n] = 0
        udp = self.p_udp[ports]
        if udp.any():
            names = txb.names[:n]
            names["family"] = socket.AF_INET
            dst = out.buf[order, _DST:_DST + 4].view(">u4")[:, 0].astype(np.uint32)
            job = out.buf[order, _JOB:_JOB + 2].view(">u2")[:, 0].astype(np.uint64)
            peer = self.p_peer[ports]
            uniq, inv = np.unique((job << np.uint64(32)) | dst.astype(np.uint64),
                                  return_inverse=True)
            get = self.learned.get
            learned = np.array([get(d, lay.THC_UDP_PORT) for d in uniq.tolist()], dtype=np.int64)[inv]
            names["addr"] = np.where(peer, self.p_peer_addr[ports], dst)
            names["port"] = np.where(peer, self.p_peer_port[ports], learned)
            txb.hdr["name"][:n] = np.where(udp, txb.name_ptr[:n], 0)
            txb.hdr["namelen"][:n] = np.where(udp, SOCKADDR_IN.itemsize, 0)
        else:
            txb.hdr["name"][:n] = 0
            txb.hdr["namelen"][:n] = 0
        cuts = np.flatnonzero(ports[1:] != ports[:-1]) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), n]
        for a, e in zip(starts, ends, strict=True):
            p = self.ports.get(int(ports[a]))
            if p is None:
                self.tx_lost += e - a
                continue
            refused = txb.refused
            gso = getattr(p, "gso", None)
            if gso is not None and not gso.disabled:
                self.tx_lost += (e - a) - gso.send(p.fd, txb, a, e)
            else:
                self.tx_lost += (e - a) - txb.send(p.fd, a, e - a)
            if txb.refused != refused:
                self.tx_refused += txb.refused - refused
                if self.tx_refused <= 10:
                    log.warning("port %d: the kernel refused %d frame(s) (%s); sent the rest",
                                p.number, txb.refused - refused, os.strerror(txb.last_error))

    def poll_once(self, ep: select.epoll, fd2port: dict[int, Port], timeout: float) -> int:
        """Receive one batch from the ready ports, process it, send the outputs."""
        events = ep.poll(timeout)
        n = 0
        B = self.batch
        rxb = self.rxb
        uniform = self.uniform
        if uniform is not None:
            rxb.reset(B, uniform[1])
        got: list[tuple[int, int]] = []
        for fd, _ in events:
            p = fd2port[fd]
            gro = getattr(p, "gro", None)
            if gro is not None:
                # coalesced trains, split into rows (one datagram each) like recvmmsg's
                k = gro.recv_into(fd, rxb, n, B - n, p.offset)
            elif uniform is not None:
                k = rxb.recv_prepared(fd, n, B - n)
            else:
                k = rxb.recv(fd, n, B - n, p.offset, p.named)
            if k:
                got.append((p.number, k))
                n += k
                if n >= B:
                    break
        if n:
            self.lens[:n] = rxb.hdr["len"][:n]
            if len(got) == 1:
                self.inports[:n] = got[0][0]
                stamps = None
            else:
                self.inports[:n] = np.repeat([g[0] for g in got], [g[1] for g in got])
                self.stamps[:n] = rxb.stamps(0, n)
                stamps = self.stamps
            if self.any_udp:
                self._udp_rx(n)
            self._process_received(n, stamps)
        return n

    def _process_received(self, n: int, stamps: np.ndarray | None) -> None:
        """The pipeline on the ``n`` received rows (headers complete), learn, send."""
        self.batches += 1
        out = self.pipeline.process(self.rxb.buf, self.lens, self.inports, n, stamps)
        if self.any_udp:
            self._learn(n)
        if self._tx_pool is not None:
            self._send_beside(out)
        else:
            self._send(out)

    def _c_ports(self) -> tuple:
        return tuple((p.fd, p.number, p.offset, int(p.named), int(isinstance(p, UdpPort)),
                      int(self.p_bind[p.number]), int(bool(self.p_peer[p.number])),
                      int(self.p_peer_addr[p.number]), int(self.p_peer_port[p.number]),
                      int(getattr(p, "gro", None) is not None),
                      int(getattr(p, "gso", None) is not None and not p.gso.disabled))
                     for p in self.ports.values())

    def c_once(self, ep: select.epoll, fd2port: dict[int, Port], timeout: float) -> int:
        """Run the C loop (``_fastpath.loop``) until a control event or a batch it does not
        take, which the Python pipeline then processes here; the Python loop
        (:meth:`poll_once`) where the pipeline's C fast path is off."""
        pl = self.pipeline
        if not (pl.native and pl.fast):
            return self.poll_once(ep, fd2port, timeout)
        self._flush_sends()   # frames leave in batch order
        self._ctl[1] = 0
        cfg = pl.take_cfg()
        ports = list(self.ports.values())
        gso_off = np.zeros(max(len(ports), 1), dtype=np.int64)
        c = pl.counters
        rxb = self.rxb
        try:
            if self._c_memory is None:
                self._c_memory = _fastpath.new_memory()
            reason, n, several = _fastpath.loop(
                self._c_memory, self._ctl, (pl.live, self.cstats), self._c_ports(),
                (rxb.buf, rxb.names, self.lens, self.inports, self.stamps),
                native_jobs(cfg, pl.counters), cfg.job_map, pl.native_state(cfg), pl.native_consts(),
                (self.learned.addr, self.learned.port, self.learned.count),
                (c.contributions, c.results, c.resent, c.drops),
                (self.batch, max(1, int(timeout * 1000)), int(self.send_thread),
                 self.udp_template, GSO_SEGMENTS, GRO_MSGS, gso_off, self.spin_us,
                 self.invalid_limit))
        finally:
            for p, off in zip(ports, gso_off.tolist(), strict=False):
                if off and getattr(p, "gso", None) is not None:
                    p.gso.disabled = True
        self._report_rate_limit()
        if reason != 2:   # stop, a configuration change, or time to run signal handlers
            self.c_events += reason in (0, 1)
            return 0
        self.c_handoffs += 1
        self.c_handoff_frames += n
        self._process_received(n, self.stamps if several else None)
        return n

    def _report_rate_limit(self) -> None:
        """One warning line per source the C loop's rate limit held (``_swloop.c``, RL_*;
        docs/security.md): its address and how many invalid frames it sent in one second."""
        trips = int(self.cstats[LOOP_STATS["rate_trips"]]) if "rate_trips" in LOOP_STATS else 0
        if trips == self._rate_trips:
            return
        trip_counter = self.pipeline.counters.rate_trips   # ingress.rate_limit.trips
        if len(trip_counter):
            trip_counter[0] += trips - self._rate_trips
        src = int(self.cstats[LOOP_STATS["rate_trip_source"]])
        frames = int(self.cstats[LOOP_STATS["rate_trip_frames"]])
        log.warning("rate limit: %s sent more than %d frames that fail validation within 1 s; "
                    "its frames are dropped for 2 s (%d sources held so far, %d frames dropped; "
                    "netco switch --invalid-limit)", _source(src), frames - 1, trips,
                    int(self.cstats[LOOP_STATS["rate_limited"]]))
        self._rate_trips = trips

    def _send_beside(self, out: Outputs) -> None:
        """Send ``out`` on the send thread once the previous batch is out; the pipeline
        fills the other output buffer meanwhile (frames leave in batch order)."""
        self._flush_sends()
        self.pipeline.out, self._spare_out = self._spare_out, out
        assert self._tx_pool is not None
        self._tx_future = self._tx_pool.submit(self._send, out)

    def _flush_sends(self) -> None:
        """Wait until the send thread has sent the last batch handed to it."""
        fut, self._tx_future = self._tx_future, None
        if fut is not None:
            fut.result()

    def echo_once(self, ep: select.epoll, fd2port: dict[int, Port], timeout: float) -> int:
        """The plain receive-and-send loop on the same sockets and batches (benchmark limit):
        every message goes straight back where it came from, untouched."""
        events = ep.poll(timeout)
        rxb = self.rxb
        total = 0
        for fd, _ in events:
            p = fd2port[fd]
            k = rxb.recv(fd, 0, self.batch, p.offset, p.named)
            if k:
                rxb.iov["len"][:k] = rxb.hdr["len"][:k]
                rxb.hdr["controllen"][:k] = 0
                self.tx_lost += k - rxb.send(fd, 0, k)
                total += k
        self.uniform = None   # the echo loop rewrote the prepared vectors
        self.pipeline.rx += total
        self.pipeline.tx += total
        return total

    def run(self, idle_timeout: float = 0.05, echo: bool = False) -> None:
        """Loop until :meth:`stop` (``echo``: the plain receive-and-send loop instead)."""
        ep = select.epoll()
        fd2port = {p.fd: p for p in self.ports.values()}
        for fd in fd2port:
            ep.register(fd, select.EPOLLIN)
        log.info("software switch running%s: ports %s", " (echo)" if echo else "",
                 " ".join(p.describe() for p in self.ports.values()))
        if echo:   # the plain loop moves single datagrams
            for p in self.ports.values():
                if getattr(p, "gro", None) is not None:
                    p.set_gro(False)
        step = self.echo_once if echo else self.c_once if self.c_loop else self.poll_once
        if self.send_thread and not echo:
            self._tx_pool = ThreadPoolExecutor(1, thread_name_prefix="softswitch-tx")
        try:
            while not self.stop_event.is_set():
                try:
                    step(ep, fd2port, idle_timeout)
                except Exception:
                    # A bug must not take the switch down: the batch is lost, it is counted
                    # (stats()["errors"]) and logged, and the loop goes on.
                    self.errors += 1
                    if self.errors <= 10:
                        log.exception("data plane error (batch dropped)")
        finally:
            if self._tx_pool is not None:
                try:
                    self._flush_sends()
                except Exception:
                    self.errors += 1
                    log.exception("data plane error (last batch)")
                self._tx_pool.shutdown(wait=True)
                self._tx_pool = None
            ep.close()

    def stop(self) -> None:
        """Stop the loop and the P4Runtime server, close the ports."""
        self.stop_event.set()
        self._ctl[0] = 1
        if self.server is not None:
            self.server.stop(grace=0.5)
            self.server = None

    def close(self) -> None:
        """Close the ports' sockets."""
        for p in self.ports.values():
            p.close()

    def stats(self) -> dict:
        """Software-only totals (frames in/out/lost, batches) and the program's counters."""
        pl = self.pipeline
        c = pl.counters
        cs = {name: int(self.cstats[i]) for name, i in LOOP_STATS.items()}
        return {
            "rx": pl.rx, "tx": pl.tx, "tx_lost": self.tx_lost + cs.get("tx_lost", 0),
            "tx_refused": self.tx_refused + cs.get("tx_refused", 0), "routed": pl.routed,
            "batches": self.batches + cs.get("batches", 0), "errors": self.errors,
            "drops": {int(i): int(v) for i, v in enumerate(c.drops) if v},
            "contributions": int(c.contributions.sum()), "results": int(c.results.sum()),
            "resent": int(c.resent.sum()), "outcomes": pl.all_outcomes(), "time": time.time(),
            # UDP ports: coalesced trains received (UDP_GRO) and multi-datagram sends (GSO)
            "gro_trains": cs.get("gro_trains", 0) + sum(
                p.gro.trains for p in self.ports.values() if getattr(p, "gro", None) is not None),
            "gso_trains": cs.get("gso_trains", 0) + sum(
                p.gso.trains for p in self.ports.values() if getattr(p, "gso", None) is not None),
            # the C loop: its threads' CPU time, runs handed back to Python
            "c_loop": {"batches": cs.get("batches", 0), "cpu_ns": cs.get("cpu_ns", 0),
                       "handoffs": self.c_handoffs, "handoff_frames": self.c_handoff_frames,
                       "split_batches": cs.get("split_batches", 0), "events": self.c_events},
            # the per-source rate limit of frames that fail validation (C loop; _swloop.c)
            "rate_limit": {"dropped": cs.get("rate_limited", 0), "trips": cs.get("rate_trips", 0),
                           "last_source": _source(cs["rate_trip_source"])
                           if cs.get("rate_trips") else None},
        }
