"""The rules every job's switch parameters obey, checked by the controller and the switch alike.

A job at a switch is described by the ``set_job`` action of ``ingress.thc_validate.jobs``
(``docs/protocol.md``, "Controller-installed state"). The controller checks the entries it
builds with :func:`job_problems` before writing them; the software target checks every entry a
P4Runtime client writes with the same function (and :func:`overlaps` against the other jobs), so
neither side can accept a job the other would refuse.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from host.protocol import layout as lay


def job_problems(params: Mapping[str, int], *, pool_slots: int | None = None,
                 max_jobs: int | None = None) -> list[tuple[str, str]]:
    """Problems of one job's ``set_job`` parameters, as ``(field, message)`` pairs.

    Parameters
    ----------
    params : mapping of str to int
        ``set_job`` parameters by name; absent ones are not checked.
    pool_slots : int, optional
        Aggregation slots of the switch: the job's range must lie inside.
    max_jobs : int, optional
        Size of the jobs table: ``index`` (the per-job counter cell) must stay below it.
    """
    out: list[tuple[str, str]] = []
    lane = params.get("lane_bits")
    if lane is not None and lane not in lay.LANE_WIDTHS:
        out.append(("lane_bits", f"{lane}: use one of {', '.join(map(str, lay.LANE_WIDTHS))}"))
    exp = params.get("expected")
    if exp is not None and not 1 <= exp <= lay.MAX_WORKERS:
        out.append(("expected", f"{exp}: a slot completes with 1..{lay.MAX_WORKERS} contributors "
                                "(the contributor bitmap is 32 bits)"))
    num = params.get("num_slots")
    if num is not None and num < 1:
        out.append(("num_slots", f"{num}: a job needs at least one slot"))
    base = params.get("slot_base")
    if (pool_slots is not None and base is not None and num is not None and num >= 1
            and base + num > pool_slots):
        out.append(("slot_base", f"slots {base}..{base + num - 1} leave the switch's pool of "
                                 f"{pool_slots} slots"))
    idx = params.get("index")
    if max_jobs is not None and idx is not None and idx >= max_jobs:
        out.append(("index", f"{idx}: the switch serves jobs 0..{max_jobs - 1}"))
    tok = params.get("token")
    if tok is not None and tok == 0:
        # 0 is what a header nobody filled in carries (issue 33, 7): a job's token never is
        out.append(("token", "0: a job's token is never 0 (docs/protocol.md, \"Version 2\"); "
                             "install the one the controller drew (1..4294967295)"))
    for flag in ("has_parent",):
        v = params.get(flag)
        if v is not None and v not in (0, 1):
            out.append((flag, f"{v}: must be 0 or 1"))
    if params.get("has_parent") == 1:
        # a job with a parent sends its partials there: port 0 and address 0.0.0.0 name none
        # (issue 33, 7: such a job was installed and its partials went nowhere)
        if params.get("parent_port") == 0:
            out.append(("parent_port", "0 with has_parent 1: give the port toward the parent "
                                       "switch (ports are numbered from 1)"))
        if params.get("parent_addr") == 0:
            out.append(("parent_addr", "0.0.0.0 with has_parent 1: give the parent switch's "
                                       "address"))
    return out


def lane_problem(lane_bits: int, workers: int, granularity: int) -> str | None:
    """Why result lanes of ``lane_bits`` cannot carry a job of ``workers`` workers at THC
    granularity ``granularity`` (None: they can). The controller checks a job's ``lane_bits``
    with it, and every worker checks the width it was given (``JobSpec.lane_bits``) the same way,
    then each RESULT's ``lane_bits`` field against it (issue 16, S2)."""
    if lane_bits not in lay.LANE_WIDTHS:
        return f"{lane_bits}: use one of {', '.join(map(str, lay.LANE_WIDTHS))}"
    need = workers * granularity
    if need > (1 << lane_bits) - 1:
        return (f"{lane_bits} bits cannot hold n·g = {workers}·{granularity} = {need}; "
                f"use {lay.lane_bits_for(workers, granularity)} or more")
    return None


def width_problem(coords: int, lane_bits: int | None = None) -> str | None:
    """Why a packet width of ``coords`` coordinates cannot carry a job whose results use
    ``lane_bits`` (None: it can; ``lane_bits`` None checks the width alone).

    The software target refuses such a job when it is written (``--coords-per-packet``), and a
    worker refuses the same ``JobSpec.coords_per_packet`` before it sends anything, so that the
    two sides never disagree on where a packet's coordinates start (docs/protocol.md, "Packet
    width"). DATA (4-bit indices, or the 8-bit values uplink) fits whenever the lanes fit.
    """
    if coords not in lay.PACKET_WIDTHS:
        return f"{coords}: use one of {', '.join(map(str, lay.PACKET_WIDTHS))}"
    if lane_bits is not None and coords * lane_bits // 8 > lay.MAX_PAYLOAD_BYTES:
        most = lay.MAX_PAYLOAD_BYTES * 8 // lane_bits
        return (f"{coords} coordinates of {lane_bits}-bit lanes need {coords * lane_bits // 8} B, "
                f"over the {lay.MAX_PAYLOAD_BYTES} B a payload may have; use at most {most}")
    return None


def widest_width(lane_bits: int) -> int:
    """The widest packet width (``layout.PACKET_WIDTHS``) whose results in ``lane_bits``-bit
    lanes fit a payload (:func:`width_problem`): 1024 for 8-bit lanes, 512 for 16, 256 for 32.
    What the launchers of the software target use unless told otherwise."""
    return max(w for w in lay.PACKET_WIDTHS if width_problem(w, lane_bits) is None)


def overlaps(base: int, num: int, others: Iterable[tuple[int, int, int]]) -> int | None:
    """The job id of the first ``(job_id, slot_base, num_slots)`` sharing a slot, or None."""
    for jid, b, n in others:
        if base < b + n and b < base + num:
            return jid
    return None


__all__ = ["job_problems", "lane_problem", "overlaps", "widest_width", "width_problem"]
