"""P4Runtime gRPC server of the software target (P4Runtime specification v1.3).

Implements what the netco controller uses, with the status codes of a real target:

* ``StreamChannel`` client arbitration per role: the primary is the live client holding the
  highest election id ever received; every change is announced to all clients of the role
  (``OK`` to the primary, ``ALREADY_EXISTS`` to backups, ``NOT_FOUND`` to all while no client
  holds the highest id); a second stream with an election id in use is closed with
  ``INVALID_ARGUMENT``; a wrong device id with ``NOT_FOUND``.
* ``SetForwardingPipelineConfig`` / ``GetForwardingPipelineConfig`` (primary only for Set;
  ``FAILED_PRECONDITION`` before any pipeline, with BMv2's message so finsy recognises it).
* ``Write`` (primary only, ``PERMISSION_DENIED`` otherwise): table entries, default actions,
  multicast groups, counters; per-update errors are returned the P4Runtime way — status
  ``UNKNOWN`` with one ``p4.v1.Error`` per update in the status details.
* ``Read`` of the same entities with wildcards; registers and meters are ``UNIMPLEMENTED``
  (BMv2 does not serve register access either, PI issue 376).

A controller disconnect changes nothing in the installed state.

Bounded (docs/security.md; issue 33, 6): streams that have arbitrated and streams still
waiting to have separate capacities. At most ``max_streams`` arbitrated streams, and
:data:`STREAMS_PER_PEER` of them from one peer address (the excess is answered
``RESOURCE_EXHAUSTED`` at arbitration). At most ``max_pending`` streams wait for their first
``MasterArbitrationUpdate`` (:data:`PENDING_PER_PEER` from one address): a new stream always
gets in and the oldest waiting one (of the same address when it holds its share) is closed
``RESOURCE_EXHAUSTED``, so streams that never arbitrate cannot take the capacity a controller
needs, however often they are reopened; one that stays silent for
:data:`ARBITRATION_TIMEOUT_S` is closed ``DEADLINE_EXCEEDED``. The worker pool keeps
:data:`UNARY_HEADROOM` threads beyond the streams so that Read, Write and pipeline RPCs always
find one, and the server accepts at most :data:`MAX_CONNECTIONS` TCP connections, closing
those without an RPC for :data:`IDLE_CONNECTION_S`. With TLS (:class:`TLSFiles`) and a
client CA, only holders of a client certificate signed by that CA can connect at all
(docs/security.md).
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
from finsy.proto import p4r, p4r_grpc, rpc_status
from google.protobuf import any_pb2
from google.protobuf.message import DecodeError

from host.softswitch.entities import EntityStore, P4RuntimeError
from host.softswitch.p4info import P4InfoIndex, parse_p4info

log = logging.getLogger(__name__)

API_VERSION = "1.3.0"
NO_PIPELINE = "No forwarding pipeline config set for this device."
ELECTION_USED = "Election id already exists"
_EVICT = object()
#: Arbitrated StreamChannels served at once by default; one more is RESOURCE_EXHAUSTED.
MAX_STREAMS = 32
#: Arbitrated streams from one peer address (IP, any port).
STREAMS_PER_PEER = 16
#: Streams waiting for their first MasterArbitrationUpdate; a new one closes the oldest.
MAX_PENDING = 8
#: Waiting streams from one peer address; a new one from it closes its own oldest.
PENDING_PER_PEER = 4
#: Worker threads beyond the streams: unary RPCs always find one.
UNARY_HEADROOM = 8
#: TCP connections the server accepts at once (gRPC's ``max_allowed_incoming_connections``).
MAX_CONNECTIONS = 128
#: A connection without an RPC for this long is closed (gRPC's ``max_connection_idle_ms``).
IDLE_CONNECTION_S = 30.0
#: Seconds a new stream may stay silent before its first MasterArbitrationUpdate.
ARBITRATION_TIMEOUT_S = 10.0
#: Updates per WriteRequest. The per-update errors travel in the status trailer, and gRPC
#: clients refuse trailers beyond 8-16 KiB (answering RESOURCE_EXHAUSTED themselves, so the
#: caller never learns which update failed); a larger Write is refused whole, nothing applied.
MAX_WRITE_UPDATES = 150
#: Failed updates whose messages are kept in one Write error (the others keep their codes).
MAX_ERROR_MESSAGES = 10


def _u128(v: int) -> p4r.Uint128:
    return p4r.Uint128(high=v >> 64, low=v & ((1 << 64) - 1))


def _int(u: p4r.Uint128) -> int:
    return (u.high << 64) | u.low


@dataclass(eq=False)
class _Stream:
    role: str
    election_id: int | None
    out: queue.Queue
    arbitrated: bool = False
    peer: str = ""
    evicted: bool = False


def peer_host(peer: str) -> str:
    """The address part of a gRPC peer string (``ipv4:10.0.0.1:5000`` -> ``10.0.0.1``,
    ``ipv6:[::1]:5000`` -> ``::1``); other forms (``unix:…``) are returned whole."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return peer


