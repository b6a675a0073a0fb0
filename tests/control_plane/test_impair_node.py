"""The impairment node in network namespaces: nsA(a0) — node(a1 | b1) — nsB(b0).

Every test measures with probe frames sent from nsA and received in nsB, so what is checked is
what a frame crossing the node really experiences. Needs root (namespaces, raw sockets).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from control_plane.testbed.impair import Impairment, ImpairmentError
from control_plane.testbed.impair.forwarder import Forwarder, open_packet_socket
from control_plane.testbed.impair.node import configure, forwarder_command, kernel_has_netem
from control_plane.testbed.impair.probe import check, measure, open_probe_socket, probe
from host.netns import in_netns
from host.paths import REPO

pytestmark = [pytest.mark.root, pytest.mark.tools("ip", "tc", "sysctl")]


def _sh(cmd: list[str], stdin: str | None = None) -> str:
    p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=20, check=False)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p.stdout


class Chain:
    """Three namespaces and two veth pairs; removed by :meth:`close`."""

    def __init__(self) -> None:
        tag = f"ncim{os.getpid() % 100000}"
        self.ns = {k: f"{tag}-{k}" for k in ("a", "node", "b")}
        self.created: list[str] = []
        try:
            for ns in self.ns.values():
                _sh(["ip", "netns", "add", ns])
                self.created.append(ns)
            _sh(["ip", "-n", self.ns["a"], "link", "add", "a0", "type", "veth", "peer", "name", "a1",
                 "netns", self.ns["node"]])
            _sh(["ip", "-n", self.ns["b"], "link", "add", "b0", "type", "veth", "peer", "name", "b1",
                 "netns", self.ns["node"]])
            for side, dev in (("a", "a0"), ("b", "b0")):
                _sh(["ip", "netns", "exec", self.ns[side], "sysctl", "-qw",
                     f"net.ipv6.conf.{dev}.disable_ipv6=1"])
                _sh(["ip", "-n", self.ns[side], "link", "set", dev, "up"])
            self.tx = in_netns(self.ns["a"], lambda: open_probe_socket("a0"))
            self.rx = in_netns(self.ns["b"], lambda: open_probe_socket("b0"))
        except BaseException:
            self.close()
            raise

    def run_node(self, cmd: list[str], stdin: str | None = None) -> str:
        return _sh(["ip", "netns", "exec", self.ns["node"], *cmd], stdin)

    def forwarder(self, imp: Impairment) -> Forwarder:
        configure(imp, "a1", "b1", "forwarder", self.run_node)
        socks = in_netns(self.ns["node"], lambda: (open_packet_socket("a1"), open_packet_socket("b1")))
        fwd = Forwarder("a1", "b1", imp, socks=socks)
        fwd.start()
        return fwd

    def close(self) -> None:
        for s in ("tx", "rx"):
            if hasattr(self, s):
                getattr(self, s).close()
        for ns in self.created:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, check=False)


@pytest.fixture
def chain():
    c = Chain()
    try:
        yield c
    finally:
        c.close()


def test_clean_forwarder_passes_everything_in_order(chain):
    fwd = chain.forwarder(Impairment())
    try:
        res = probe(chain.tx, chain.rx, count=1000)
    finally:
        fwd.close()
    assert res.received == 1000 and res.duplicates == 0 and res.reordered == 0
    assert res.quantile(0.5) < 5.0
    assert fwd.stats()["a->b"]["sent"] == 1000
    # the check can fail: asking for loss on this clean link must raise
    with pytest.raises(ImpairmentError, match="loss asked 5%"):
        check(Impairment(loss_pct=5), {"a->b": res})
    with pytest.raises(ImpairmentError, match="delay asked 20 ms"):
        check(Impairment(delay_ms=20), {"a->b": res})


@pytest.mark.parametrize("imp", [
    Impairment(loss_pct=1, seed=1),
    Impairment(loss_pct=5, seed=2),
    Impairment(delay_ms=10, jitter_ms=2, seed=3),
    Impairment(dup_pct=5, reorder_pct=5, seed=4),
], ids=["loss1", "loss5", "delay10j2", "dup5-reorder5"])
def test_forwarder_impairments_measured(chain, imp):
    fwd = chain.forwarder(imp)
    try:
        res = measure(imp, chain.tx, chain.rx)
    finally:
        fwd.close()
    check(imp, {"a->b": res}, link="a0-b0")  # raises if any asked impairment is missing
    st = fwd.stats()["a->b"]
    assert st["received"] == res.sent
    if imp.loss_pct:
        assert st["dropped"] == res.lost  # every loss is the node's decision
    if imp.dup_pct:
        assert st["duplicated"] == res.duplicates


@pytest.mark.tools("nft")
def test_bridge_mode_loss_and_rate(chain):
    imp = Impairment(loss_pct=2, bandwidth_mbps=20)
    configure(imp, "a1", "b1", "bridge", chain.run_node)
    assert "numgen random mod 10000 < 200" in chain.run_node(["nft", "list", "ruleset"])
    res = measure(imp, chain.tx, chain.rx)
    check(imp, {"a->b": res})
    assert res.rate_mbps is not None and 10 < res.rate_mbps < 26


def test_forwarder_process_writes_stats(chain, tmp_path):
    imp = Impairment(delay_ms=3, loss_pct=5, seed=9)
    configure(imp, "a1", "b1", "forwarder", chain.run_node)
    stats, ready = tmp_path / "stats.json", tmp_path / "ready"
    cmd = ["ip", "netns", "exec", chain.ns["node"],
           *forwarder_command(imp, "a1", "b1", str(stats), str(ready), python=sys.executable)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        end = time.monotonic() + 20
        while not ready.exists():
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < end, "forwarder not ready after 20 s"
            time.sleep(0.05)
        res = measure(imp, chain.tx, chain.rx)
        check(imp, {"a->b": res})
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(10)
    assert rc == 0
    st = json.loads(stats.read_text())
    assert st["a->b"]["received"] == res.sent
    assert st["a->b"]["dropped"] == res.lost


def test_netem_mode_matches_the_kernel(chain):
    # Where the kernel has netem, that mode must measure right; where it has not (this
    # machine), asking for it must fail loudly instead of building an unimpaired link.
    imp = Impairment(delay_ms=5, loss_pct=2, bandwidth_mbps=20)
    if kernel_has_netem():
        configure(imp, "a1", "b1", "netem", chain.run_node)
        check(imp, {"a->b": measure(imp, chain.tx, chain.rx)})
    else:
        with pytest.raises(ImpairmentError, match="a1/b1"):
            configure(imp, "a1", "b1", "netem", chain.run_node)


def _collect(rx, run: int, wait_s: float = 0.5) -> set[int]:
    """Sequence numbers of run ``run``'s probe frames that ``rx`` receives within ``wait_s``."""
    import struct

    got: set[int] = set()
    rx.settimeout(0.05)
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        try:
            data = rx.recv(2048)
        except TimeoutError:
            continue
        if len(data) >= 34 and data[14:18] == b"NCPR":
            r, seq = struct.unpack_from("!II", data, 18)
            if r == run:
                got.add(seq)
    return got


