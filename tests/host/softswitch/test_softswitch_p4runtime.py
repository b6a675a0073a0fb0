"""The software target's P4Runtime server, driven by finsy (the controller's client) and, for
requests finsy refuses to build, by raw gRPC stubs. Status codes follow the P4Runtime
specification v1.3 (arbitration 5.3, write errors 12, bytestrings 8.4)."""

from __future__ import annotations

import contextlib
import queue
import socket
import threading
import time
from collections.abc import Iterator

import finsy as fy
import grpc
import numpy as np
import pytest
from finsy.proto import p4r, p4r_grpc, rpc_status

from host.softswitch.entities import canonical
from host.softswitch.launch import AsyncLoop, free_tcp_port
from host.softswitch.p4info import netco_p4info, write_p4info
from host.softswitch.switch import SoftSwitch
from tests.support.softswitch import SELF_IP, C, data, job_entities, sums, worker

W = [worker(r) for r in range(3)]
SC = fy.GRPCStatusCode


@pytest.fixture
def server(tmp_path):
    sw = SoftSwitch()
    port = free_tcp_port()
    sw.serve(f"127.0.0.1:{port}")
    loop = AsyncLoop()
    info = write_p4info(netco_p4info(), tmp_path / "netco.p4info.txtpb")
    clients: list[fy.Switch] = []

    def client(election_id: int = 10) -> fy.Switch:
        opts = fy.SwitchOptions(p4info=info, p4blob=b"", device_id=1, initial_election_id=election_id)
        c = fy.Switch(f"c{len(clients)}", f"127.0.0.1:{port}", opts)
        loop.run(c.__aenter__(), timeout=30)
        clients.append(c)
        return c

    yield sw, port, loop, client
    for c in clients:
        with contextlib.suppress(Exception):   # already closed by the test
            loop.run(c.__aexit__(None, None, None), timeout=10)
    loop.close()
    sw.stop()


def test_finsy_pushes_pipeline_writes_and_reads(server):
    sw, _port, loop, client = server
    c = client()
    assert sw.service.store is not None                     # pipeline pushed by finsy
    loop.run(c.insert(job_entities(7, W, lane_bits=8, num_slots=16)))
    assert sw.pipeline.cfg.job_map[7] == 0
    jobs = loop.run(_collect(c.read(fy.P4TableEntry("ingress.thc_validate.jobs"))))
    assert len(jobs) == 1
    a = jobs[0].action
    assert a.name.endswith("set_job") and a.args["num_slots"] == 16 and a.args["expected"] == 3
    senders = loop.run(_collect(c.read(fy.P4TableEntry("ingress.thc_validate.senders"))))
    assert len(senders) == 3
    groups = loop.run(_collect(c.read(fy.P4MulticastGroupEntry())))
    assert [(g.multicast_group_id, sorted(g.replicas)) for g in groups] == [(1, [1, 2, 3])]
    # the data plane uses what was written; counters come back over P4Runtime
    idx = [np.arange(C) % 16, np.full(C, 3), np.zeros(C, int)]
    out = sw.process_frames([data(W[r], 7, 0, 0, idx[r]) for r in range(3)])
    assert len(out) == 3
    drops = loop.run(_collect(c.read(fy.P4CounterEntry("ingress.drops"))))
    assert len(drops) == 16 and all(d.packet_count == 0 for d in drops)
    contrib = loop.run(_collect(c.read(fy.P4CounterEntry("ingress.thc_slot.contributions", index=0))))
    assert [d.packet_count for d in contrib] == [3]
    # modify and delete go through as well
    loop.run(c.modify([fy.P4TableEntry(
        "ingress.thc_load.tables", match=fy.P4TableMatch(job_id=7),
        action=fy.P4TableAction("ingress.thc_load.load_table", **{f"v{i}": 2 * i for i in range(16)}))]))
    out = sw.process_frames([data(W[r], 7, 0, 2, idx[r]) for r in range(3)])
    from host.softswitch.frames import read_frame
    np.testing.assert_array_equal(read_frame(out[0][1])[3].values, sums(idx, [2 * i for i in range(16)]))
    loop.run(c.delete([fy.P4TableEntry("ingress.thc_validate.jobs", match=fy.P4TableMatch(job_id=7))]))
    assert sw.pipeline.cfg.job_map[7] == -1


async def _collect(it):
    return [x async for x in it]


