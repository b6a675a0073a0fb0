"""The C slot loop over UDP with segmentation offload (``UdpEndpoint.gso``: UDP_SEGMENT sends,
UDP_GRO receive) through the software target, whose UDP ports coalesce and segment too: the
sums are bit-exact and identical to those of one-datagram-per-send workers and of the Python
loop, and the switch's statistics show that trains really went both ways. No root."""

from __future__ import annotations

import json

import numpy as np
import pytest

from control_plane.embedded import EmbeddedNetwork
from host.softswitch import pipeline as softswitch_pipeline
from host.thc import THCCodec
from host.thc.lanes import aggregate_packed
from host.thc.simulate import encode_workers
from host.transport import slots as slots_mod
from host.transport.job import JobSpec, NetworkAggregator
from host.transport.ports import UdpEndpoint, udp_gso_supported
from tests.support.transport import run_workers, worker_data

pytestmark = [
    pytest.mark.skipif(not udp_gso_supported(), reason="kernel without UDP GSO/GRO"),
    pytest.mark.skipif(slots_mod._slotloop is None, reason="C slot loop not built"),
]


@pytest.mark.parametrize(("n", "threads", "cloop"), [
    (2, "--send-thread", "1"), (4, "--send-thread", "1"), (2, "--no-send-thread", "1"),
    (2, "--send-thread", "0"), (4, "--no-send-thread", "0")])
def test_gso_workers_give_exact_sums_identical_to_plain_ones(n, threads, cloop, tmp_path,
                                                             monkeypatch):
    """Also the switch's two-thread data plane (send thread) against its one-thread one, and
    its loop in C (``_fastpath.loop``) against its Python loop."""
    monkeypatch.setenv("NETCO_UDP_GSO", "1")     # the switch process: GRO/GSO ports
    monkeypatch.setenv("NETCO_SOFTSWITCH_CLOOP", cloop)
    codec = THCCodec()
    numel = 300 * 256 + 77                       # partial last packet; more than the window
    xs = worker_data(n, numel, 5)
    encs = encode_workers(codec, xs)
    want = aggregate_packed([e.payload for e in encs], codec.table, 30, 4,
                            encs[0].layout.padded).astype(np.int64)
    net = EmbeddedNetwork(n, num_slots=128, workdir=tmp_path, switch_args=("--json", threads))
    results = {}
    with net:
        base = 1
        for mode in ("gso", "plain", "python", "gso"):
            aggs = []
            for r in range(n):
                a = net.address(r)
                ep = UdpEndpoint(a.switch, bind=(a.ip, 0), gso=0 if mode == "plain" else 64)
                agg = NetworkAggregator(ep, JobSpec(net.job_id, r, n, num_slots=128,
                                                    round_base=base, token=net.token))
                agg.window.native = mode != "python"
                aggs.append(agg)
            try:
                got = run_workers(n, lambda r, aggs=aggs: aggs[r].sum_encoded(encs[r], codec))
            finally:
                for a in aggs:
                    a.ep.close()
            assert all(a.window.last_native == (mode != "python") for a in aggs)
            for sums, count in got:
                assert count == n
                np.testing.assert_array_equal(sums.numpy().astype(np.int64), want)
            results[mode] = [s.numpy().copy() for s, _ in got]
            base += 1 << 16
    for mode in ("plain", "python"):
        for a, b in zip(results["gso"], results[mode], strict=True):
            np.testing.assert_array_equal(a, b)
    stats = json.loads(net.log_path.read_text().strip().splitlines()[-1])
    assert stats["gro_trains"] > 0, "the switch never received a coalesced train"
    assert stats["gso_trains"] > 0, "the switch never sent a segmented train"
    c_batches = stats["c_loop"]["batches"]
    c_loop = cloop == "1" and getattr(softswitch_pipeline._fastpath, "loop", None) is not None
    assert (c_batches > 0) if c_loop else (c_batches == 0), stats["c_loop"]
    # only late retransmissions may be dropped (STALE, DUPLICATE: spurious timeouts on a busy
    # machine); nothing malformed or foreign
    assert set(stats["drops"]) <= {"8", "9"}, stats["drops"]


def test_c_loop_falls_back_to_single_datagrams_where_the_route_cannot_segment():
    """UDP-Lite refuses UDP_SEGMENT with EIO, as a device without checksum offload does: the
    C loop sends the ring again one datagram per message and the exchange gives the same
    lanes and counts as the Python loop against the same scripted switch."""
    import socket
    import threading

    from tests.support.scripted import ScriptedSwitch, scripted_exchange

    class LiteSwitch(ScriptedSwitch):
        def __init__(self) -> None:   # the same script on a UDP-Lite socket
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)
            self.sock.bind(("127.0.0.1", 0))
            self.sock.settimeout(0.05)
            self.log, self.seen, self.stop = [], set(), threading.Event()
            self.t = threading.Thread(target=self.run, daemon=True)
            self.t.start()

    try:
        sw = LiteSwitch()
    except OSError:
        pytest.skip("no UDP-Lite in this kernel")
    ep = UdpEndpoint(sw.address, bind=("127.0.0.1", 0), gso=64)
    ep.sock.close()
    ep.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136)
    ep.sock.bind(("127.0.0.1", 0))
    ep.sock.setblocking(False)
    win, out, cnt, _, payload = scripted_exchange(True, sw=sw, ep=ep)
    assert win.last_native
    _, ref_out, ref_cnt, _, ref_payload = scripted_exchange(False)
    assert np.array_equal(ref_payload, payload)
    np.testing.assert_array_equal(out, ref_out)
    np.testing.assert_array_equal(cnt, ref_cnt)
