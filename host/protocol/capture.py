"""Look at THC packets with tshark and the generated dissector (what ``netco capture`` runs).

:func:`tshark_command` builds the command line — live on an interface or from a pcap file,
with :func:`~host.protocol.dissector.dissector_path`'s Lua dissector loaded and THC decoded
on its UDP port and on any port given (the software target's UDP ports) — and :func:`run` runs
it. Nothing here captures by itself: tshark (Debian's ``tshark`` package) does, and capturing
live needs root or the ``wireshark`` group (dumpcap's capabilities).

It is also the ``netco capture`` subcommand (:func:`configure`, :func:`run_args`)::

    netco capture -i lo --port 47001 --port 47002     # live: the software target's ports
    netco capture -i lo -w thc.pcap -c 1000            # save raw packets (no decoding)
    netco capture -r thc.pcap --output verbose -Y netco_thc.drop
    netco capture -r thc.pcap --print-command          # the tshark line, to adapt by hand
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from host.protocol.dissector import PROTO, dissector_path
from host.protocol.layout import THC_UDP_PORT

#: What :func:`tshark_command` may print (tshark's ``-T``), plus ``"text"`` (one line per packet).
OUTPUTS = ("text", "verbose", "fields", "json", "pdml")
#: Fields printed by ``output="fields"`` (one tab-separated line per packet).
DEFAULT_FIELDS = ("frame.number", "ip.src", "udp.srcport", "ip.dst", "udp.dstport",
                  f"{PROTO}.msg_type", f"{PROTO}.flags", f"{PROTO}.job_id", f"{PROTO}.rank",
                  f"{PROTO}.slot", f"{PROTO}.round", f"{PROTO}.elem_count", f"{PROTO}.count",
                  f"{PROTO}.bitmap", f"{PROTO}.drop")


class CaptureError(RuntimeError):
    """Bad capture arguments or tshark missing; the message is one line naming the fix."""


def find_tshark() -> str:
    """Path of tshark; :class:`CaptureError` naming the package when it is missing."""
    path = shutil.which("tshark")
    if path is None:
        raise CaptureError("tshark not found: apt-get install tshark (Debian/Ubuntu)")
    return path


def capture_filter(ports: Sequence[int] = ()) -> str:
    """A BPF capture filter for THC: its UDP port and ``ports``."""
    return " or ".join(f"udp port {p}" for p in dict.fromkeys([THC_UDP_PORT, *ports]))


def tshark_command(*, interface: str | None = None, read: str | Path | None = None,
                   ports: Sequence[int] = (), write: str | Path | None = None,
                   count: int | None = None, duration: float | None = None,
                   output: str = "text", fields: Sequence[str] = DEFAULT_FIELDS,
                   display_filter: str | None = PROTO, tshark: str = "tshark",
                   lua: Path | None = None) -> list[str]:
    """The tshark command line that captures or reads THC and decodes it.

    Parameters
    ----------
    interface : str, optional
        Capture live here (``lo`` for the software target on loopback).
    read : path, optional
        Or read this pcap/pcapng file.
    ports : sequence of int
        UDP ports to decode as THC besides :data:`~host.protocol.layout.THC_UDP_PORT` (the
        software target's ``udp:`` ports); live, they are also what the capture filter keeps.
    write : path, optional
        Live only: save the raw packets to this file instead of decoding them (decode later
        with ``read``).
    count, duration : optional
        Stop after this many packets / seconds.
    output : {"text", "verbose", "fields", "json", "pdml"}
        One line per packet, the full tree (``-V``), ``fields`` (tab-separated), or tshark's
        JSON/PDML.
    display_filter : str, optional
        Show only packets matching it (default: THC packets); ignored with ``write``.
    lua : Path, optional
        The dissector (default: the one shipped with the package).

    Raises
    ------
    CaptureError
        For a contradictory or invalid combination (one line naming the option).
    """
    if (interface is None) == (read is None):
        raise CaptureError("give either an interface to capture on or a pcap file to read")
    if write is not None and read is not None:
        raise CaptureError("--write saves a live capture; it cannot be combined with --read")
    if output not in OUTPUTS:
        raise CaptureError(f"output {output!r}: use one of {', '.join(OUTPUTS)}")
    for p in ports:
        if not 1 <= int(p) <= 65535:
            raise CaptureError(f"port {p}: must be 1..65535")
    if count is not None and count < 1:
        raise CaptureError(f"count {count}: must be at least 1")
    if duration is not None and duration <= 0:
        raise CaptureError(f"duration {duration}: must be positive")
    cmd = [tshark]
    if read is not None:
        if not Path(read).exists():
            raise CaptureError(f"{read}: no such capture file")
        cmd += ["-r", str(read)]
    else:
        cmd += ["-i", str(interface), "-f", capture_filter(ports)]
    if count is not None:
        cmd += ["-c", str(count)]
    if duration is not None:
        cmd += ["-a", f"duration:{duration:g}"]
    if write is not None:
        return [*cmd, "-w", str(write)]
    cmd[1:1] = ["-X", f"lua_script:{lua or dissector_path()}"]
    for p in dict.fromkeys(int(p) for p in ports):
        if p != THC_UDP_PORT:
            cmd += ["-d", f"udp.port=={p},{PROTO}"]
    if display_filter:
        cmd += ["-Y", display_filter]
    if output == "verbose":
        cmd.append("-V")
    elif output == "fields":
        cmd += ["-T", "fields", "-E", "header=y"]
        for f in fields:
            cmd += ["-e", f]
    elif output in ("json", "pdml"):
        cmd += ["-T", output]
    return cmd


def shell_line(cmd: Sequence[str]) -> str:
    """``cmd`` as one copy-pasteable shell line."""
    return shlex.join(cmd)


def run(cmd: Sequence[str]) -> int:
    """Run a :func:`tshark_command` (tshark found on PATH), passing its output through.

    Returns tshark's exit status (130 for Ctrl-C is returned as 0: stopping a live capture
    is the normal way to end it).
    """
    cmd = [find_tshark() if cmd[0] == "tshark" else cmd[0], *cmd[1:]]
    try:
        rc = subprocess.call(cmd)
    except KeyboardInterrupt:
        return 0
    return 0 if rc in (-2, 130) else rc


# -- ``netco capture`` ----------------------------------------------------------------------------

def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``netco capture`` arguments (a subcommand module: sets ``func``)."""
    parser.description = ("Decode THC packets with tshark and the generated dissector, live on "
                          "an interface or from a capture file (docs/protocol.md, 'Looking at "
                          "packets'). Live capture needs root or the wireshark group.")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("-i", "--interface", default=None, metavar="IF",
                     help="capture live on this interface (lo: the software target on loopback)")
    src.add_argument("-r", "--read", default=None, metavar="FILE",
                     help="decode this pcap/pcapng file instead")
    parser.add_argument("--port", type=int, action="append", default=[], metavar="P",
                        help=f"also decode UDP port P as THC (besides {THC_UDP_PORT}; the "
                             "software target's udp: ports); repeatable")
    parser.add_argument("-w", "--write", default=None, metavar="FILE",
                        help="live: save the raw packets to FILE instead of decoding them")
    parser.add_argument("-c", "--count", type=int, default=None, metavar="N",
                        help="stop after N packets")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="stop after S seconds")
    parser.add_argument("--output", choices=OUTPUTS, default="text",
                        help="one line per packet (text), the full tree (verbose), "
                             "tab-separated fields, or tshark's json/pdml (default text)")
    parser.add_argument("-Y", "--filter", default=PROTO, metavar="EXPR",
                        help="Wireshark display filter, e.g. 'netco_thc.flags.retx == 1' or "
                             "netco_thc.drop (default: THC packets)")
    parser.add_argument("--print-command", action="store_true",
                        help="print the tshark command line instead of running it")
    parser.set_defaults(func=run_args)


def run_args(args: argparse.Namespace) -> int:
    """``netco capture``: build the tshark command, print it or run it; 2 on bad input."""
    if args.interface is None and args.read is None:
        args.interface = "lo"
    try:
        cmd = tshark_command(interface=args.interface, read=args.read, ports=args.port,
                             write=args.write, count=args.count, duration=args.duration,
                             output=args.output, display_filter=args.filter or None)
        if args.print_command:
            print(shell_line(cmd))
            return 0
        return run(cmd)
    except CaptureError as exc:
        print(f"netco capture: error: {exc}", file=sys.stderr)
        return 2
