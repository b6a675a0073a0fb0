"""The controller's desired-state file for tests: software switch ``s1`` with hosts ``h1`` and
``h2`` on its ports 1 and 2, and the jobs a test names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: Job ``j`` (id 4) of both hosts, 10 slots.
JOB_J = "{name: j, id: 4, members: [h2, h1], num_slots: 10}"


def one_switch_net(addr: str, jobs: Sequence[str] = (JOB_J,),
                   tls: Mapping[str, object] | None = None) -> str:
    """The YAML file: ``s1`` at P4Runtime address ``addr`` (with a ``tls`` block of ``tls``'s
    fields when given), ``h1`` and ``h2``, and ``jobs`` (one YAML flow mapping each)."""
    block = ", tls: {" + ", ".join(f"{k}: {v}" for k, v in tls.items()) + "}" if tls else ""
    return (
        "switches:\n"
        f'  - {{name: s1, address: "{addr}", addr: 10.0.0.254, target: softswitch{block}}}\n'
        "hosts:\n"
        '  - {name: h1, mac: "02:00:00:00:00:01", ip: 10.0.0.1, attach: "s1:1"}\n'
        '  - {name: h2, mac: "02:00:00:00:00:02", ip: 10.0.0.2, attach: "s1:2"}\n'
        "jobs:\n" + "".join(f"  - {j}\n" for j in jobs))
