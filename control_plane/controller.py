"""The P4Runtime controller: connect, become primary, push the pipeline, reconcile.

All I/O lives here (finsy, asyncio). For every switch of the config the controller

1. opens a P4Runtime stream and takes part in arbitration with its election id
   (P4Runtime §5); only the primary may write, so a controller that is not primary stops
   with :class:`NotPrimaryError` before touching anything;
2. pushes the pipeline (P4Info + BMv2 JSON, or the target's blob) unless the switch already
   runs the same one — finsy compares the pipeline cookie and skips the push when it
   matches, so a restarted (empty) switch gets its program back;
3. reads what is installed (all table entries, all multicast groups), computes the
   difference with the desired state (:func:`control_plane.reconcile.diff`) and writes only
   that, in WriteRequests of at most 150 updates; then reads again and checks the switch is
   in sync.

Read-only operations (:meth:`Controller.diff`, :meth:`Controller.status`) never push a
pipeline or write, and connect with a low election id so they never pre-empt a running
primary.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import finsy as fy
from finsy.proto import p4i

from control_plane.config import NetworkConfig, SwitchSpec
from control_plane.desired import desired_state, load_p4info
from control_plane.p4names import program_view
from control_plane.placement import JOBS_TABLE, Placement, limits_from_p4info, place
from control_plane.reconcile import Diff, describe, diff
from control_plane.thc_validate import SET_JOB, draw_token
from control_plane.tokens import TokenStore
from host.softswitch.server import MAX_WRITE_UPDATES

log = logging.getLogger(__name__)


class OnceFilter(logging.Filter):
    """Let a record whose message starts with one of ``prefixes`` through once per process.

    finsy warns "gNMI is not implemented" on every connection to a target without gNMI (the
    software target, BMv2 as netco runs it); one job connects several times.
    """

    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes
        self.seen: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        for p in self.prefixes:
            if p in msg:
                if p in self.seen:
                    return False
                self.seen.add(p)
        return True


#: finsy's warnings that say nothing new inside the current session (:meth:`Controller.session`
#: sets it; finsy's tasks inherit it): the software target never implements gNMI, and a
#: read-only session reports a missing pipeline itself (``status``) or expects one (the token
#: read before ``apply`` installs it).
EXPECTED: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("netco_finsy_expected",
                                                                           default=())
GNMI_MISSING = "gNMI is not implemented"
PIPELINE_MISSING = "Forwarding pipeline is not configured"


class ExpectedFilter(logging.Filter):
    """Drop a record whose message holds one of the session's :data:`EXPECTED` messages."""

    def filter(self, record: logging.LogRecord) -> bool:
        expected = EXPECTED.get()
        if not expected:
            return True
        msg = record.getMessage()
        return not any(e in msg for e in expected)


#: Installed on finsy's logger when this module is imported.
FINSY_ONCE = OnceFilter((GNMI_MISSING,))
FINSY_EXPECTED = ExpectedFilter()
logging.getLogger("finsy").addFilter(FINSY_EXPECTED)
logging.getLogger("finsy").addFilter(FINSY_ONCE)

#: Election id of read-only sessions (diff, status): below any writer's.
READ_ONLY_ELECTION_ID = 1
#: how long a writing controller waits for its own election id to come free (s). Election ids
#: are unique per role (P4Runtime §5): a switch refuses a second stream with the id of an open
#: one. The stream of a session that has just ended with the same id (the previous apply of
#: this controller file, FIELDING's update before this one) can stay open on the switch for a
#: moment after the client left, longer on a loaded machine.
ELECTION_GRACE_S = 5.0
#: Counters of the program (docs/protocol.md), indexed by job index or drop reason.
JOB_COUNTERS = ("ingress.thc_slot.contributions", "ingress.thc_output.results",
                "ingress.thc_output.resent")
DROP_COUNTER = "ingress.drops"
#: Times the switch's rate limit held a source (docs/security.md; one cell; a P4Info may lack it).
RATE_TRIPS_COUNTER = "ingress.rate_limit.trips"


class ControllerError(RuntimeError):
    """A switch could not be reconciled (unreachable, refused, write failed)."""


class NotPrimaryError(ControllerError):
    """Another controller with a higher election id is primary on the switch."""


