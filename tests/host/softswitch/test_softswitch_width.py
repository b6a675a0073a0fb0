"""The software target's packet width (``--coords-per-packet``; docs/protocol.md, "Packet width").

A switch of width W takes DATA of W 4-bit indices and answers W lanes; the C fast path and the
Python reference agree frame for frame at every width; a job whose lanes do not fit a payload
at that width is refused when written, naming the field; packets of another width are dropped
and counted, never summed; a job whose lanes the controller rewrites answers the sums it keeps at
the new width.
"""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from finsy.proto import p4r

from host.protocol import layout as lay
from host.protocol.jobs import widest_width, width_problem
from host.protocol.layout import DropReason, MsgType
from host.softswitch import pipeline as pl_mod
from host.softswitch.entities import P4RuntimeError
from host.softswitch.frames import ipv4_checksum
from host.softswitch.pipeline import Pipeline
from tests.support.softswitch import Bench, data, job_entities, sums, worker

W = [worker(r) for r in range(3)]


def _bench(coords: int, lane_bits: int = 8, native: bool = True) -> Bench:
    x = Bench(pool_slots=8, coords=coords)
    x.job(7, W, num_slots=4, lane_bits=lane_bits)
    x.sw.pipeline.native = native and pl_mod._fastpath is not None
    x.sw.pipeline.fast = native
    return x


def _idx(rank: int, slot: int, coords: int) -> np.ndarray:
    rng = np.random.default_rng(1000 * rank + slot)
    return rng.integers(0, lay.TABLE_ENTRIES, coords)


@pytest.mark.parametrize("coords", [512, 1024])
@pytest.mark.parametrize("native", [False, True])
def test_a_wide_switch_sums_every_coordinate_of_a_wide_packet(coords, native):
    if native and pl_mod._fastpath is None:
        pytest.skip("the C fast path (host/softswitch/_fastpath) is not built")
    x = _bench(coords, native=native)
    frames = [data(w, 7, s, 1, _idx(w.rank, s, coords), coords=coords) for s in range(4) for w in W]
    out = x.send(*frames)
    assert x.drops() == {}
    got = {(p, m.header.slot): m for p, (_, _, _, m) in out}
    assert len(got) == 3 * 4                       # every slot's result to every member
    for s in range(4):
        want = sums([_idx(r, s, coords) for r in range(3)])
        for w in W:
            m = got[(w.port, s)]
            assert m.header.msg_type == MsgType.RESULT and m.header.elem_count == coords
            assert m.header.count == 3
            assert np.array_equal(m.values, want)
    if native:
        assert x.sw.pipeline.native_batches >= 1   # the C path took the wide batch


@pytest.mark.skipif(pl_mod._fastpath is None,
                    reason="the C fast path (host/softswitch/_fastpath) is not built")
@pytest.mark.parametrize("coords,lane_bits", [(1024, 8), (512, 8), (512, 16)])
def test_c_path_and_reference_agree_at_every_width(coords, lane_bits):
    """Contributions, a retransmission (RESENT), a DEADLINE release, a stale round: the same
    frames, bytes and order, and the same registers and sums either way."""
    rng = np.random.default_rng(coords + lane_bits)
    spec = [(int(rng.integers(0, 3)), int(rng.integers(0, 2)), int(rng.integers(1, 3)),
             int(rng.choice([0, 0, 0, int(lay.Flag.RETX), int(lay.Flag.DEADLINE)])))
            for _ in range(40)]
    frames = [data(W[w], 7, s, r, _idx(w, s, coords), flags=f, coords=coords)
              for w, s, r, f in spec]

    def run(native: bool) -> tuple:
        x = _bench(coords, lane_bits, native=native)
        groups = [frames] if native else [[f] for f in frames]
        out = [o for g in groups for o in x.sw.process_frames(g)]
        assert all(ipv4_checksum(f[14:34]) == 0 for _, f in out)
        p = x.sw.pipeline
        return (sorted(out), {k: v.tolist() for k, v in p.state().items()}, p.sums.tobytes(),
                x.drops(), p.native_batches)

    want, got = run(False), run(True)
    assert got[:4] == want[:4]
    assert got[4] >= 1


