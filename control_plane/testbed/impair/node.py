"""Set up an impairment node: a namespace in the middle of a link, with two interfaces.

How the node impairs depends on what the kernel offers (:func:`choose_mode`):

``netem``
    the kernel has ``sch_netem``: the interfaces are bridged and each egress gets
    ``tc netem`` (delay, jitter, loss, duplication, reordering), under ``tc tbf`` for a rate.
``bridge``
    no netem, and only loss and/or a rate asked for: the interfaces are bridged (kernel
    forwarding), an nftables rule in the bridge's forward hook drops
    ``numgen random mod 10000 < 100·loss_pct`` of the frames, ``tc tbf`` caps the rate.
    Dropping in the middle matters: a drop at the sender's egress would be reported to the
    sending socket (ENOBUFS) and a sender that retries would never lose anything, and a drop
    at the receiver's ingress comes after AF_PACKET taps, so a raw-socket switch would still
    see the frame.
``forwarder``
    no netem and delay/jitter/duplication/reordering asked for: the user-space
    :class:`~control_plane.testbed.impair.forwarder.Forwarder`
    (``python -m control_plane.testbed.impair``) moves the frames and
    applies everything but the rate, which ``tc tbf`` on the egresses caps.

The caller runs the commands in the node's namespace (``run``) and, for ``forwarder``, starts
the process it gets from :func:`forwarder_command`; then it must measure the link
(:mod:`control_plane.testbed.impair.probe`) before trusting it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable

from control_plane.testbed.impair.params import Impairment, ImpairmentError
from host.tools import require

BRIDGE = "ncbr0"
NFT_TABLE = "netco_impair"
MODES = ("netem", "bridge", "forwarder")
#: The forwarder's module (``python -m FORWARDER_MODULE``); also how its process is recognised.
FORWARDER_MODULE = "control_plane.testbed.impair"

#: Bridge port settings that make the node's bridge a wire: no address learning, every
#: frame flooded to the other port. A learning bridge files a source MAC on the side it came
#: from and then discards frames sent to that MAC from the same side; the switch program's
#: switch-to-switch frames do exactly that (``p4/v1model``: a partial aggregate keeps the
#: worker's source MAC and is addressed to the child's own MAC, an answer swaps the two), and
#: a learning WAN node dropped every result the root of two buildings multicast to building
#: B (each B worker then waited one retransmission timeout per packet: 133 s for a 1M-element
#: all-reduce instead of ~1 s; docs/testbed.md).
WIRE = ("learning", "off", "flood", "on", "mcast_flood", "on")

#: ``run(argv, stdin_text=None) -> stdout``; raises RuntimeError when the command fails.
Runner = Callable[..., str]


def kernel_has_netem() -> bool:
    """True when ``tc qdisc add ... netem`` works (tried on the loopback device of a scratch
    network namespace, so nothing of the machine is touched)."""
    if shutil.which("tc") is None or shutil.which("unshare") is None:
        return False
    script = "ip link set lo up && tc qdisc add dev lo root netem delay 1ms"
    proc = subprocess.run(["unshare", "--net", "sh", "-c", script], capture_output=True, text=True,
                          check=False, timeout=10)
    return proc.returncode == 0


def choose_mode(imp: Impairment, netem: bool) -> str:
    """The node's mode for ``imp`` (see the module docstring)."""
    if netem and (imp.needs_timing or imp.loss_pct > 0):
        return "netem"
    if imp.needs_timing:
        return "forwarder"
    return "bridge"


def _tbf(dev: str, mbps: float, parent: bool = False) -> list[list[str]]:
    rate_bps = mbps * 1e6 / 8
    burst = int(max(2 * 1514, rate_bps * 0.002))  # 2 ms of traffic, at least two frames
    cmd = ["tc", "qdisc", "replace", "dev", dev, "root"]
    if parent:
        cmd += ["handle", "1:"]
    return [[*cmd, "tbf", "rate", f"{mbps:g}mbit", "burst", str(burst), "latency", "50ms"]]


def _netem_args(imp: Impairment) -> list[str]:
    args = ["netem"]
    delay = imp.delay_ms
    reorder = None
    if imp.reorder_pct:
        if delay > 0:
            reorder = imp.reorder_pct            # these go at once, the rest is delayed
        else:
            delay = imp.reorder_gap_ms           # hold back reorder_pct %: the rest goes at once
            reorder = 100.0 - imp.reorder_pct
    if delay or imp.jitter_ms:
        args += ["delay", f"{delay:g}ms"] + ([f"{imp.jitter_ms:g}ms"] if imp.jitter_ms else [])
    if imp.loss_pct:
        args += ["loss", f"{imp.loss_pct:g}%"]
    if imp.dup_pct:
        args += ["duplicate", f"{imp.dup_pct:g}%"]
    if reorder is not None:
        args += ["reorder", f"{reorder:g}%"]
    return args


