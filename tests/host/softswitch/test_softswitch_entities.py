"""The software target's entity store: deleting what is there, and NOT_FOUND for what is not."""

from __future__ import annotations

import grpc
import pytest
from finsy.proto import p4r

from host.softswitch.entities import DELETE, INSERT, EntityStore, P4RuntimeError
from host.softswitch.p4info import P4InfoIndex, fallback_p4info


def test_a_multicast_group_is_deleted_once_then_not_found():
    store = EntityStore(P4InfoIndex(fallback_p4info()))
    group = p4r.MulticastGroupEntry(multicast_group_id=5,
                                    replicas=[p4r.Replica(egress_port=1, instance=0)])
    store.write_multicast_group(INSERT, group)
    generation = store.generation
    store.write_multicast_group(DELETE, group)
    assert 5 not in store.groups and store.generation == generation + 1
    with pytest.raises(P4RuntimeError) as exc:
        store.write_multicast_group(DELETE, group)
    assert exc.value.code == grpc.StatusCode.NOT_FOUND
    assert "multicast group 5 does not exist" in str(exc.value)
    assert store.generation == generation + 1