@dataclass
class SwitchResult:
    """Outcome of one operation on one switch."""

    switch: str
    address: str
    diff: Diff | None = None
    writes: int = 0
    error: str | None = None
    primary: bool | None = None
    election_id: int | None = None
    pipeline: str | None = None  # "ours", "other", "none"
    installed: int = 0
    counters: dict[str, dict[int, int]] = field(default_factory=dict)
    in_sync_after: bool | None = None

    @property
    def rate_limit_trips(self) -> int | None:
        """Sources the switch's rate limit held (``ingress.rate_limit.trips``); None where it
        was not read (unreachable, or a program without the counter)."""
        if RATE_TRIPS_COUNTER not in self.counters:
            return None
        return self.counters[RATE_TRIPS_COUNTER].get(0, 0)

    @property
    def ok(self) -> bool:
        """True when the switch was reached and nothing failed."""
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        """A JSON-able summary (entries as one-line descriptions)."""
        out: dict[str, Any] = {
            "switch": self.switch, "address": self.address, "ok": self.ok, "error": self.error,
            "primary": self.primary, "election_id": self.election_id, "pipeline": self.pipeline,
            "installed": self.installed, "writes": self.writes,
        }
        if self.diff is not None:
            d = self.diff
            out["diff"] = {
                "insert": [describe(e) for e in d.to_insert],
                "modify": [describe(e) for e in d.to_modify],
                "delete": [describe(e) for e in d.to_delete],
                "foreign": [describe(e) for e in d.foreign],
                "unchanged": d.unchanged,
                "in_sync": d.in_sync,
            }
        if self.in_sync_after is not None:
            out["in_sync_after"] = self.in_sync_after
        if self.counters:
            out["counters"] = {k: {str(i): v for i, v in c.items()} for k, c in self.counters.items()}
        return out