def setup_commands(imp: Impairment, if_a: str, if_b: str, mode: str) -> list[list[str]]:
    """Commands (run inside the node) that bring ``if_a``/``if_b`` up and impair them."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: use one of {MODES}")
    cmds: list[list[str]] = []
    for dev in (if_a, if_b):
        cmds += [["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"],
                 ["ip", "link", "set", dev, "promisc", "on", "up"]]
    if mode in ("netem", "bridge"):
        cmds += [["ip", "link", "add", "name", BRIDGE, "type", "bridge", "stp_state", "0"],
                 ["sysctl", "-qw", f"net.ipv6.conf.{BRIDGE}.disable_ipv6=1"],
                 ["ip", "link", "set", if_a, "master", BRIDGE],
                 ["ip", "link", "set", if_b, "master", BRIDGE],
                 # a wire, not a learning switch: every frame goes to the other end, whatever
                 # its addresses (see WIRE below)
                 *(["ip", "link", "set", "dev", dev, "type", "bridge_slave", *WIRE]
                   for dev in (if_a, if_b)),
                 ["ip", "link", "set", BRIDGE, "up"]]
    for dev in (if_a, if_b):
        if mode == "netem":
            if imp.bandwidth_mbps is not None:
                cmds += _tbf(dev, imp.bandwidth_mbps, parent=True)
                cmds.append(["tc", "qdisc", "add", "dev", dev, "parent", "1:1", "handle", "10:",
                             *_netem_args(imp)])
            else:
                cmds.append(["tc", "qdisc", "replace", "dev", dev, "root", *_netem_args(imp)])
        elif imp.bandwidth_mbps is not None:
            cmds += _tbf(dev, imp.bandwidth_mbps)
    return cmds


def nft_ruleset(imp: Impairment) -> str:
    """nftables script of the ``bridge`` mode's random drop (empty without loss)."""
    if imp.loss_pct <= 0:
        return ""
    per_10k = round(imp.loss_pct * 100)
    return (f"table bridge {NFT_TABLE} {{\n"
            f"  chain forward {{ type filter hook forward priority 0; policy accept;\n"
            f"    numgen random mod 10000 < {per_10k} counter drop\n  }}\n}}\n")


def forwarder_command(imp: Impairment, if_a: str, if_b: str, stats_file: str | None = None,
                      ready_file: str | None = None, python: str = sys.executable) -> list[str]:
    """``python -m control_plane.testbed.impair ...`` for ``imp`` between ``if_a`` and ``if_b``."""
    cmd = [python, "-m", FORWARDER_MODULE, "--a", if_a, "--b", if_b,
           "--delay-ms", f"{imp.delay_ms:g}", "--jitter-ms", f"{imp.jitter_ms:g}",
           "--loss-pct", f"{imp.loss_pct:g}", "--dup-pct", f"{imp.dup_pct:g}",
           "--reorder-pct", f"{imp.reorder_pct:g}", "--reorder-gap-ms", f"{imp.reorder_gap_ms:g}",
           "--seed", str(imp.seed)]
    if stats_file:
        cmd += ["--stats-file", stats_file]
    if ready_file:
        cmd += ["--ready-file", ready_file]
    return cmd


def configure(imp: Impairment, if_a: str, if_b: str, mode: str, run: Runner) -> None:
    """Run :func:`setup_commands` and the nftables rules through ``run`` (in the node) and
    read back that the kernel holds them.

    Raises
    ------
    ImpairmentError
        If a command fails or the read-back misses a qdisc or the drop rule.
    host.tools.MissingToolError
        If a binary it runs (``ip``, ``tc``, ``nft`` for a lossy bridge) is not on ``PATH``:
        the message names the Debian package.
    """
    cmds = setup_commands(imp, if_a, if_b, mode)
    rules = nft_ruleset(imp) if mode == "bridge" else ""
    require(*dict.fromkeys(c[0] for c in cmds if c[0] != "sysctl"), *(["nft"] if rules else []),
            why=f"by the impairment node's {mode} mode")
    for cmd in cmds:
        try:
            run(cmd)
        except RuntimeError as exc:
            if cmd[0] == "sysctl":
                continue  # IPv6 may be compiled out
            raise ImpairmentError(f"impairment node {if_a}/{if_b}: {exc}") from exc
    if rules:
        try:
            run(["nft", "-f", "-"], rules)
        except RuntimeError as exc:
            raise ImpairmentError(f"impairment node {if_a}/{if_b}: nftables drop rule refused: "
                                  f"{exc}") from exc
        listing = run(["nft", "list", "table", "bridge", NFT_TABLE])
        if "numgen random" not in listing:
            raise ImpairmentError(f"impairment node {if_a}/{if_b}: drop rule missing after "
                                  f"loading it:\n{listing}")
    for dev in (if_a, if_b):
        if mode in ("netem", "bridge"):
            port = run(["ip", "-d", "link", "show", "dev", dev])
            if "learning off" not in port:
                raise ImpairmentError(f"impairment node: bridge port {dev} still learns "
                                      f"addresses (ip -d link shows: {port.strip()})")
        shown = run(["tc", "qdisc", "show", "dev", dev])
        want = []
        if imp.bandwidth_mbps is not None:
            want.append("tbf")
        if mode == "netem":
            want.append("netem")
        missing = [w for w in want if w not in shown]
        if missing:
            raise ImpairmentError(f"impairment node: {dev} lacks qdisc {', '.join(missing)} "
                                  f"(tc shows: {shown.strip()})")
