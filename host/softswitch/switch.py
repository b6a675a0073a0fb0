"""The software aggregation target: ports, data plane loop and P4Runtime server in one process.

:class:`SoftSwitch` receives batches of frames from all its ports (``recvmmsg`` into one
preallocated buffer), runs :class:`~host.softswitch.pipeline.Pipeline` on the batch and sends
the outputs grouped by egress port (``sendmmsg``). The P4Runtime server runs in gRPC worker
threads; a write compiles a new configuration snapshot that the loop picks up with its next
batch, and a pipeline commit starts from empty aggregation state and zeroed counters, exactly
like loading a program onto a P4 target.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Iterable

import grpc
import numpy as np
from finsy.proto import p4r

from host.softswitch import config as cfgmod
from host.softswitch.entities import EntityStore
from host.softswitch.netio import MsgBatch, Port
from host.softswitch.p4info import P4InfoIndex
from host.softswitch.pipeline import ROW, Counters, Pipeline
from host.softswitch.server import P4RuntimeService, start_server

log = logging.getLogger(__name__)


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
    """

    def __init__(self, ports: Iterable[Port] = (), device_id: int = 1, pool_slots: int = 256,
                 batch: int = 128) -> None:
        self.ports: dict[int, Port] = {p.number: p for p in ports}
        self.pool_slots = pool_slots
        self.batch = batch
        self.pipeline = Pipeline(pool_slots)
        self.service = P4RuntimeService(device_id, self._on_commit, self._on_write)
        self.server: grpc.Server | None = None
        self.rxb = MsgBatch(batch)
        self.lens = np.zeros(batch, dtype=np.int64)
        self.inports = np.zeros(batch, dtype=np.int64)
        self.stamps = np.zeros(batch, dtype=np.int64)
        self.txb = MsgBatch(len(self.pipeline.out.lens), self.pipeline.out.buf)
        self.stop_event = threading.Event()
        self.tx_lost = 0
        self.batches = 0

    # -- control plane hooks --------------------------------------------------------------
    def _on_commit(self, store: EntityStore) -> None:
        idx = store.index

        def arr(name: str) -> np.ndarray:
            return store.counters[idx.counter(name).id]

        counters = Counters(arr(cfgmod.DROPS), arr(cfgmod.CONTRIBUTIONS), arr(cfgmod.RESULTS),
                            arr(cfgmod.RESENT))
        pipe = Pipeline(self.pool_slots, counters)
        pipe.cfg = cfgmod.compile_store(store)
        self.pipeline = pipe

    def _on_write(self, store: EntityStore) -> None:
        self.pipeline.cfg = cfgmod.compile_store(store)

    def load_pipeline(self, p4info) -> None:
        """Commit a P4Info locally (as a controller's SetForwardingPipelineConfig would)."""
        store = EntityStore(P4InfoIndex(p4info))
        missing = cfgmod.check_program(store)
        if missing:
            raise ValueError(f"P4Info lacks {', '.join(missing)}")
        with self.service.lock:
            self.service.config = p4r.ForwardingPipelineConfig(p4info=p4info)
            self.service.store = store
            self._on_commit(store)

    def serve(self, address: str) -> str:
        """Start the P4Runtime server on ``address``; returns the bound address."""
        self.server = start_server(self.service, address)
        return address

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

    def _send(self, out) -> None:
        n = out.n
        if n == 0:
            return
        if self.txb.buf is not out.buf or self.txb.capacity < len(out.lens):
            self.txb = MsgBatch(len(out.lens), out.buf)
        ports = out.ports[:n]
        cuts = np.flatnonzero(np.diff(ports)) + 1
        starts = [0, *cuts.tolist()]
        ends = [*cuts.tolist(), n]
        for a, e in zip(starts, ends, strict=True):
            p = self.ports.get(int(ports[a]))
            if p is None:
                self.tx_lost += e - a
                continue
            p.prepare_send(self.txb, out.lens, a, e - a)
            self.tx_lost += (e - a) - self.txb.send(p.fd, a, e - a)

    def poll_once(self, ep: select.epoll, fd2port: dict[int, Port], timeout: float) -> int:
        """Receive one batch from the ready ports, process it, send the outputs."""
        events = ep.poll(timeout)
        n = 0
        B = self.batch
        rxb = self.rxb
        for fd, _ in events:
            p = fd2port[fd]
            k = rxb.recv(fd, n, B - n, p.offset, p.named)
            if k:
                self.lens[n: n + k] = rxb.hdr["len"][n: n + k]
                p.after_recv(rxb, self.lens, n, k)
                self.inports[n: n + k] = p.number
                self.stamps[n: n + k] = rxb.stamps(n, k)
                n += k
                if n >= B:
                    break
        if n:
            self.batches += 1
            out = self.pipeline.process(rxb.buf, self.lens, self.inports, n,
                                        self.stamps if len(events) > 1 else None)
            self._send(out)
        return n

    def run(self, idle_timeout: float = 0.05) -> None:
        """Loop until :meth:`stop`."""
        ep = select.epoll()
        fd2port = {p.fd: p for p in self.ports.values()}
        for fd in fd2port:
            ep.register(fd, select.EPOLLIN)
        log.info("software switch running: ports %s",
                 " ".join(p.describe() for p in self.ports.values()))
        try:
            while not self.stop_event.is_set():
                self.poll_once(ep, fd2port, idle_timeout)
        finally:
            ep.close()

    def stop(self) -> None:
        """Stop the loop and the P4Runtime server, close the ports."""
        self.stop_event.set()
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
        return {
            "rx": pl.rx, "tx": pl.tx, "tx_lost": self.tx_lost, "routed": pl.routed,
            "batches": self.batches, "drops": {int(i): int(v) for i, v in enumerate(c.drops) if v},
            "contributions": int(c.contributions.sum()), "results": int(c.results.sum()),
            "resent": int(c.resent.sum()), "outcomes": dict(pl.outcomes), "time": time.time(),
        }
