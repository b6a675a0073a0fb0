"""The impairment node: delay, jitter, loss, duplication, reordering and rate on a link.

Part of the testbed (it shapes the links of a Mininet testbed). For machines whose kernel lacks
``sch_netem`` (Mininet then silently builds the link without it):
:mod:`~control_plane.testbed.impair.forwarder` is a user-space forwarder between two interfaces,
:mod:`~control_plane.testbed.impair.node` sets up a namespace in the middle of a link (bridge +
nftables drop, the forwarder, or netem where the kernel has it),
:mod:`~control_plane.testbed.impair.probe` measures what the link really does and raises when an
asked impairment is not in effect. Run the forwarder with
``python -m control_plane.testbed.impair --a IF --b IF --delay-ms 5 --loss-pct 1``;
see docs/testbed.md."""

from control_plane.testbed.impair.params import Impairment, ImpairmentError

__all__ = ["Impairment", "ImpairmentError"]