class Controller:
    """Reconciles the switches of ``cfg`` towards its desired state.

    Parameters
    ----------
    cfg : NetworkConfig
        The validated desired-state file.
    p4info : P4Info, optional
        The program's P4Info; default :func:`control_plane.desired.load_p4info`.
    election_id : int, optional
        Overrides ``controller.election_id`` of the config.
    timeout : float
        Seconds to wait for a switch to accept the connection and arbitration.
    tls : finsy.GRPCCredentialsTLS, optional
        Connect to every switch over TLS with these credentials
        (:func:`control_plane.options.tls_credentials`, the ``--tls-*`` flags); without them a
        switch's ``tls`` block in the file applies (:meth:`credentials`).
    tokens : dict, optional
        Job id -> token to install instead of a fresh draw (a caller that knows the workers'
        tokens, e.g. after a switch restart lost every entry); the tokens the switches hold
        still win (:meth:`adopt_tokens`).
    state : TokenStore, optional
        The controller's token state (:mod:`control_plane.tokens`; the CLI passes the default
        one). A job without a ``tokens`` entry takes the token persisted for it on one of its
        switches before a fresh draw, and :meth:`apply` persists the tokens it installed on
        the switches it reconciled. Without it nothing is read or written.

    Raises
    ------
    TokenStoreError
        ``state`` is given and its file cannot be read or does not hold tokens.
    """

    def __init__(self, cfg: NetworkConfig, p4info: p4i.P4Info | None = None,
                 election_id: int | None = None, timeout: float = 15.0,
                 tls: fy.GRPCCredentialsTLS | None = None,
                 tokens: dict[int, int] | None = None, state: TokenStore | None = None) -> None:
        self.cfg = cfg
        self.state = state
        if p4info is None:
            p4info, self.p4info_source = load_p4info(cfg)
        else:
            self.p4info_source = "given"
        #: pushed to the switches as the compiler wrote it
        self.p4info = p4info
        # Entities are built, encoded and compared under the program's own names (a Tofino
        # P4Info prefixes them with the pipeline: p4names.program_view).
        view = program_view(p4info)
        self.schema = fy.P4Schema(view)
        self.placement: Placement = place(cfg, limits_from_p4info(view))
        #: job id -> the job's token (``set_job.token``): drawn here, replaced by the one the
        #: switches already hold when :meth:`apply` reads it back (:meth:`adopt_tokens`), so a
        #: second apply writes nothing and running workers keep theirs. Workers get it from
        #: here (``JobSpec.token``).
        self.tokens: dict[int, int] = {}
        #: job id -> where its token came from: ``given`` (``tokens``), ``persisted``
        #: (``state``), ``drawn`` (fresh, not installed yet) or ``switch`` (adopted)
        self.token_source: dict[int, str] = {}
        for j in cfg.jobs:
            given = (tokens or {}).get(j.id)
            kept = state.get(j.id, self.job_addresses(j.name)) if state is not None and not given \
                else None
            self.tokens[j.id] = given or kept or draw_token()
            self.token_source[j.id] = "given" if given else "persisted" if kept else "drawn"
        #: job ids whose token is not replaced by the one the switches hold (:meth:`rotate_token`)
        self.pinned: set[int] = set()
        self.desired: dict[str, list] = desired_state(cfg, view, self.placement, self.tokens)
        self.election_id = election_id if election_id is not None else cfg.controller.election_id
        self.timeout = timeout
        self.tls = tls
        #: updates sent by this object over its lifetime (all switches)
        self.writes = 0

    # -- connection -------------------------------------------------------------------------
    def _blob(self, sw: SwitchSpec) -> Path | bytes:
        if sw.p4blob is not None:
            if not sw.p4blob.exists():
                raise ControllerError(f"switches[{sw.name}].p4blob: {sw.p4blob} does not exist")
            return sw.p4blob
        if sw.target == "softswitch":
            return b""  # the software target needs no device config
        blob = self.cfg.controller.bmv2_json
        if not Path(blob).exists():
            raise ControllerError(f"{blob} missing: build the P4 program (netco p4 build) or set "
                                  "controller.bmv2_json")
        return Path(blob)

    def credentials(self, sw: SwitchSpec) -> fy.GRPCCredentialsTLS | None:
        """TLS credentials for ``sw``: the controller's flags if given, else the switch's
        ``tls`` block, else None (plain text)."""
        if self.tls is not None or sw.tls is None:
            return self.tls
        t = sw.tls
        return fy.GRPCCredentialsTLS(cacert=t.ca, cert=t.cert, private_key=t.key,
                                     target_name_override=t.server_name or "")

    @contextlib.asynccontextmanager
    async def session(self, sw: SwitchSpec, write: bool) -> AsyncIterator[fy.Switch]:
        """A connected finsy switch; with ``write`` it pushes the pipeline when primary."""
        opts = fy.SwitchOptions(
            p4info=self.p4info,  # type: ignore[arg-type]  # finsy accepts a P4Info message
            p4blob=self._blob(sw) if write else None,
            device_id=sw.device_id,
            initial_election_id=self.election_id if write else READ_ONLY_ELECTION_ID,
            channel_credentials=self.credentials(sw),
        )
        client = fy.Switch(sw.name, sw.address, opts)
        expected = ((GNMI_MISSING,) if sw.target == "softswitch" else ()) + \
            (() if write else (PIPELINE_MISSING,))
        quiet = EXPECTED.set(expected)   # copied into the tasks finsy starts from here
        try:
            try:
                await asyncio.wait_for(client.__aenter__(), self.timeout)
            except TimeoutError as exc:
                with contextlib.suppress(Exception):
                    await client.__aexit__(None, None, None)
                raise ControllerError(f"{sw.name}: no P4Runtime answer at {sw.address} within "
                                      f"{self.timeout:g} s") from exc
            except Exception as exc:
                raise ControllerError(f"{sw.name}: cannot connect to {sw.address}: "
                                      f"{_short(exc)}") from exc
            try:
                yield client
            finally:
                with contextlib.suppress(Exception):
                    await client.__aexit__(None, None, None)
        finally:
            with contextlib.suppress(ValueError):   # left in another context: nothing to undo
                EXPECTED.reset(quiet)

    @contextlib.asynccontextmanager
    async def primary_session(self, sw: SwitchSpec) -> AsyncIterator[fy.Switch]:
        """A write session in which this controller is primary on ``sw``.

        While another open stream holds this controller's own election id (a session with the
        same id that is still closing on the switch), it tries again for up to
        :data:`ELECTION_GRACE_S` (at most the controller's timeout).

        Raises
        ------
        NotPrimaryError
            Another controller is primary: a higher election id, or ours still held after
            the grace period (the message says which, and what to change).
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(ELECTION_GRACE_S, self.timeout)
        while True:
            async with self.session(sw, write=True) as client:
                if client.is_primary:
                    yield client
                    return
                held = client.primary_id
            if held != self.election_id or loop.time() >= deadline:
                raise NotPrimaryError(self._not_primary(sw, held))
            log.info("%s: election id %s still held by another session; trying again",
                     sw.name, held)
            await asyncio.sleep(0.1)

    def _not_primary(self, sw: SwitchSpec, held: int | None) -> str:
        if held == self.election_id:
            grace = min(ELECTION_GRACE_S, self.timeout)
            return (f"{sw.name}: election id {held} is in use by another open P4Runtime session "
                    f"(still open after {grace:g} s: another controller with the same "
                    f"controller.election_id); stop it or give this one another "
                    f"controller.election_id")
        return (f"{sw.name}: another controller is primary (election id {held} > ours "
                f"{self.election_id}); stop it or raise controller.election_id")

    # -- primitives -------------------------------------------------------------------------
    @staticmethod
    async def read_installed(client: fy.Switch) -> list:
        """Every table entry and multicast group the switch holds."""
        out: list = []
        async for e in client.read(fy.P4TableEntry()):
            out.append(e)
        async for e in client.read(fy.P4MulticastGroupEntry()):
            out.append(e)
        return out

    async def read_counters(self, client: fy.Switch) -> dict[str, dict[int, int]]:
        """Packet counts of the program's counters (index → packets), those the P4Info has."""
        names = {c.preamble.name for c in self.p4info.counters}
        return {name: await self.read_counter(client, name)
                for name in (DROP_COUNTER, *JOB_COUNTERS, RATE_TRIPS_COUNTER) if name in names}

    @staticmethod
    async def read_counter(client: fy.Switch, name: str) -> dict[int, int]:
        """Packet counts of one counter (index → packets; indices never counted may be
        missing)."""
        vals: dict[int, int] = {}
        async for e in client.read(fy.P4CounterEntry(name)):
            vals[int(e.index or 0)] = int(e.packet_count or 0)
        return vals

    async def _pipeline_state(self, client: fy.Switch) -> str:
        from finsy.p4client import P4ClientError
        from finsy.switch import P4ConfigResponseType

        try:
            reply = await client._get_pipeline_config_request(  # finsy has no public getter
                response_type=P4ConfigResponseType.P4INFO_AND_COOKIE)
        except P4ClientError as exc:
            if exc.is_pipeline_missing:
                return "none"
            raise
        if not reply.config.HasField("p4info"):
            return "none"
        return "ours" if reply.config.p4info == self.p4info else "other"

    # -- operations on one switch ------------------------------------------------------------
    async def apply_switch(self, sw: SwitchSpec, prune: bool = False, dry_run: bool = False) -> SwitchResult:
        """Reconcile one switch; returns what was (or, with ``dry_run``, would be) written."""
        res = SwitchResult(sw.name, sw.address)
        ctx = self.session(sw, write=False) if dry_run else self.primary_session(sw)
        async with ctx as client:
            res.primary, res.election_id = client.is_primary, client.election_id
            installed = await self.read_installed(client)
            res.installed = len(installed)
            res.diff = diff(self.desired[sw.name], installed, self.schema, prune=prune)
            res.pipeline = "ours" if not dry_run else await self._pipeline_state(client)
            if dry_run:
                return res
            updates = res.diff.updates(self.schema)
            if updates:
                try:
                    # in order, at most MAX_WRITE_UPDATES per WriteRequest: targets refuse larger
                    # Writes rather than lose the per-update errors (host.softswitch.server)
                    for i in range(0, len(updates), MAX_WRITE_UPDATES):
                        await client.write(updates[i : i + MAX_WRITE_UPDATES])
                except Exception as exc:
                    raise ControllerError(f"{sw.name}: write of {len(updates)} updates failed: "
                                          f"{_short(exc)}") from exc
            res.writes = len(updates)
            self.writes += len(updates)
            after = await self.read_installed(client)
            res.in_sync_after = diff(self.desired[sw.name], after, self.schema).in_sync
            if not res.in_sync_after:
                res.error = f"{sw.name}: still differs from the desired state after writing"
        return res

    async def status_switch(self, sw: SwitchSpec) -> SwitchResult:
        """Installed entries, pipeline, diff and counters of one switch (read only)."""
        res = SwitchResult(sw.name, sw.address)
        async with self.session(sw, write=False) as client:
            res.primary, res.election_id = client.is_primary, client.election_id
            res.pipeline = await self._pipeline_state(client)
            if res.pipeline == "none":
                res.error = f"{sw.name}: no pipeline installed (run: netco controller apply)"
                return res
            installed = await self.read_installed(client)
            res.installed = len(installed)
            res.diff = diff(self.desired[sw.name], installed, self.schema)
            res.counters = await self.read_counters(client)
        return res

    # -- absent ranks (control_plane.thc_slot) ------------------------------------------------
    def set_absent(self, switch: str, job_id: int, ranks: frozenset[int]) -> None:
        """Hold ``ranks`` of job ``job_id`` absent at ``switch``: its ``set_job.expected`` there
        leaves them out (``JobAtSwitch.absent``; ``control_plane.thc_slot``); written by the
        next :meth:`apply`."""
        per = tuple(dataclasses.replace(js, absent=frozenset(ranks)) if js.job.id == job_id
                    else js for js in self.placement.per_switch[switch])
        self.placement = dataclasses.replace(
            self.placement, per_switch={**self.placement.per_switch, switch: per})
        self.desired = desired_state(self.cfg, program_view(self.p4info), self.placement,
                                     self.tokens)

    # -- job tokens ---------------------------------------------------------------------------
    def job_addresses(self, job: str) -> list[str]:
        """P4Runtime addresses of the switches of job ``job``'s tree, in file order."""
        spec = next(j for j in self.cfg.jobs if j.name == job)
        tree = {n.switch for n in spec.tree}
        return [s.address for s in self.cfg.switches if s.name in tree]

    def rotate_token(self, job: str) -> int:
        """Give job ``job`` a fresh token (not its current one) that the next :meth:`apply`
        installs even where a switch holds the old one; returns it. Every worker of the job
        must then load the new token (a fresh job file, a restart)."""
        spec = next(j for j in self.cfg.jobs if j.name == job)
        old = self.tokens[spec.id]
        new = draw_token()
        while new == old:
            new = draw_token()
        self.tokens[spec.id] = new
        self.token_source[spec.id] = "drawn"
        self.pinned.add(spec.id)
        self.desired = desired_state(self.cfg, program_view(self.p4info), self.placement,
                                     self.tokens)
        return new

    def persist_tokens(self, results: list[SwitchResult]) -> None:
        """Persist (``state``) the tokens of the jobs on every switch of ``results`` that was
        reconciled without error; nothing without ``state``.

        Raises
        ------
        TokenStoreError
            The state file cannot be written.
        """
        if self.state is None:
            return
        by_name = {s.name: s for s in self.cfg.switches}
        out: dict[str, dict[int, int]] = {}
        for r in results:
            if not r.ok or r.switch not in by_name:
                continue
            jobs = {js.job.id for js in self.placement.per_switch.get(r.switch, ())}
            if jobs:
                out[by_name[r.switch].address] = {j: self.tokens[j] for j in sorted(jobs)}
        self.state.put(out)
        for per_job in out.values():
            for j in per_job:
                self.token_source[j] = "persisted"

    def installed_tokens(self, installed: list) -> dict[int, int]:
        """job id -> ``set_job.token`` of the jobs entries among ``installed`` (read back)."""
        table = self.schema.tables[JOBS_TABLE]
        action = self.schema.actions[SET_JOB]
        try:
            pid = action.params["token"].id
        except KeyError:            # a program without tokens (protocol version 1)
            return {}
        out: dict[int, int] = {}
        for e in installed:
            if not isinstance(e, fy.P4TableEntry):
                continue
            te = e.encode(self.schema)
            if te.table_entry.table_id != table.id or not te.table_entry.match:
                continue
            act = te.table_entry.action
            if act.WhichOneof("type") != "action" or act.action.action_id != action.id:
                continue
            job_id = int.from_bytes(te.table_entry.match[0].exact.value, "big")
            for p in act.action.params:
                if p.param_id == pid:
                    out[job_id] = int.from_bytes(p.value, "big")
        return out

    async def adopt_tokens(self, switches: list[SwitchSpec]) -> None:
        """Keep the tokens the switches already hold (first switch in the file wins) and
        rebuild the desired state with them; a job no switch holds keeps its fresh draw.
        A switch that cannot be read is skipped (its apply reports the error)."""
        async def read(sw: SwitchSpec) -> dict[int, int]:
            try:
                async with self.session(sw, write=False) as client:
                    return self.installed_tokens(
                        [e async for e in client.read(fy.P4TableEntry(JOBS_TABLE))])
            except Exception:
                log.debug("tokens of %s not read", sw.name, exc_info=True)
                return {}

        found = await asyncio.gather(*(read(sw) for sw in switches))
        held: dict[int, int] = {}
        for per_switch in found:
            for job_id, token in per_switch.items():
                held.setdefault(job_id, token)
        changed = False
        for job_id, token in held.items():
            if job_id in self.pinned:
                continue                     # rotated: the new token replaces the switches'
            if job_id in self.tokens and token and self.tokens[job_id] != token:
                self.tokens[job_id] = token
                self.token_source[job_id] = "switch"
                changed = True
        if changed:
            self.desired = desired_state(self.cfg, program_view(self.p4info), self.placement,
                                         self.tokens)

    # -- operations on all switches ----------------------------------------------------------
    async def _each(self, fn, switches: list[str] | None) -> list[SwitchResult]:
        chosen = [s for s in self.cfg.switches if switches is None or s.name in switches]
        await self.adopt_tokens(self.cfg.switches)   # all: a job spans switches not chosen

        async def one(sw: SwitchSpec) -> SwitchResult:
            try:
                return await fn(sw)
            except ControllerError as exc:
                return SwitchResult(sw.name, sw.address, error=str(exc))
            except Exception as exc:
                log.debug("switch %s failed", sw.name, exc_info=True)
                return SwitchResult(sw.name, sw.address, error=f"{sw.name}: {_short(exc)}")

        return list(await asyncio.gather(*(one(s) for s in chosen)))

    async def apply(self, prune: bool = False, switches: list[str] | None = None) -> list[SwitchResult]:
        """Reconcile every switch (concurrently); errors are reported per switch. With
        ``state``, the tokens installed on the switches reconciled without error are persisted
        (:meth:`persist_tokens`).

        Raises
        ------
        TokenStoreError
            The state file cannot be written (the switches are reconciled then).
        """
        if self.state is not None:
            self.state.check_writable()      # before writing any switch
        results = await self._each(lambda sw: self.apply_switch(sw, prune=prune), switches)
        self.persist_tokens(results)
        return results

    async def diff(self, prune: bool = False, switches: list[str] | None = None) -> list[SwitchResult]:
        """What :meth:`apply` would write, without writing or pushing anything."""
        return await self._each(lambda sw: self.apply_switch(sw, prune=prune, dry_run=True), switches)

    async def status(self, switches: list[str] | None = None) -> list[SwitchResult]:
        """Per-switch installed state, drift and counters."""
        return await self._each(self.status_switch, switches)


def _short(exc: BaseException) -> str:
    """First line of an exception, with finsy's P4 status details when present."""
    text = str(exc).strip() or type(exc).__name__
    first = text.splitlines()[0]
    status = getattr(exc, "status", None)
    code = getattr(status, "code", None)
    if code is not None and getattr(code, "name", None) and code.name not in first:
        first = f"{code.name}: {first}"
    # a Write's per-update errors: what the switch refused and why (e.g. a job's slot range
    # beyond the switch's real pool, which only the switch knows: issue 16, R3)
    details = getattr(exc, "details", None)
    if isinstance(details, dict) and details:
        errs = [f"update {i}: {getattr(e, 'message', e)}" for i, e in sorted(details.items())]
        first += "; " + "; ".join(errs[:3]) + (f"; ... ({len(errs)} in all)" if len(errs) > 3 else "")
    return first


def run_sync(coro):
    """Run a controller coroutine from synchronous code (the CLI)."""
    return asyncio.run(coro)
