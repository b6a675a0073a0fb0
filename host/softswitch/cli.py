"""Run the software aggregation target (same protocol and P4Runtime interface as the P4 program).

Examples::

    # no root: THC over UDP on loopback, controller connects to 127.0.0.1:9559
    netco switch --port 1=udp:127.0.0.1:47001 --port 2=udp:127.0.0.1:47002
    # raw frames on interfaces (namespaces, Mininet; root)
    netco switch --port 1=s1-eth1 --port 2=s1-eth2 --grpc 0.0.0.0:9559

The switch starts empty: the controller pushes the P4Info (SetForwardingPipelineConfig) and
the entries. ``--p4info default`` preloads the program's P4Info for a quick start.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from host.busywait import SPIN_US
from host.errors import UsageError
from host.exporter import add_metrics_arguments
from host.files import write_atomic
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.softswitch.controls.common import ABSENT_AFTER, ABSENT_SILENCE, INVALID_LIMIT

__all__ = ["configure", "run"]


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the ``netco switch`` arguments."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = __doc__.split("\n", 1)[1] + "\nSee docs/softswitch.md."
    parser.add_argument("--port", action="append", default=[], metavar="N=SPEC",
                        help="switch port N: IFNAME or afpacket:IFNAME (raw frames, root), "
                             "udp:IP:PORT[,peer=IP:PORT] (THC datagrams), "
                             "tunnel:IP:PORT,peer=IP:PORT (frames in UDP); repeat per port")
    parser.add_argument("--grpc", default="127.0.0.1:9559", metavar="HOST:PORT",
                        help="P4Runtime server address (default %(default)s)")
    parser.add_argument("--device-id", type=int, default=1, help="P4Runtime device id (default 1)")
    parser.add_argument("--slots", type=int, default=dp.THC_SLOTS,
                        help="aggregation slot pool shared by all jobs (default %(default)s, the P4 "
                             "program's THC_SLOTS)")
    parser.add_argument("--absent-silence", type=float, default=ABSENT_SILENCE, metavar="SECONDS",
                        help="hold a rank absent (release its jobs' slots without it, no DEADLINE "
                             f"needed) after {ABSENT_AFTER} deadline releases in a row without it "
                             "and this long without hearing from it (default %(default)s; "
                             "docs/protocol.md, 'Absent contributors')")
    parser.add_argument("--invalid-limit", type=int, default=INVALID_LIMIT, metavar="N",
                        help="frames failing validation one source (address and UDP port) may "
                             "send per second before its frames are all dropped for 2 s, with a "
                             "log line and a metric (default %(default)s; 0: no limit; C loop "
                             "only; docs/security.md, 'Rate limit')")
    parser.add_argument("--coords-per-packet", type=int, default=lay.COORDS_PER_PACKET, metavar="W",
                        help="packet width: coordinates per DATA/RESULT packet, one of "
                             f"{', '.join(map(str, lay.PACKET_WIDTHS))} (default %(default)s, the P4 "
                             "programs'; wider packets cut the per-datagram cost; 1024 takes only "
                             "8-bit lanes, 512 up to 16; workers must use the same: "
                             "docs/protocol.md, 'Packet width')")
    parser.add_argument("--batch", type=int, default=1024, help="frames per receive batch (default 1024)")
    parser.add_argument("--p4info", default=None, metavar="PATH|default",
                        help="preload a P4Info (default: wait for the controller's pipeline)")
    parser.add_argument("--stats-interval", type=float, default=0.0, metavar="S",
                        help="log counters every S seconds (0: never)")
    parser.add_argument("--echo", action="store_true",
                        help="benchmark baseline: send every message back where it came from, "
                             "untouched (no pipeline)")
    parser.add_argument("--send-thread", action=argparse.BooleanOptionalAction, default=True,
                        help="send each batch's outputs from a second thread while the next "
                             "batch is received and processed (default on; --no-send-thread: "
                             "one thread)")
    parser.add_argument("--spin-us", type=int, default=SPIN_US, metavar="US",
                        help="with nothing to receive, the C loop polls this many microseconds "
                             "(yielding the CPU between tries) before it sleeps: a sleeping "
                             f"switch costs its senders a wake-up per train (default {SPIN_US}; "
                             "0: sleep at once; host/busywait.py)")
    parser.add_argument("--cpu", type=int, default=-1, metavar="N",
                        help="run the switch on CPU N only (default -1: wherever the scheduler "
                             "puts it); on a machine its workers share, a CPU of its own keeps "
                             "them from taking turns with it (host/placement.py, measured)")
    parser.add_argument("--c-loop", action=argparse.BooleanOptionalAction, default=None,
                        help="run the receive/process/send loop in C with the GIL released "
                             "where the C fast path is built (default on; --no-c-loop: the "
                             "Python loop, the reference; NETCO_SOFTSWITCH_CLOOP=0 too)")
    parser.add_argument("--tls-cert", default=None, metavar="PEM",
                        help="serve P4Runtime over TLS with this certificate (docs/security.md)")
    parser.add_argument("--tls-key", default=None, metavar="PEM", help="private key of --tls-cert")
    parser.add_argument("--tls-ca", default=None, metavar="PEM",
                        help="require client certificates signed by this CA (mutual TLS)")
    parser.add_argument("--json", action="store_true", help="print final statistics as JSON on exit")
    parser.add_argument("--ready-file", default=None, metavar="PATH",
                        help="write the P4Runtime address here once serving (for scripts)")
    add_metrics_arguments(parser, "the switch's counters")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Open the ports, start the P4Runtime server and loop until SIGINT/SIGTERM."""
    from host.softswitch.netio import open_port, parse_port
    from host.softswitch.options import check_switch_options
    from host.softswitch.p4info import netco_p4info
    from host.softswitch.switch import SoftSwitch

    if not args.port:
        raise UsageError("--port: give at least one port, e.g. --port 1=udp:127.0.0.1:47001")
    check_switch_options(args, UsageError)
    if args.cpu >= 0:
        from host.placement import pin

        pin({args.cpu})
    specs = []
    for spec in args.port:
        try:
            specs.append(parse_port(spec))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    numbers = [n for n, _, _ in specs]
    if len(set(numbers)) != len(numbers):
        raise UsageError(f"--port: port numbers repeat ({numbers}); give each port once")
    ports = []
    try:
        for n, kind, opts in specs:
            try:
                ports.append(open_port(n, kind, opts))
            except PermissionError:
                raise UsageError(f"--port {n}: {kind} ports need root (CAP_NET_RAW); "
                                 "use udp:IP:PORT without root") from None
            except OSError as exc:
                raise UsageError(f"--port {n}: cannot open {kind} port {opts}: {exc.strerror}") from None
        sw = SoftSwitch(ports, device_id=args.device_id, pool_slots=args.slots, batch=args.batch,
                        coords=args.coords_per_packet, absent_silence=args.absent_silence)
        sw.send_thread = args.send_thread
        sw.spin_us = args.spin_us
        sw.invalid_limit = args.invalid_limit
        if args.c_loop is not None:
            sw.c_loop = args.c_loop and sw.c_loop_available()
        if args.p4info:
            try:
                sw.load_pipeline(netco_p4info() if args.p4info == "default" else args.p4info_message)
            except ValueError as exc:
                raise UsageError(f"--p4info {args.p4info}: {exc}") from None
        try:
            bound = sw.serve(args.grpc, args.tls)
        except (OSError, RuntimeError) as exc:
            raise UsageError(f"--grpc {args.grpc}: cannot listen ({exc})") from None
        metrics = None
        if args.metrics_port is not None:
            from host.exporter import ExporterError
            from host.softswitch.metrics import start_switch_metrics

            try:
                metrics = start_switch_metrics(sw, args.metrics_port, args.metrics_address)
            except ExporterError as exc:
                sw.stop()
                raise UsageError(f"--metrics-port: {exc}") from None
        if args.ready_file:
            write_atomic(args.ready_file, bound + "\n")

        def stop(signum, frame) -> None:
            sw.stop_event.set()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, stop)
            signal.signal(signal.SIGINT, stop)
        reporter = None
        if args.stats_interval > 0:
            def report() -> None:
                while not sw.stop_event.wait(args.stats_interval):
                    print(json.dumps(sw.stats()), file=sys.stderr, flush=True)
            reporter = threading.Thread(target=report, daemon=True)
            reporter.start()
        tls = " (TLS)" if args.tls else ""
        print(f"netco switch: P4Runtime{tls} on {bound}, device {args.device_id}, ports "
              + " ".join(p.describe() for p in ports)
              + (f", metrics {metrics.url}" if metrics is not None else ""), file=sys.stderr, flush=True)
        t0 = time.time()
        try:
            sw.run(echo=args.echo)
        finally:
            if metrics is not None:
                metrics.close()
        sw.stop()
        if args.json:
            print(json.dumps({**sw.stats(), "uptime_s": round(time.time() - t0, 3)}))
        return 0
    finally:
        for p in ports:
            p.close()
