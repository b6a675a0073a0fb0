"""A job's job file (:mod:`host.transport.jobfile`) from the validated desired-state file.

``netco controller job`` and ``netco run`` write what a worker loads: the job's parameters as
the controller installed them (slots from the placement, THC b/g/p, lane width, uplink,
policy), the packet width of its switches, its token, and per rank the member's host, address,
attachment switch and the UDP address it sends to: the attachment switch's ``udp`` address for
the member's port when the file gives one (the software target's ``--port N=udp:HOST:PORT``),
else the switch's ``addr`` and the THC UDP port (:data:`host.protocol.layout.THC_UDP_PORT`).
Pure: no I/O.
"""

from __future__ import annotations

from control_plane.config import NetworkConfig
from control_plane.placement import Placement
from host.protocol.layout import THC_UDP_PORT
from host.transport.jobfile import JobFile, Member

__all__ = ["build_job_file"]


def build_job_file(cfg: NetworkConfig, placement: Placement, job: str, token: int) -> JobFile:
    """The job file of job ``job`` of ``cfg`` placed by ``placement``, with ``token``.

    Parameters
    ----------
    cfg : NetworkConfig
        The validated desired-state file.
    placement : Placement
        Its placement (``Controller.placement``): the job's slot range.
    job : str
        The job's name (must be one of ``cfg.jobs``).
    token : int
        The job's installed token (``Controller.tokens`` after ``apply``, or the persisted one).

    Returns
    -------
    JobFile
        Member ``r`` is the job's ``members[r]`` (its rank).
    """
    spec = next(j for j in cfg.jobs if j.name == job)
    _, num_slots = placement.slots[spec.name]
    members = []
    for rank, name in enumerate(spec.members):
        host = cfg.host(name)
        sw = cfg.switch(host.switch)
        udp = sw.udp_address(host.port) or (sw.addr, THC_UDP_PORT)
        members.append(Member(rank=rank, host=host.name, ip=host.ip, switch=sw.name,
                              switch_udp=udp))
    # validation gives every switch of a job's tree the same width
    width = cfg.switch(spec.tree[0].switch).coords_per_packet
    return JobFile(name=spec.name, job_id=spec.id, token=token, num_slots=num_slots,
                   b=spec.thc.b, g=spec.thc.g, p=spec.thc.p, lane_bits=spec.lane_bits,
                   uplink=spec.uplink, policy=spec.policy, coords_per_packet=width,
                   members=tuple(members), worker_port=spec.worker_port or 0)