class Undecodable:
    """A request whose bytes are not the method's protobuf message: the servicer answers it
    ``INVALID_ARGUMENT`` (gRPC's own deserializer failing gives ``INTERNAL``, which says the
    server is at fault; issue 33, 7)."""

    def __init__(self, message: str, size: int, why: str) -> None:
        self.text = (f"the request is not a p4.v1.{message} ({size} bytes that do not decode: "
                     f"{why})")


def _lenient(message_cls):
    """A request deserializer that gives :class:`Undecodable` instead of raising."""
    def parse(data: bytes):
        try:
            return message_cls.FromString(data)
        except DecodeError as exc:
            return Undecodable(message_cls.__name__, len(data), str(exc) or "malformed")
    return parse


def _checked(method):
    """``method`` behind a check: an :class:`Undecodable` request is ``INVALID_ARGUMENT``."""
    def call(request, context):
        if isinstance(request, Undecodable):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, request.text)
        return method(request, context)
    return call


def add_service(service: P4RuntimeService, server: grpc.Server) -> None:
    """Register ``service`` as ``p4.v1.P4Runtime`` on ``server`` (what the generated
    ``add_P4RuntimeServicer_to_server`` does), with requests that do not decode answered
    ``INVALID_ARGUMENT`` (:class:`Undecodable`) rather than gRPC's ``INTERNAL``."""
    unary = {"Write": (p4r.WriteRequest, p4r.WriteResponse),
             "SetForwardingPipelineConfig": (p4r.SetForwardingPipelineConfigRequest,
                                             p4r.SetForwardingPipelineConfigResponse),
             "GetForwardingPipelineConfig": (p4r.GetForwardingPipelineConfigRequest,
                                             p4r.GetForwardingPipelineConfigResponse),
             "Capabilities": (p4r.CapabilitiesRequest, p4r.CapabilitiesResponse)}
    handlers = {name: grpc.unary_unary_rpc_method_handler(
                    _checked(getattr(service, name)), request_deserializer=_lenient(req),
                    response_serializer=resp.SerializeToString)
                for name, (req, resp) in unary.items()}
    handlers["Read"] = grpc.unary_stream_rpc_method_handler(
        _checked(service.Read), request_deserializer=_lenient(p4r.ReadRequest),
        response_serializer=p4r.ReadResponse.SerializeToString)
    handlers["StreamChannel"] = grpc.stream_stream_rpc_method_handler(
        service.StreamChannel, request_deserializer=_lenient(p4r.StreamMessageRequest),
        response_serializer=p4r.StreamMessageResponse.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("p4.v1.P4Runtime",
                                                                          handlers),))


