"""The job file: everything a worker needs to join one in-network THC job, in one file.

The controller writes it (``netco controller job FILE NAME --out PATH``, or ``netco run``,
which also hands its path to the ranks in :data:`ENV_JOB`); a worker loads it
(:func:`load`) and finds itself by its rank: member ``r`` of ``members`` is rank ``r``, the
order of the job's ``members`` in the controller's file (docs/attach.md). The format is JSON,
written with mode 0600 because it holds the job's token (docs/protocol.md, "Version 2").

Fields (``version`` 1):

========================  =====================================================================
``version``               1
``name``, ``job_id``      the job's name and id in the controller's file
``token``                 the job's secret (``set_job.token``), 1..2³²−1
``num_slots``             slots the controller gave the job (the worker's window)
``b``, ``g``, ``p``       THC parameters: index bits, granularity (table values 0..g), clip mass
``lane_bits``             result lane width installed for the job (8, 16 or 32)
``uplink``                ``indices`` or ``values`` (what DATA carries)
``policy``                ``exact`` or ``partial``
``coords_per_packet``     the switch's packet width (256; 512 or 1024 on the software target)
``worker_port``           the UDP port every rank sends from (its socket binds it; the
                          switches' sender bindings name it, issue 33); 0 or absent: any
                          port (each rank binds an ephemeral one)
``members``               per rank: ``rank``, ``host``, ``ip`` (the address the rank sends
                          from), ``switch`` (its attachment switch's name) and ``switch_udp``
                          (``[host, port]``: where it sends its THC datagrams)
========================  =====================================================================
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host.files import write_atomic
from host.protocol.layout import MAX_WORKERS, PACKET_WIDTHS

#: The environment variable that names the job file (``netco run`` sets it for its command).
ENV_JOB = "NETCO_JOB"
#: The job file format this module reads and writes.
VERSION = 1
#: Permission bits of a job file: it holds the token.
MODE = 0o600

#: Hex digits of a token that :func:`mask_token` shows (8 of its 32 bits).
SHOWN_HEX_DIGITS = 2

__all__ = ["ENV_JOB", "SHOWN_HEX_DIGITS", "JobFile", "JobFileError", "Member", "load",
           "mask_token", "write"]


def mask_token(token: int) -> str:
    """``token`` for a terminal or a log: only its last :data:`SHOWN_HEX_DIGITS` hex digits,
    e.g. ``******3f`` (enough to tell two tokens apart after a rotation, too few to help a
    guesser). The controller's ``show``/``job``/``rotate`` and the workers' errors print
    tokens so."""
    digits = f"{token:08x}"
    return "*" * (8 - SHOWN_HEX_DIGITS) + digits[-SHOWN_HEX_DIGITS:]


class JobFileError(ValueError):
    """A job file that cannot be used; one line naming the file, the field and the fix."""


@dataclass(frozen=True)
class Member:
    """One rank of the job: where it sends from and to."""

    rank: int
    host: str
    ip: str
    switch: str
    switch_udp: tuple[str, int]


@dataclass(frozen=True)
class JobFile:
    """A job as its workers see it (see the module docstring for the fields)."""

    name: str
    job_id: int
    token: int
    num_slots: int
    b: int
    g: int
    p: float
    lane_bits: int
    uplink: str
    policy: str
    coords_per_packet: int
    members: tuple[Member, ...]
    #: the UDP port every rank sends from; 0: an ephemeral port (the job names none)
    worker_port: int = 0

    @property
    def world(self) -> int:
        """Ranks in the job."""
        return len(self.members)

    def member(self, rank: int) -> Member:
        """Member ``rank`` (the rank's position in ``members``)."""
        if not 0 <= rank < self.world:
            raise JobFileError(f"job {self.name}: rank {rank} is not a member; the job has "
                               f"{self.world} members (ranks 0..{self.world - 1})")
        return self.members[rank]

    def to_json(self) -> dict[str, Any]:
        """The file's JSON object."""
        return {
            "version": VERSION, "name": self.name, "job_id": self.job_id, "token": self.token,
            "num_slots": self.num_slots, "b": self.b, "g": self.g, "p": self.p,
            "lane_bits": self.lane_bits, "uplink": self.uplink, "policy": self.policy,
            "coords_per_packet": self.coords_per_packet, "worker_port": self.worker_port,
            "members": [{"rank": m.rank, "host": m.host, "ip": m.ip, "switch": m.switch,
                         "switch_udp": list(m.switch_udp)} for m in self.members],
        }

    @classmethod
    def from_json(cls, obj: Any, source: str = "job file") -> JobFile:
        """Validate ``obj`` (a parsed job file); :class:`JobFileError` names the field."""
        def bad(field: str, why: str) -> JobFileError:
            return JobFileError(f"{source}: {field}: {why}")

        if not isinstance(obj, dict):
            raise bad("(top level)", "must be a JSON object; write it with "
                                     "`netco controller job FILE JOB --out PATH`")
        if obj.get("version") != VERSION:
            raise bad("version", f"{obj.get('version')!r} is not {VERSION}; write the file again "
                                 "with this netco (`netco controller job`)")

        def integer(field: str, lo: int, hi: int, default: int | None = None) -> int:
            v = obj.get(field, default)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise bad(field, f"{v!r} must be an integer in {lo}..{hi}")
            return v

        def choice(field: str, options: tuple) -> Any:
            v = obj.get(field)
            if v not in options:
                raise bad(field, f"{v!r} must be one of {', '.join(map(str, options))}")
            return v

        name = obj.get("name")
        if not isinstance(name, str) or not name:
            raise bad("name", f"{name!r} must be the job's name")
        p = obj.get("p")
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not 0 < p < 1:
            raise bad("p", f"{p!r} must be a number in (0, 1)")
        members_raw = obj.get("members")
        if not isinstance(members_raw, list) or not 1 <= len(members_raw) <= MAX_WORKERS:
            raise bad("members", f"must be a list of 1..{MAX_WORKERS} members")
        members = []
        for r, m in enumerate(members_raw):
            w = f"members[{r}]"
            if not isinstance(m, dict):
                raise bad(w, "must be an object with rank, host, ip, switch, switch_udp")
            if m.get("rank") != r:
                raise bad(f"{w}.rank", f"{m.get('rank')!r}: member {r} must have rank {r}")
            for k in ("host", "ip", "switch"):
                if not isinstance(m.get(k), str) or not m.get(k):
                    raise bad(f"{w}.{k}", f"{m.get(k)!r} must be a non-empty string")
            udp = m.get("switch_udp")
            if (not isinstance(udp, list) or len(udp) != 2 or not isinstance(udp[0], str)
                    or not isinstance(udp[1], int) or not 0 < udp[1] < 65536):
                raise bad(f"{w}.switch_udp", f"{udp!r} must be [host, port]")
            members.append(Member(r, m["host"], m["ip"], m["switch"], (udp[0], udp[1])))
        return cls(
            name=name, job_id=integer("job_id", 0, 0xFFFF), token=integer("token", 1, 0xFFFFFFFF),
            num_slots=integer("num_slots", 1, 0xFFFF), b=integer("b", 1, 8),
            g=integer("g", 1, 65535), p=float(p), lane_bits=choice("lane_bits", (8, 16, 32)),
            uplink=choice("uplink", ("indices", "values")),
            policy=choice("policy", ("exact", "partial")),
            coords_per_packet=choice("coords_per_packet", PACKET_WIDTHS),
            members=tuple(members), worker_port=integer("worker_port", 0, 0xFFFF, default=0))


def write(path: str | os.PathLike, job: JobFile) -> Path:
    """Write ``job`` to ``path`` (mode 0600, atomically); returns the path."""
    path = Path(path)
    write_atomic(path, json.dumps(job.to_json(), indent=2) + "\n", mode=MODE)
    return path


def load(path: str | os.PathLike | None = None) -> JobFile:
    """The job file at ``path``, or at the path in :data:`ENV_JOB`.

    Raises
    ------
    JobFileError
        One line: no path given and none in the environment, the file is missing or not
        readable, not JSON, or a field is wrong (named).
    """
    if path is None:
        path = os.environ.get(ENV_JOB)
        if not path:
            raise JobFileError(f"no job file: set {ENV_JOB}=PATH (written by `netco controller "
                               f"job FILE JOB --out PATH`) or start the command with `netco run "
                               f"--config FILE --job JOB -- ...`")
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise JobFileError(f"job file {p}: cannot read it ({exc.strerror or exc})") from None
    try:
        obj = json.loads(text)
    except ValueError as exc:
        raise JobFileError(f"job file {p}: not JSON ({exc}); write it with `netco controller "
                           f"job`") from None
    return JobFile.from_json(obj, source=f"job file {p}")