def _codes(exc: fy.P4ClientError) -> list[SC]:
    return [d.canonical_code for d in exc.details.values()]


def test_finsy_sees_entry_errors_with_their_codes(server):
    _sw, _port, loop, client = server
    c = client()
    ents = job_entities(8, W[:1])
    loop.run(c.insert(ents))
    with pytest.raises(fy.P4ClientError) as e:
        loop.run(c.insert(ents[1:2]))
    assert e.value.code == SC.UNKNOWN and _codes(e.value) == [SC.ALREADY_EXISTS]
    missing = fy.P4TableEntry("ingress.thc_validate.jobs", match=fy.P4TableMatch(job_id=999),
                              action=ents[1].action)
    for op in (c.modify, c.delete):
        with pytest.raises(fy.P4ClientError) as e:
            loop.run(op([missing]))
        assert _codes(e.value) == [SC.NOT_FOUND]
    with pytest.raises(fy.P4ClientError) as e:
        loop.run(c.insert([fy.P4MulticastGroupEntry(1, replicas=[1])]))
    assert _codes(e.value) == [SC.ALREADY_EXISTS]


def test_backup_controller_cannot_write(server):
    _sw, _port, loop, client = server
    primary = client(election_id=20)
    backup = client(election_id=5)
    assert primary.is_primary and not backup.is_primary
    with pytest.raises(fy.P4ClientError) as e:
        loop.run(backup.insert(job_entities(9, W[:1])))
    assert e.value.code == SC.PERMISSION_DENIED
    loop.run(primary.insert(job_entities(9, W[:1])))


# -- raw stubs ----------------------------------------------------------------------------
class Stream:
    """A raw StreamChannel: send arbitration updates, read responses from a queue."""

    def __init__(self, stub: p4r_grpc.P4RuntimeStub) -> None:
        self.requests: queue.Queue = queue.Queue()
        self.responses: queue.Queue = queue.Queue()
        self.call = stub.StreamChannel(iter(self.requests.get, None))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for r in self.call:
                self.responses.put(r)
        except grpc.RpcError as exc:
            self.responses.put(exc)

    def arbitrate(self, election_id: int, device_id: int = 1):
        self.requests.put(p4r.StreamMessageRequest(arbitration=p4r.MasterArbitrationUpdate(
            device_id=device_id, election_id=p4r.Uint128(high=0, low=election_id))))
        return self.next()

    def next(self, timeout: float = 5.0):
        return self.responses.get(timeout=timeout)

    def close(self) -> None:
        self.requests.put(None)
        self.call.cancel()


def _eid(x: int) -> p4r.Uint128:
    return p4r.Uint128(high=0, low=x)


def test_arbitration_highest_election_id_is_primary(server):
    _sw, port, _loop, _client = server
    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = p4r_grpc.P4RuntimeStub(ch)
    a, b, c = Stream(stub), Stream(stub), Stream(stub)
    try:
        r = a.arbitrate(5)
        assert r.arbitration.status.code == grpc.StatusCode.OK.value[0]
        r = b.arbitrate(3)
        assert r.arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
        assert r.arbitration.election_id.low == 5
        assert a.next().arbitration.status.code == grpc.StatusCode.OK.value[0]   # re-announced
        err = c.arbitrate(5)                                                        # id in use
        assert isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.INVALID_ARGUMENT
        bad = Stream(stub)
        err = bad.arbitrate(7, device_id=2)
        assert isinstance(err, grpc.RpcError) and err.code() == grpc.StatusCode.NOT_FOUND
        # b raises its id: b becomes primary, a is told it is a backup
        assert b.arbitrate(10).arbitration.status.code == grpc.StatusCode.OK.value[0]
        assert a.next().arbitration.status.code == grpc.StatusCode.ALREADY_EXISTS.value[0]
        # writes: a (5) refused, b (10) allowed; no pipeline yet -> FAILED_PRECONDITION
        with pytest.raises(grpc.RpcError) as e:
            stub.Write(p4r.WriteRequest(device_id=1, election_id=_eid(5)))
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as e:
            stub.Write(p4r.WriteRequest(device_id=1, election_id=_eid(10)))
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # the primary leaves: nobody holds the highest id, a is told NOT_FOUND
        b.close()
        r = a.next()
        assert r.arbitration.status.code == grpc.StatusCode.NOT_FOUND.value[0]
        assert r.arbitration.election_id.low == 10
    finally:
        for s in (a, b, c):
            s.close()
        ch.close()


