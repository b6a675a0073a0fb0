"""Checks of the software target's options (``netco switch``), each failing with one line.

The CLI calls :func:`check_switch_options` before opening anything; the messages name the flag,
the value and the allowed range.
"""

from __future__ import annotations

import math
import ssl
from argparse import Namespace

from host.errors import OptionError, check_options, readable_file
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.protocol.jobs import width_problem
from host.softswitch.server import TLSFiles

#: Largest ``--slots``: ``slot_base``/``num_slots`` are 16-bit fields of ``set_job``, and each
#: slot holds about 4 KiB of aggregation state at 256 coordinates per packet (65536 slots:
#: ~256 MiB).
MAX_SLOTS = 1 << 16
#: Largest ``--slots`` × ``--coords-per-packet``: the sums of the pool (4 copies of 4 bytes per
#: coordinate) stay within ~256 MiB at any packet width.
MAX_POOL_COORDS = MAX_SLOTS * lay.COORDS_PER_PACKET
#: Largest ``--batch`` (frames per receive batch; each row is a preallocated buffer).
MAX_BATCH = 1 << 16
#: Largest ``--spin-us``: a second of polling per idle period is a busy loop, not a wait.
MAX_SPIN_US = 1_000_000
#: P4Runtime device ids are uint64.
MAX_DEVICE_ID = (1 << 64) - 1


def parse_hostport(text: str, flag: str) -> tuple[str, int]:
    """``HOST:PORT`` with a port in 0..65535 (0: any free port); IPv6 hosts in brackets."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise OptionError(f"{flag} {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9559")
    if int(port) > 65535:
        raise OptionError(f"{flag} {text!r}: port {port} is not in 0..65535")
    return host, int(port)


def tls_files(cert: str | None, key: str | None, ca: str | None) -> TLSFiles | None:
    """The server's TLS files from ``--tls-cert/--tls-key/--tls-ca`` (None: plain text)."""
    if cert is None and key is None and ca is None:
        return None
    if cert is None or key is None:
        raise OptionError("--tls-cert and --tls-key: give both (PEM files; docs/security.md "
                          "shows how to make them)")
    files = TLSFiles(readable_file(cert, "--tls-cert"), readable_file(key, "--tls-key"),
                     readable_file(ca, "--tls-ca") if ca else None)
    # gRPC only reads the PEM when the port is added (and logs to stderr): check it here.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (ssl.SSLError, ValueError) as exc:
        raise OptionError(f"--tls-cert {cert} / --tls-key {key}: not a PEM certificate and its "
                          f"private key ({exc.__class__.__name__})") from None
    if files.client_ca is not None:
        try:
            ctx.load_verify_locations(files.client_ca)
        except (ssl.SSLError, ValueError) as exc:
            raise OptionError(f"--tls-ca {ca}: not a PEM CA certificate "
                              f"({exc.__class__.__name__})") from None
    return files


def check_switch_options(args: Namespace, error: type[Exception] = OptionError) -> None:
    """Validate ``netco switch`` arguments in place; raise ``error`` with one line.

    Checks ``--slots``, ``--coords-per-packet``, ``--batch``, ``--spin-us``, ``--cpu``,
    ``--device-id``, ``--grpc``, ``--p4info``, ``--absent-silence``, ``--stats-interval`` and the TLS files
    (stored back as ``args.tls``).
    """
    check_options(_check, args, error)


def _check(args: Namespace) -> None:
    if not 1 <= args.slots <= MAX_SLOTS:
        raise OptionError(f"--slots {args.slots}: give 1..{MAX_SLOTS} (slot fields are 16 bits; "
                          f"the P4 program has {dp.THC_SLOTS})")
    coords = getattr(args, "coords_per_packet", lay.COORDS_PER_PACKET)
    why = width_problem(coords)
    if why is not None:
        raise OptionError(f"--coords-per-packet {why}")
    if args.slots * coords > MAX_POOL_COORDS:
        raise OptionError(f"--slots {args.slots} with --coords-per-packet {coords}: the pool would "
                          f"hold {args.slots * coords * 16 >> 20} MiB of sums; give at most "
                          f"{MAX_POOL_COORDS // coords} slots at this width")
    if not 1 <= args.batch <= MAX_BATCH:
        raise OptionError(f"--batch {args.batch}: give 1..{MAX_BATCH}")
    spin = getattr(args, "spin_us", 0)
    if not 0 <= spin <= MAX_SPIN_US:
        raise OptionError(f"--spin-us {spin}: give 0..{MAX_SPIN_US} microseconds (0: sleep at "
                          "once)")
    from host.placement import cpu_problem

    why = cpu_problem(getattr(args, "cpu", -1))
    if why is not None:
        raise OptionError(why)
    if not 0 <= args.device_id <= MAX_DEVICE_ID:
        raise OptionError(f"--device-id {args.device_id}: P4Runtime device ids are 0..2^64-1")
    parse_hostport(args.grpc, "--grpc")
    limit = getattr(args, "invalid_limit", 0)
    if not 0 <= limit <= 1 << 40:
        raise OptionError(f"--invalid-limit {limit}: give frames per second >= 0 (0: no limit)")
    silence = getattr(args, "absent_silence", 0.0)
    if not math.isfinite(silence) or silence < 0:
        raise OptionError(f"--absent-silence {silence}: give a number of seconds >= 0")
    interval = getattr(args, "stats_interval", 0.0)
    if not math.isfinite(interval) or interval < 0:
        raise OptionError(f"--stats-interval {interval}: give a number of seconds >= 0")
    if args.p4info not in (None, "default"):
        from host.softswitch.p4info import load_p4info

        path = readable_file(args.p4info, "--p4info")
        try:
            args.p4info_message = load_p4info(path)
        except Exception as exc:  # protobuf text and binary parsers raise several kinds
            raise OptionError(f"--p4info {args.p4info}: not a P4Info file "
                              f"({exc.__class__.__name__})") from None
    args.tls = tls_files(getattr(args, "tls_cert", None), getattr(args, "tls_key", None),
                         getattr(args, "tls_ca", None))


__all__ = ["MAX_BATCH", "MAX_POOL_COORDS", "MAX_SLOTS", "MAX_SPIN_US", "OptionError", "check_switch_options",
           "parse_hostport", "tls_files"]