@pytest.mark.parametrize("mode", ["bridge", "forwarder"])
def test_node_is_a_wire_whatever_addresses_frames_carry(chain, mode):
    # A link forwards every frame to its other end. Switch-to-switch frames of the switch
    # program do not carry their ends' own addresses (p4/v1model: a partial aggregate keeps the
    # worker's source MAC and goes to the child's own MAC; an answer swaps them), so the same
    # MAC shows up as a source on one side and as a destination from that side. A learning
    # bridge then files that MAC on the side it came from and discards every later frame sent
    # to it from there: in two buildings the root's results to building B never crossed the
    # WAN node and every B worker waited for a retransmission timeout per packet.
    import struct

    from control_plane.testbed.impair.probe import MAGIC, PROBE_ETHERTYPE

    configure(Impairment(bandwidth_mbps=100), "a1", "b1", mode, chain.run_node)
    fwd = None
    if mode == "forwarder":
        socks = in_netns(chain.ns["node"], lambda: (open_packet_socket("a1"),
                                                    open_packet_socket("b1")))
        fwd = Forwarder("a1", "b1", Impairment(), socks=socks)
        fwd.start()
    child, worker = bytes.fromhex("024e43000303"), bytes.fromhex("020000000303")
    run = 0x4C52

    def frame(dst: bytes, src: bytes, seq: int) -> bytes:
        return (struct.pack("!6s6sH4sII", dst, src, PROBE_ETHERTYPE, MAGIC, run, seq)
                + bytes(40))

    try:
        for seq in range(20):
            # side A: frames from the child's MAC (an answer), then frames to it (results)
            chain.tx.send(frame(worker, child, seq))
            chain.tx.send(frame(child, worker, 100 + seq))
            time.sleep(0.002)
        got = _collect(chain.rx, run)
    finally:
        if fwd is not None:
            fwd.close()
    assert {100 + s for s in range(20)} <= got, f"frames to a MAC seen on side A lost: {got}"
    assert set(range(20)) <= got