def test_invalid_entities_get_the_spec_codes(server):
    sw, port, loop, client = server
    c = client()                 # finsy pushes the pipeline, then we take over with a raw stream
    loop.run(c.insert([fy.P4MulticastGroupEntry(1, replicas=[1])]))   # named by the jobs below
    idx = sw.service.store.index
    jobs = idx.table("ingress.thc_validate.jobs")
    set_job = idx.action("ingress.thc_validate.set_job")
    unknown_job = idx.action("ingress.thc_validate.unknown_job")

    def entry(job_id: bytes = b"\x07", action=None, params=None, table_id=None) -> p4r.Update:
        te = p4r.TableEntry(table_id=jobs.id if table_id is None else table_id)
        te.match.add(field_id=1).exact.value = job_id
        a = set_job if action is None else action
        te.action.action.action_id = a.id
        vals = {**{name: 1 for name, _ in a.params.values()}, "lane_bits": 8} \
            if params is None else params
        for pid, (name, _bits) in a.params.items():
            if name in vals:
                te.action.action.params.add(param_id=pid, value=canonical(vals[name]))
        return p4r.Update(type=p4r.Update.INSERT, entity=p4r.Entity(table_entry=te))

    ch = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = p4r_grpc.P4RuntimeStub(ch)
    s = Stream(stub)
    try:
        assert s.arbitrate(1 << 40).arbitration.status.code == grpc.StatusCode.OK.value[0]
        eid = p4r.Uint128(high=0, low=1 << 40)

        def errs(updates):
            with pytest.raises(grpc.RpcError) as e:
                stub.Write(p4r.WriteRequest(device_id=1, election_id=eid, updates=updates))
            st = rpc_status.Status()
            st.ParseFromString(dict(e.value.trailing_metadata())["grpc-status-details-bin"])
            codes = []
            for d in st.details:
                err = p4r.Error()
                d.Unpack(err)
                codes.append(next(c for c in grpc.StatusCode if c.value[0] == err.canonical_code))
            return codes

        good = entry()
        too_wide = entry(params={**{n: 1 for n, _ in set_job.params.values()}, "num_slots": 1 << 16})
        missing = entry(params={"index": 1})
        default_only = entry(action=unknown_job, params={})
        no_table = entry(table_id=0x02FFFFFF)
        wide_key = entry(job_id=b"\x01\x00\x00")
        codes = errs([good, too_wide, missing, default_only, no_table, wide_key, good])
        C_ = grpc.StatusCode
        assert codes == [C_.OK, C_.OUT_OF_RANGE, C_.INVALID_ARGUMENT, C_.INVALID_ARGUMENT,
                         C_.NOT_FOUND, C_.OUT_OF_RANGE, C_.ALREADY_EXISTS]
        # reads: unknown table -> NOT_FOUND; registers are not served (as on BMv2)
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Read(p4r.ReadRequest(device_id=1, entities=[
                p4r.Entity(table_entry=p4r.TableEntry(table_id=0x02FFFFFF))])))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        # a P4Info that is not the netco program is refused
        with pytest.raises(grpc.RpcError) as e:
            stub.SetForwardingPipelineConfig(p4r.SetForwardingPipelineConfigRequest(
                device_id=1, election_id=eid, action=p4r.SetForwardingPipelineConfigRequest.VERIFY_AND_COMMIT,
                config=p4r.ForwardingPipelineConfig(p4info=netco_p4info().__class__())))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    finally:
        s.close()
        ch.close()
    assert SELF_IP


