"""host.ddp.attach.find_member: a rank finds its member by position, else by address (issue
"Attach and operate from the outside", item 1)."""

from __future__ import annotations

import pytest

from host.ddp.attach import AttachError, _here, find_member
from host.transport.jobfile import JobFile, Member

#: documentation addresses (RFC 5737) this machine does not have (checked: a machine may)
ELSEWHERE = [ip for ip in (f"{net}.{k}" for net in ("203.0.113", "198.51.100", "192.0.2")
                           for k in range(7, 40)) if not _here(ip)][:3]


def job(ips: list[str]) -> JobFile:
    return JobFile("demo", 1, 77, 16, 4, 30, 1 / 32, 8, "indices", "exact", 256,
                   tuple(Member(r, f"h{r + 1}", ip, "s1", ("127.0.0.1", 47001 + r))
                         for r, ip in enumerate(ips)))


def test_position_when_the_member_is_here():
    jf = job(["127.0.0.11", "127.0.0.12", "127.0.0.13"])     # all on loopback
    assert [find_member(jf, r, local_rank=0) for r in range(3)] == [0, 1, 2]


def test_by_address_when_the_rendezvous_numbered_nodes_otherwise():
    # this machine holds member 2 only (its node came up as rank 0 of the rendezvous)
    jf = job([ELSEWHERE[0], ELSEWHERE[1], "127.0.0.13"])
    assert find_member(jf, 0, local_rank=0) == 2
    # two members here, the second local rank takes the second of them
    jf = job([ELSEWHERE[0], "127.0.0.12", "127.0.0.13"])
    assert find_member(jf, 0, local_rank=1) == 2
    assert find_member(jf, 1, local_rank=0) == 1            # position wins when it is here


def test_no_member_here_is_one_line_naming_it():
    jf = job(ELSEWHERE)
    with pytest.raises(AttachError) as exc:
        find_member(jf, 1, local_rank=0)
    msg = str(exc.value)
    assert "\n" not in msg
    assert f"member 1's address {ELSEWHERE[1]} (h2) is not on this machine" in msg