class P4RuntimeService(p4r_grpc.P4RuntimeServicer):
    """The servicer; ``on_commit(store)`` and ``on_write(store)`` notify the data plane.

    Parameters
    ----------
    device_id : int
        The device id clients must name.
    on_commit : callable
        Called with the new :class:`EntityStore` after a pipeline commit.
    on_write : callable
        Called with the store after a Write that changed something.
    """

    def __init__(self, device_id: int, on_commit: Callable[[EntityStore], None],
                 on_write: Callable[[EntityStore], None],
                 entry_check: Callable[..., None] | None = None,
                 max_streams: int = MAX_STREAMS, max_pending: int = MAX_PENDING) -> None:
        self.device_id = device_id
        self.max_streams = max_streams
        self.max_pending = max_pending
        self.streams_per_peer = STREAMS_PER_PEER
        self.pending_per_peer = PENDING_PER_PEER
        self.arbitration_timeout = ARBITRATION_TIMEOUT_S
        self.on_commit = on_commit
        self.on_write = on_write
        self.entry_check = entry_check
        self.lock = threading.RLock()
        self.store: EntityStore | None = None
        self.config: p4r.ForwardingPipelineConfig | None = None
        self.saved: tuple[p4r.ForwardingPipelineConfig, EntityStore] | None = None
        self.streams: list[_Stream] = []
        self.highest: dict[str, int] = {}
        self.evictions = 0

    # -- arbitration ----------------------------------------------------------------------
    def _primary(self, role: str) -> _Stream | None:
        top = self.highest.get(role)
        for s in self.streams:
            if s.role == role and s.election_id is not None and s.election_id == top:
                return s
        return None

    def _announce(self, role: str) -> None:
        primary = self._primary(role)
        top = self.highest.get(role, 0)
        for s in self.streams:
            if s.role != role or s.election_id is None:
                continue
            if primary is None:
                code, msg = grpc.StatusCode.NOT_FOUND, "No primary"
            elif s is primary:
                code, msg = grpc.StatusCode.OK, "Is primary"
            else:
                code, msg = grpc.StatusCode.ALREADY_EXISTS, "Is backup"
            upd = p4r.MasterArbitrationUpdate(device_id=self.device_id, election_id=_u128(top))
            if role:
                upd.role.name = role
            upd.status.code = code.value[0]
            upd.status.message = msg
            s.out.put(p4r.StreamMessageResponse(arbitration=upd))

    def _arbitrate(self, s: _Stream, arb: p4r.MasterArbitrationUpdate) -> tuple[grpc.StatusCode, str] | None:
        if arb.device_id != self.device_id:
            return grpc.StatusCode.NOT_FOUND, f"Invalid device id {arb.device_id}"
        role = arb.role.name if arb.HasField("role") else ""
        eid = _int(arb.election_id) if arb.HasField("election_id") else None
        with self.lock:
            for o in self.streams:
                if o is not s and o.role == role and eid is not None and o.election_id == eid:
                    return grpc.StatusCode.INVALID_ARGUMENT, ELECTION_USED
            if s.evicted:
                return grpc.StatusCode.RESOURCE_EXHAUSTED, "closed before arbitrating"
            if not s.arbitrated:
                full = self._admit_arbitrated(s)
                if full is not None:
                    return grpc.StatusCode.RESOURCE_EXHAUSTED, full
            old_role = s.role
            s.role, s.election_id = role, eid
            s.arbitrated = True
            if eid is not None and eid >= self.highest.get(role, 0):
                self.highest[role] = eid
            self._announce(role)
            if old_role != role:
                self._announce(old_role)
        return None

    def _admit_arbitrated(self, s: _Stream) -> str | None:
        """Why ``s`` may not join the arbitrated streams, or None (caller holds the lock)."""
        done = [o for o in self.streams if o.arbitrated]
        if len(done) >= self.max_streams:
            log.warning("P4Runtime stream from %s refused: %d arbitrated streams open", s.peer,
                        len(done))
            return (f"this target serves {self.max_streams} arbitrated P4Runtime streams at "
                    "once; close idle ones")
        mine = sum(o.peer == s.peer for o in done)
        if mine >= self.streams_per_peer:
            log.warning("P4Runtime stream from %s refused: %d arbitrated streams from that "
                        "address", s.peer, mine)
            return (f"this target serves {self.streams_per_peer} arbitrated P4Runtime streams "
                    f"per address and {s.peer} holds them; close idle ones")
        return None

    def _admit_pending(self, s: _Stream) -> None:
        """Add ``s`` to the streams, closing the oldest waiting one when the waiting ones
        (of its address, or in all) are at their cap (caller holds the lock)."""
        waiting = [o for o in self.streams if not o.arbitrated and not o.evicted]
        same = [o for o in waiting if o.peer == s.peer]
        victim = (same[0] if len(same) >= self.pending_per_peer
                  else waiting[0] if len(waiting) >= self.max_pending else None)
        if victim is not None:
            victim.evicted = True
            victim.out.put(_EVICT)
            self.evictions += 1
            if self.evictions in (1, 10, 100, 1000) or self.evictions % 10000 == 0:
                log.warning("P4Runtime: %d streams closed before arbitrating to make room "
                            "(now from %s)", self.evictions, s.peer)
        self.streams.append(s)

    def StreamChannel(self, request_iterator, context) -> Iterator[p4r.StreamMessageResponse]:  # noqa: N802
        s = _Stream("", None, queue.Queue(), peer=peer_host(context.peer()))
        done = object()
        failure: list[tuple[grpc.StatusCode, str]] = []

        def reader() -> None:
            try:
                for req in request_iterator:
                    if isinstance(req, Undecodable):
                        failure.append((grpc.StatusCode.INVALID_ARGUMENT, req.text))
                        break
                    which = req.WhichOneof("update")
                    if which == "arbitration":
                        err = self._arbitrate(s, req.arbitration)
                        if err is not None:
                            failure.append(err)
                            break
                    elif s.election_id is None and which is not None:
                        failure.append((grpc.StatusCode.FAILED_PRECONDITION,
                                        "send a MasterArbitrationUpdate first"))
                        break
                    else:
                        log.debug("stream message %s ignored (no CPU port)", which)
            except Exception as exc:  # stream broken by the client
                log.debug("stream reader ended: %r", exc)
            s.out.put(done)

        with self.lock:
            self._admit_pending(s)
        t = threading.Thread(target=reader, daemon=True, name="p4rt-stream")
        t.start()
        opened = time.monotonic()
        try:
            while context.is_active():
                try:
                    msg = s.out.get(timeout=0.5)
                except queue.Empty:
                    if not s.arbitrated and time.monotonic() - opened > self.arbitration_timeout:
                        failure.append((grpc.StatusCode.DEADLINE_EXCEEDED,
                                        f"no MasterArbitrationUpdate within "
                                        f"{self.arbitration_timeout:g} s"))
                        break
                    continue
                if msg is done:
                    break
                if msg is _EVICT:
                    if not s.arbitrated:
                        failure.append((grpc.StatusCode.RESOURCE_EXHAUSTED,
                                        f"closed before arbitrating: more than "
                                        f"{self.max_pending} streams were waiting to"))
                        break
                    continue
                yield msg
        finally:
            with self.lock:
                self.streams.remove(s)
                if s.election_id is not None:
                    self._announce(s.role)
        if failure:
            context.abort(*failure[0])

    # -- helpers --------------------------------------------------------------------------
    def _check_device(self, device_id: int, context) -> None:
        if device_id != self.device_id:
            context.abort(grpc.StatusCode.NOT_FOUND, f"Invalid device id {device_id}")

    def _check_primary(self, request, context) -> None:
        role = request.role
        eid = _int(request.election_id)
        with self.lock:
            primary = self._primary(role)
            if primary is None or primary.election_id != eid:
                context.abort(grpc.StatusCode.PERMISSION_DENIED,
                              f"Not primary: election id {eid} is not the primary's for role {role!r}")

    # -- pipeline -------------------------------------------------------------------------
    def SetForwardingPipelineConfig(self, request, context):  # noqa: N802 (gRPC method name)
        self._check_device(request.device_id, context)
        self._check_primary(request, context)
        A = p4r.SetForwardingPipelineConfigRequest
        action = request.action
        if action == A.COMMIT:
            with self.lock:
                if self.saved is None:
                    context.abort(grpc.StatusCode.FAILED_PRECONDITION, "COMMIT without a saved config")
                self.config, self.store = self.saved
                self.saved = None
                self.on_commit(self.store)
            return p4r.SetForwardingPipelineConfigResponse()
        if action not in (A.VERIFY, A.VERIFY_AND_SAVE, A.VERIFY_AND_COMMIT, A.RECONCILE_AND_COMMIT):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown action {action}")
        try:
            index = P4InfoIndex(request.config.p4info)
            store = EntityStore(index)
            store.entry_check = self.entry_check
        except Exception as exc:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad P4Info: {exc}")
        from host.softswitch.config import check_program
        missing = check_program(store)
        if missing:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "P4Info lacks what this target implements (the netco program): "
                          + ", ".join(missing))
        if action == A.VERIFY:
            return p4r.SetForwardingPipelineConfigResponse()
        with self.lock:
            if action == A.VERIFY_AND_SAVE:
                self.saved = (request.config, store)
                return p4r.SetForwardingPipelineConfigResponse()
            if (action == A.RECONCILE_AND_COMMIT and self.store is not None and self.config is not None
                    and self.config.p4info == request.config.p4info):
                self.config = request.config   # same program: keep the forwarding state
                return p4r.SetForwardingPipelineConfigResponse()
            self.config, self.store = request.config, store
            self.on_commit(store)
        log.info("pipeline committed (%d tables)", len(store.tables))
        return p4r.SetForwardingPipelineConfigResponse()

    def GetForwardingPipelineConfig(self, request, context):  # noqa: N802 (gRPC method name)
        self._check_device(request.device_id, context)
        with self.lock:
            cfg = self.config
        if cfg is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
        R = p4r.GetForwardingPipelineConfigRequest
        out = p4r.ForwardingPipelineConfig()
        if cfg.HasField("cookie"):
            out.cookie.CopyFrom(cfg.cookie)
        if request.response_type in (R.ALL, R.P4INFO_AND_COOKIE):
            out.p4info.CopyFrom(cfg.p4info)
        if request.response_type in (R.ALL, R.DEVICE_CONFIG_AND_COOKIE):
            out.p4_device_config = cfg.p4_device_config
        return p4r.GetForwardingPipelineConfigResponse(config=out)

    def Capabilities(self, request, context):  # noqa: N802 (gRPC method name)
        return p4r.CapabilitiesResponse(p4runtime_api_version=API_VERSION)

    # -- write / read ---------------------------------------------------------------------
    def _apply(self, store: EntityStore, u: p4r.Update) -> None:
        e = u.entity
        which = e.WhichOneof("entity")
        if which == "table_entry":
            store.write_table_entry(u.type, e.table_entry)
        elif which == "packet_replication_engine_entry":
            pre = e.packet_replication_engine_entry
            if pre.WhichOneof("type") != "multicast_group_entry":
                raise P4RuntimeError(grpc.StatusCode.UNIMPLEMENTED, "clone sessions are not supported")
            store.write_multicast_group(u.type, pre.multicast_group_entry)
        elif which == "counter_entry":
            store.write_counter(u.type, e.counter_entry)
        else:
            raise P4RuntimeError(grpc.StatusCode.UNIMPLEMENTED, f"entity {which} is not supported")

    def Write(self, request, context):  # noqa: N802 (gRPC method name)
        self._check_device(request.device_id, context)
        self._check_primary(request, context)
        if request.atomicity != p4r.WriteRequest.CONTINUE_ON_ERROR:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "only CONTINUE_ON_ERROR atomicity is supported")
        if len(request.updates) > MAX_WRITE_UPDATES:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{len(request.updates)} updates in one Write; send at most "
                          f"{MAX_WRITE_UPDATES} per Write (nothing was applied)")
        errors: list[P4RuntimeError | None] = []
        with self.lock:
            store = self.store
            if store is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
            before = store.generation
            store.batch = request.updates
            try:
                for u in request.updates:
                    try:
                        self._apply(store, u)
                        errors.append(None)
                    except P4RuntimeError as exc:
                        errors.append(exc)
            finally:
                store.batch = ()
            if store.generation != before:
                self.on_write(store)
        failed = [e for e in errors if e is not None]
        if failed:
            status = rpc_status.Status(code=grpc.StatusCode.UNKNOWN.value[0],
                                       message=f"{len(failed)} of {len(errors)} updates failed")
            kept = 0
            for e in errors:
                keep = e is not None and kept < MAX_ERROR_MESSAGES
                kept += keep
                err = p4r.Error(canonical_code=(e.code.value[0] if e else 0),
                                message=(e.message if keep else ""))
                a = any_pb2.Any()
                a.Pack(err)
                status.details.append(a)
            context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
            context.abort(grpc.StatusCode.UNKNOWN, status.message)
        return p4r.WriteResponse()

    def Read(self, request, context):  # noqa: N802 (gRPC method name)
        self._check_device(request.device_id, context)
        with self.lock:
            store = self.store
            if store is None:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, NO_PIPELINE)
            out: list[p4r.Entity] = []
            try:
                for e in request.entities:
                    which = e.WhichOneof("entity")
                    if which == "table_entry":
                        out += [p4r.Entity(table_entry=t) for t in store.read_table_entries(e.table_entry)]
                    elif which == "packet_replication_engine_entry":
                        pre = e.packet_replication_engine_entry
                        if pre.WhichOneof("type") != "multicast_group_entry":
                            raise P4RuntimeError(grpc.StatusCode.UNIMPLEMENTED,
                                                 "clone sessions are not supported")
                        gid = pre.multicast_group_entry.multicast_group_id
                        out += [p4r.Entity(packet_replication_engine_entry=p4r.PacketReplicationEngineEntry(
                            multicast_group_entry=g)) for g in store.read_multicast_groups(gid)]
                    elif which == "counter_entry":
                        out += [p4r.Entity(counter_entry=c) for c in store.read_counters(e.counter_entry)]
                    else:
                        raise P4RuntimeError(grpc.StatusCode.UNIMPLEMENTED,
                                             f"reading {which} is not supported by this target")
            except P4RuntimeError as exc:
                context.abort(exc.code, exc.message)
        for i in range(0, len(out), 1000):
            yield p4r.ReadResponse(entities=out[i: i + 1000])
        if not out:
            yield p4r.ReadResponse()