@pytest.mark.parametrize(("change", "field"), [
    ({"lane_bits": 7}, "lane_bits"),
    ({"expected": 0}, "expected"),
    ({"expected": 200}, "expected"),
    ({"num_slots": 0}, "num_slots"),
    ({"slot_base": 65535}, "slot_base"),
    ({"mcast_grp": 9}, "mcast_grp"),
    ({"mcast_grp": 0}, "mcast_grp"),
    ({"index": 100}, "index"),
    ({"parent": (0, "10.0.255.1")}, "parent_port"),   # issue 33 (7): was installed
    ({"parent": (3, "0.0.0.0")}, "parent_addr"),
    ({"token": 0}, "token"),                           # issue 33 (7): was installed
])
def test_nonsensical_job_entries_are_refused_naming_the_field(server, change, field):
    _sw, _port, loop, client = server
    c = client()
    ents = job_entities(5, W, **change)
    if "mcast_grp" in change:   # the job names a group nobody installed
        ents = [e for e in ents if not isinstance(e, fy.P4MulticastGroupEntry)]
    with pytest.raises(fy.P4ClientError) as e:
        loop.run(c.insert(ents))
    bad = [d for d in e.value.details.values() if d.canonical_code != SC.OK]
    assert [d.canonical_code for d in bad] == [SC.INVALID_ARGUMENT]
    assert field in bad[0].message
    assert sw_jobs(loop, c) == []


def sw_jobs(loop, c) -> list:
    return loop.run(_collect(c.read(fy.P4TableEntry("ingress.thc_validate.jobs"))))


def test_overlapping_slot_ranges_are_refused(server):
    _sw, _port, loop, client = server
    c = client()
    loop.run(c.insert(job_entities(5, W, index=0, slot_base=0, num_slots=8)))
    with pytest.raises(fy.P4ClientError) as e:
        loop.run(c.insert(job_entities(6, W[:2], index=1, slot_base=4, num_slots=8)))
    bad = [d for d in e.value.details.values() if d.canonical_code != SC.OK]
    assert [d.canonical_code for d in bad] == [SC.INVALID_ARGUMENT]
    assert "slot_base" in bad[0].message and "job 5" in bad[0].message
    assert [j.match["job_id"] for j in sw_jobs(loop, c)] == [5]
    loop.run(c.insert(job_entities(7, W[:2], index=2, slot_base=8, num_slots=8)))


def test_one_write_may_move_jobs_past_each_other(server):
    """The controller inserts a new job into a range another job leaves in the same Write."""
    _sw, _port, loop, client = server
    c = client()
    loop.run(c.insert(job_entities(5, W, index=0, slot_base=0, num_slots=8)))
    new = job_entities(4, W[:2], index=1, slot_base=0, num_slots=8)
    moved = job_entities(5, W, index=0, slot_base=8, num_slots=8)[1]
    loop.run(c.write([+e for e in new] + [~moved]))
    got = {j.match["job_id"]: j.action.args["slot_base"] for j in sw_jobs(loop, c)}
    assert got == {4: 0, 5: 8}


def _read_jobs(stub, timeout: float = 10.0) -> list:
    return list(stub.Read(p4r.ReadRequest(device_id=1, entities=[p4r.Entity(
        table_entry=p4r.TableEntry(table_id=0))]), timeout=timeout))


@contextlib.contextmanager
def _streams(addr: str, n: int) -> Iterator[tuple[p4r_grpc.P4RuntimeStub, list[Stream]]]:
    """``n`` streams opened on a new channel to ``addr``; closed, with it, after the block."""
    ch = grpc.insecure_channel(addr)
    stub = p4r_grpc.P4RuntimeStub(ch)
    streams = [Stream(stub) for _ in range(n)]
    try:
        yield stub, streams
    finally:
        for s in streams:
            s.close()
        ch.close()


@contextlib.contextmanager
def _own_switch(**service) -> Iterator[tuple[SoftSwitch, str]]:
    """A software target of this test's own, its P4Runtime service's settings ``service``:
    (the switch, its address); stopped after the block."""
    sw = SoftSwitch()
    for name, value in service.items():
        setattr(sw.service, name, value)
    addr = sw.serve("127.0.0.1:0")
    try:
        yield sw, addr
    finally:
        sw.stop()


def test_idle_streams_do_not_starve_reads_or_a_new_controller(server):
    """16 streams that never arbitrate: a Read and a controller session still get through."""
    _sw, port, loop, client = server
    client(election_id=20)                          # pushes the pipeline
    with _streams(f"127.0.0.1:{port}", 16) as (stub, _idle):
        assert _read_jobs(stub) is not None          # before the fix: DEADLINE_EXCEEDED
        c = client(election_id=30)                   # arbitrates and pushes the pipeline
        assert c.is_primary
        loop.run(c.insert(job_entities(3, W[:1])))