@pytest.mark.parametrize("native", [False, True])
def test_packets_of_another_width_are_dropped_not_summed(native):
    if native and pl_mod._fastpath is None:
        pytest.skip("the C fast path (host/softswitch/_fastpath) is not built")
    wide = _bench(1024, native=native)
    # a 256-wide DATA at a 1024 switch: its payload is cut short
    assert wide.send(data(W[0], 7, 0, 1, _idx(0, 0, 256))) == []
    assert wide.drops() == {int(DropReason.SHORT): 1}
    narrow = _bench(lay.COORDS_PER_PACKET, native=native)
    # a 1024-wide DATA at a 256 switch: more elements than a packet holds
    assert narrow.send(data(W[0], 7, 0, 1, _idx(0, 0, 1024), coords=1024)) == []
    assert narrow.drops() == {int(DropReason.MALFORMED): 1}
    for x in (wide, narrow):
        assert not x.sw.pipeline.st_state.any()    # no slot touched
        assert not x.sw.pipeline.sums.any()


@pytest.mark.parametrize("coords,lane_bits", [(1024, 16), (1024, 32), (512, 32)])
def test_a_job_whose_lanes_do_not_fit_the_width_is_refused_when_written(coords, lane_bits):
    x = Bench(pool_slots=8, coords=coords)
    with pytest.raises(P4RuntimeError) as exc:
        x.job(7, W, num_slots=4, lane_bits=lane_bits)
    assert exc.value.code == grpc.StatusCode.INVALID_ARGUMENT
    msg = str(exc.value)
    assert "set_job.lane_bits" in msg and f"--coords-per-packet {coords}" in msg
    assert f"at most {widest_width(lane_bits)}" in msg


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("before,after", [(8, 16), (16, 8), (8, 32), (32, 8)])
def test_a_job_whose_lanes_change_answers_its_sums_at_the_new_width(native, before, after):
    """A controller rewrites a job's ``lane_bits`` between two batches: the sums already kept
    (a finished round answered again to a retransmission, a round still filling) come out at
    the new width with the values BMv2's 32-bit registers would give, never reread at the
    wrong width (sums are kept as wide as the job's lanes: ``Pipeline.sums_for``)."""
    if native and pl_mod._fastpath is None:
        pytest.skip("the C fast path (host/softswitch/_fastpath) is not built")
    coords = 256
    x = _bench(coords, before, native=native)
    x.send(*[data(w, 7, 0, 1, _idx(w.rank, 0, coords), coords=coords) for w in W])  # finished
    x.send(*[data(w, 7, 1, 1, _idx(w.rank, 1, coords), coords=coords) for w in W[:2]])
    x.write([job_entities(7, W, num_slots=4, lane_bits=after)[1]], op=p4r.Update.MODIFY)
    assert x.sw.pipeline.repacked_cells == 0        # taken by the data plane, not the write
    out = x.send(data(W[0], 7, 0, 1, _idx(0, 0, coords), flags=int(lay.Flag.RETX),
                      coords=coords),
                 data(W[2], 7, 1, 1, _idx(2, 1, coords), coords=coords))
    assert x.drops() == {}
    assert x.sw.pipeline.repacked_cells == 4 * 2      # both data copies of the job's 4 slots
    got = {(p, m.header.slot): m for p, (_, _, _, m) in out}
    assert set(got) == {(W[0].port, 0)} | {(w.port, 1) for w in W}
    for (_, slot), m in got.items():
        assert m.header.lane_bits == after
        assert np.array_equal(m.values, sums([_idx(r, slot, coords) for r in range(3)]))


def test_widths_and_their_lanes():
    assert [widest_width(b) for b in lay.LANE_WIDTHS] == [1024, 512, 256]
    assert width_problem(300) is not None and "256, 512, 1024" in width_problem(300)
    assert width_problem(2048) is not None
    assert width_problem(1024, 8) is None and width_problem(1024, 16) is not None
    for w in lay.PACKET_WIDTHS:
        for b in lay.LANE_WIDTHS:
            p = lay.payload_for(MsgType.RESULT, b, w)
            assert (p is not None) == (width_problem(w, b) is None)
            if p is not None:
                assert p.count == w and p.nbytes <= lay.MAX_PAYLOAD_BYTES
        assert lay.payload_for(MsgType.DATA, lay.INDEX_BITS, w).nbytes == w // 2
        assert lay.payload_for(MsgType.NORM, 32, w) is lay.NORMS   # norms keep their size
    assert lay.payload_for(MsgType.DATA, lay.INDEX_BITS) is lay.INDICES


def test_a_pipeline_refuses_a_width_that_is_not_one():
    with pytest.raises(ValueError, match="coords=300"):
        Pipeline(8, coords=300)
    assert Pipeline(8, coords=1024).sums.shape == (32, 1024)