@dataclass(frozen=True)
class TLSFiles:
    """PEM files of a TLS P4Runtime server.

    Attributes
    ----------
    cert, key : Path
        The server's certificate (chain) and private key.
    client_ca : Path or None
        CA that signs client certificates; when given, every client must present one
        (mutual TLS), otherwise any client that trusts ``cert`` may connect.
    """

    cert: Path
    key: Path
    client_ca: Path | None = None

    def credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials of these files."""
        ca = self.client_ca.read_bytes() if self.client_ca else None
        return grpc.ssl_server_credentials([(self.key.read_bytes(), self.cert.read_bytes())],
                                           root_certificates=ca, require_client_auth=ca is not None)


def start_server(service: P4RuntimeService, address: str,
                 tls: TLSFiles | None = None) -> tuple[grpc.Server, str]:
    """Serve ``service`` on ``address`` (``host:port``, port 0: any free one).

    Returns the started server and the address it listens on. Another process already
    listening on ``address`` is an error (port sharing is switched off).
    """
    host, _, want = address.rpartition(":")
    if want.isdigit() and int(want):
        _check_free(host, int(want))
    workers = service.max_streams + service.max_pending + UNARY_HEADROOM
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="p4rt"),
                         options=[("grpc.so_reuseport", 0),
                                  ("grpc.max_allowed_incoming_connections", MAX_CONNECTIONS),
                                  ("grpc.max_connection_idle_ms", int(IDLE_CONNECTION_S * 1000))])
    add_service(service, server)
    try:
        port = (server.add_secure_port(address, tls.credentials()) if tls
                else server.add_insecure_port(address))
    except RuntimeError as exc:   # grpc raises instead of returning 0 in newer releases
        raise OSError("address in use or not available") from exc
    if port == 0:
        raise OSError("address in use or not available")
    server.start()
    return server, f"{host}:{port}"


def _check_free(host: str, port: int) -> None:
    """Refuse a TCP address another process listens on (before gRPC logs its own error)."""
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise OSError(f"cannot resolve {host!r}") from exc
    fam, typ, proto, _, sa = infos[0]
    with socket.socket(fam, typ, proto) as s:
        # as gRPC does: connections of a previous server in TIME_WAIT do not block a restart,
        # a socket listening on the address does
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sa)
            s.listen(1)
        except OSError as exc:
            raise OSError("address in use or not available") from exc


__all__ = ["P4RuntimeService", "TLSFiles", "parse_p4info", "start_server"]