def test_waiting_streams_beyond_the_limit_close_the_oldest_and_silent_ones_time_out():
    with _own_switch(max_pending=4, arbitration_timeout=1.0) as (sw, addr), \
            _streams(addr, 6) as (stub, streams):
        outcomes = [s.next(timeout=10) for s in streams]
        codes = sorted(o.code().name for o in outcomes)
        # two are closed to make room for newer ones; the four left never arbitrate and are
        # closed after 1 s
        assert codes == ["DEADLINE_EXCEEDED"] * 4 + ["RESOURCE_EXHAUSTED"] * 2
        assert sw.service.evictions == 2
        a = Stream(stub)
        assert a.arbitrate(7).arbitration.status.code == grpc.StatusCode.OK.value[0]
        a.close()


def test_undecodable_requests_are_invalid_argument():
    """Issue 33 (7): bytes that are not the method's message were INTERNAL (gRPC's own
    deserializer failing), which blames the server; they are the client's INVALID_ARGUMENT, on
    every method, the stream too, and the server keeps serving."""
    sw = SoftSwitch()
    addr = sw.serve("127.0.0.1:0")
    ch = grpc.insecure_channel(addr)
    junk = b"\xff\xff\xff\xff\x0f"   # a truncated varint: no protobuf message decodes it
    try:
        for method in ("Write", "SetForwardingPipelineConfig", "GetForwardingPipelineConfig",
                       "Capabilities"):
            call = ch.unary_unary(f"/p4.v1.P4Runtime/{method}")
            with pytest.raises(grpc.RpcError) as exc:
                call(junk, timeout=10)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
            assert "do not decode" in exc.value.details()
        with pytest.raises(grpc.RpcError) as exc:
            list(ch.unary_stream("/p4.v1.P4Runtime/Read")(junk, timeout=10))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as exc:
            list(ch.stream_stream("/p4.v1.P4Runtime/StreamChannel")(iter([junk]), timeout=10))
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        stub = p4r_grpc.P4RuntimeStub(ch)          # still serving well-formed requests
        assert stub.Capabilities(p4r.CapabilitiesRequest(), timeout=10).p4runtime_api_version
    finally:
        ch.close()
        sw.stop()


def test_streams_that_never_arbitrate_cannot_lock_the_controller_out(server):
    """Issue 33 (6): 32 idle unauthenticated streams took every stream the target served
    (``controller status``: RESOURCE_EXHAUSTED). Waiting streams have their own capacity and a
    new one closes the oldest, so a controller always gets in and arbitrates."""
    sw, port, loop, client = server
    client(election_id=20)                          # pushes the pipeline
    with _streams(f"127.0.0.1:{port}", 40) as (_stub, idle):
        closed = [s.next(timeout=10) for s in idle[:32]]   # the oldest 32 make room
        assert {c.code() for c in closed} == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert "before arbitrating" in closed[0].details()
        c = client(election_id=30)                   # before the fix: RESOURCE_EXHAUSTED
        assert c.is_primary
        loop.run(c.insert(job_entities(3, W[:1])))
        assert sw.service.evictions >= 32


def test_arbitrated_streams_are_capped_per_address():
    with _own_switch(streams_per_peer=2) as (_sw, addr), _streams(addr, 3) as (_stub, streams):
        assert streams[0].arbitrate(5).arbitration.status.code == grpc.StatusCode.OK.value[0]
        assert streams[1].arbitrate(4).arbitration.status.code == \
            grpc.StatusCode.ALREADY_EXISTS.value[0]
        third = streams[2].arbitrate(9)
        assert isinstance(third, grpc.RpcError)
        assert third.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "per address" in third.details()


def test_tcp_connections_beyond_the_cap_are_closed(monkeypatch):
    """Issue 33 (6): 1,000 TCP connections were all accepted and kept."""
    from host.softswitch import server as server_mod

    monkeypatch.setattr(server_mod, "MAX_CONNECTIONS", 4, raising=False)
    sw = SoftSwitch()
    addr = sw.serve("127.0.0.1:0")
    host, _, port = addr.rpartition(":")
    socks = []
    try:
        for _ in range(12):
            socks.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(0.5)
        closed = 0
        for k in socks:
            k.settimeout(0.2)
            try:
                closed += k.recv(1) == b""
            except (TimeoutError, ConnectionResetError) as exc:
                closed += isinstance(exc, ConnectionResetError)
        assert closed >= 12 - 4
    finally:
        for k in socks:
            k.close()
        sw.stop()
