"""Reading and validating the controller's desired-state file (YAML or TOML).

Validation collects every problem it finds and raises one :class:`ConfigError` whose lines
each name the field (``jobs[0].members[2]``) and the fix, e.g.
``jobs[0].members[2]: unknown host 'h9'; hosts are h1, h2, h3``.

Everything here is pure (no I/O except reading the file in :func:`load_config`).
"""

from __future__ import annotations

import difflib
import ipaddress
import itertools
import re
import tomllib
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml

from control_plane.config.schema import (
    DEFAULT_BMV2_JSON,
    DEFAULT_COORDS_PER_PACKET,
    DEFAULT_ELECTION_ID,
    DEFAULT_NUM_SLOTS,
    DEFAULT_THC,
    MAX_GRANULARITY,
    MAX_JOB_ID,
    MAX_PORT,
    PACKET_WIDTHS,
    POLICIES,
    TARGETS,
    UDP_TARGETS,
    UPLINKS,
    VALUES_TARGETS,
    WIDE_TARGETS,
    ConfigError,
    ControllerSpec,
    HostSpec,
    JobSpec,
    LinkSpec,
    NetworkConfig,
    PathSpec,
    SwitchSpec,
    ThcParams,
    TlsSpec,
    TreeNode,
)
from control_plane.config.topology import derive_tree
from host.protocol import generated_dataplane as dp
from host.protocol import layout as lay
from host.protocol.jobs import lane_problem, width_problem

_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")
_MAC_RE = re.compile(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$")
#: "unknown host 'h1'" / "unknown switch 's1'": a reference to a name (see _Validator.broken).
_UNKNOWN_REF = re.compile(r"^unknown (?:host|switch) '([^']*)'")


# ---------------------------------------------------------------------------------------------
# reading


class DuplicateKeyError(yaml.YAMLError):
    """A YAML mapping names a key twice (the message names the key and both lines)."""


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping naming a key twice (PyYAML keeps the last
    silently, so a repeated ``lane_bits:`` or ``members:`` would change a job unseen)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:   # an unhashable key: the constructor below reports it
            continue
        if first is not None:
            raise DuplicateKeyError(f"duplicate key {key!r} on line {line} (first on line "
                                    f"{first}): keep one")
        seen[key] = line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def load_yaml(text: str) -> Any:
    """Parse YAML like ``yaml.safe_load``, refusing duplicate keys (naming the key and both
    lines)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)


def load_config(path: str | Path) -> NetworkConfig:
    """Read and validate a desired-state file (``.yaml``/``.yml`` or ``.toml``).

    Relative paths inside the file (``controller.p4info``, ``switches[i].p4blob``) are taken
    relative to the file's folder.

    Raises
    ------
    ConfigError
        If the file cannot be read or parsed, or any field is invalid.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError([f"cannot read the file: {exc.strerror}"], str(path)) from exc
    try:
        if path.suffix == ".toml":
            raw = tomllib.loads(text)
        elif path.suffix in (".yaml", ".yml"):
            raw = load_yaml(text)
        else:
            raise ConfigError([f"unknown file type {path.suffix!r}; name it .yaml, .yml or .toml"],
                              str(path))
    except DuplicateKeyError as exc:
        raise ConfigError([str(exc)], str(path)) from None
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError([syntax_error(path, exc)], str(path)) from exc
    except RecursionError:
        raise ConfigError([TOO_DEEP], str(path)) from None
    try:
        return parse_config(raw, base_dir=path.parent, source=str(path))
    except RecursionError:
        raise ConfigError([TOO_DEEP], str(path)) from None


#: A file nested past the parser's recursion limit (a hostile or broken file): one line, not
#: the parser's thousands of traceback lines.
TOO_DEEP = ("nested too deeply for a desired-state file (lists or mappings inside each other "
            "hundreds of levels deep); its structure is switches/hosts/links/jobs, a few levels")


def syntax_error(path: Path, exc: Exception) -> str:
    """One line for a YAML or TOML syntax error: where (line, column) and what.

    PyYAML's own message spans several lines with a caret under a copy of the line and calls
    the file ``"<unicode string>"``; the file is named by the caller (:class:`ConfigError`).
    """
    kind = "TOML" if path.suffix == ".toml" else "YAML"
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        m = exc.problem_mark
        msg = f"line {m.line + 1}, column {m.column + 1}: not valid {kind}: {exc.problem}"
        if exc.context and exc.context_mark is not None:
            c = exc.context_mark
            msg += f" ({exc.context} started at line {c.line + 1}, column {c.column + 1})"
        return msg
    return f"not valid {kind}: {' '.join(str(exc).split())}"


def parse_config(raw: Any, base_dir: Path | None = None, source: str = "") -> NetworkConfig:
    """Validate an already parsed mapping (the file's content) into a :class:`NetworkConfig`.

    Raises
    ------
    ConfigError
        Listing every problem found, one per line, each naming the field and the fix.
    """
    v = _Validator(base_dir or Path.cwd())
    cfg = v.run(raw)
    if v.problems or cfg is None:
        raise ConfigError(v.problems or ["empty configuration"], source)
    return cfg


# ---------------------------------------------------------------------------------------------
# validation


def _renamed(unknown: list, missing: list[str]) -> dict:
    """Unknown keys that stand for missing required ones (unknown key -> the key meant): the
    closest-spelled (``adress`` -> ``address``), else a lone unknown key for a lone missing one
    (``addr`` for a host's ``ip``)."""
    out: dict = {}
    left = list(missing)
    for k in unknown:
        close = difflib.get_close_matches(k, left, n=1, cutoff=0.6) if isinstance(k, str) else []
        if close:
            out[k] = close[0]
            left.remove(close[0])
    rest = [k for k in unknown if k not in out]
    if len(rest) == 1 and len(left) == 1:
        out[rest[0]] = left[0]
    return out


def _names(items) -> str:
    names = [i.name for i in items]
    if not names:
        return "(none defined)"
    return ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")


class _Validator:
    """Collects problems while building the config; one pass per section."""

    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.problems: list[str] = []
        #: Names of hosts and switches whose entries are invalid (their problems are
        #: reported there; a reference to them elsewhere is no second problem).
        self.broken: set[str] = set()
        #: Fields reported missing: checking their (absent) value is no second problem.
        self.missing: set[str] = set()

    def err(self, where: str, msg: str) -> None:
        ref = _UNKNOWN_REF.match(msg)
        if ref and ref.group(1) in self.broken:
            return
        line = f"{where}: {msg}"
        if where not in self.missing and line not in self.problems:
            self.problems.append(line)

    # -- scalar helpers ---------------------------------------------------------------------
    def mapping(self, where: str, val: Any, allowed: set[str], required: set[str]) -> dict | None:
        if not isinstance(val, dict):
            self.err(where, f"must be a mapping with keys {', '.join(sorted(required | allowed))}, "
                            f"got {type(val).__name__}")
            return None
        known = allowed | required
        unknown = [k for k in val if k not in known]
        renamed = _renamed(unknown, [k for k in sorted(required) if k not in val])
        for k in unknown:
            if k in renamed:
                self.err(where, f"unknown key {k!r} (did you mean {renamed[k]!r}?)")
            else:
                self.err(f"{where}.{k}", f"unknown field; allowed fields are "
                                         f"{', '.join(sorted(known, key=str))}")
        for k in sorted(required):
            if k not in val and k not in renamed.values():
                self.err(f"{where}.{k}", "missing (required)")
                self.missing.add(f"{where}.{k}")
        # A renamed key is one problem, reported above: its value is checked under the name
        # meant, so nothing that refers to the entry (a host's name in a job) fails as well.
        return {**val, **{meant: val[k] for k, meant in renamed.items()}} if renamed else val

    def list_of(self, where: str, val: Any, required: bool = True) -> list:
        if val is None:
            if required:
                self.err(where, "missing: give a list")
            return []
        if not isinstance(val, list):
            self.err(where, f"must be a list, got {type(val).__name__}")
            return []
        return val

    def integer(self, where: str, val: Any, lo: int, hi: int, hint: str = "") -> int | None:
        if isinstance(val, bool) or not isinstance(val, int):
            self.err(where, f"must be an integer in {lo}..{hi}, got {val!r}")
            return None
        if not lo <= val <= hi:
            self.err(where, f"{val} out of range; use {lo}..{hi}{hint}")
            return None
        return val

    def number(self, where: str, val: Any, lo: float, hi: float, unit: str) -> float | None:
        if val is None:
            return None
        if isinstance(val, bool) or not isinstance(val, int | float):
            self.err(where, f"must be a number of {unit}, got {val!r}")
            return None
        if not lo <= float(val) <= hi:
            self.err(where, f"{val} out of range; use {lo:g}..{hi:g} {unit}")
            return None
        return float(val)

    def name(self, where: str, val: Any) -> str | None:
        if not isinstance(val, str) or not _NAME_RE.match(val):
            self.err(where, f"{val!r} is not a valid name; use a letter followed by up to 31 "
                            "letters, digits, '_', '.' or '-'")
            return None
        return val

    def ipv4(self, where: str, val: Any) -> str | None:
        try:
            if not isinstance(val, str):
                raise ValueError
            return str(ipaddress.IPv4Address(val))
        except ValueError:
            self.err(where, f"{val!r} is not an IPv4 address; write it like 10.0.0.1")
            return None

    def mac(self, where: str, val: Any) -> str | None:
        if not isinstance(val, str) or not _MAC_RE.match(val):
            self.err(where, f"{val!r} is not a MAC address; write it like 02:00:00:00:00:01")
            return None
        return val.lower()

    def endpoint(self, where: str, val: Any, switches: dict[str, SwitchSpec]) -> tuple[str, int] | None:
        """``"s1:3"`` → (switch, port)."""
        if not isinstance(val, str) or val.count(":") != 1:
            self.err(where, f"{val!r} must be 'SWITCH:PORT', e.g. 's1:3'")
            return None
        sw, _, port_s = val.partition(":")
        if sw not in switches:
            self.err(where, f"unknown switch {sw!r}; switches are {_names(switches.values())}")
            return None
        if not port_s.isdigit():
            self.err(where, f"port {port_s!r} must be a number, e.g. '{sw}:1'")
            return None
        port = int(port_s)
        spec = switches[sw]
        if not 0 <= port <= MAX_PORT:
            self.err(where, f"port {port} out of range; use 0..{MAX_PORT}")
            return None
        if spec.ports is not None and port not in spec.ports:
            self.err(where, f"switch {sw} has no port {port}; its ports are "
                            f"{', '.join(map(str, spec.ports))} (add it to switches[].ports)")
            return None
        return sw, port

    def path(self, where: str, val: Any) -> Path | None:
        if val is None:
            return None
        if not isinstance(val, str) or not val:
            self.err(where, f"must be a file path, got {val!r}")
            return None
        p = Path(val).expanduser()
        return p if p.is_absolute() else self.base_dir / p

    def tls(self, where: str, raw: Any) -> TlsSpec | None:
        """A switch's ``tls`` block: ``ca`` (required), ``cert`` and ``key`` (both or neither),
        ``server_name``; every file must exist."""
        m = self.mapping(where, raw, {"cert", "key", "server_name"}, {"ca"})
        if m is None:
            return None
        files = {k: self.path(f"{where}.{k}", m.get(k)) for k in ("ca", "cert", "key")}
        ok = files["ca"] is not None
        for k, f in files.items():
            if f is not None and not f.is_file():
                self.err(f"{where}.{k}", f"{f}: no such file (a PEM file; docs/security.md)")
                ok = False
        if (m.get("cert") is None) != (m.get("key") is None):
            self.err(f"{where}.{'key' if m.get('key') is None else 'cert'}",
                     "missing: give the client certificate's cert and key together, or neither")
            ok = False
        name = m.get("server_name")
        if name is not None and (not isinstance(name, str) or not name):
            self.err(f"{where}.server_name", f"{name!r}: must be a host name")
            ok = False
        if not ok:
            return None
        assert files["ca"] is not None
        return TlsSpec(files["ca"], files["cert"], files["key"], name)

    def udp(self, where: str, raw: Any, name: str | None, ports: tuple[int, ...] | None,
            target: str) -> tuple[tuple[int, tuple[str, int]], ...]:
        """A switch's ``udp`` field: switch port -> ``"HOST:PORT"`` of the software target's
        UDP port (``netco switch --port N=udp:HOST:PORT``)."""
        if target not in UDP_TARGETS:
            self.err(where, f"only the software target (target: softswitch) has UDP ports; remove "
                            f"udp or set target: softswitch (this switch is {target})")
            return ()
        if not isinstance(raw, dict):
            self.err(where, f"must be a mapping of switch port to HOST:PORT, e.g. "
                            f"{{1: \"127.0.0.1:47001\"}}, got {type(raw).__name__}")
            return ()
        out: dict[int, tuple[str, int]] = {}
        seen: dict[tuple[str, int], int] = {}
        for key, val in raw.items():
            w = f"{where}.{key}"
            if isinstance(key, str) and key.isdigit():
                key = int(key)           # TOML keys are strings
            if isinstance(key, bool) or not isinstance(key, int):
                self.err(w, f"{key!r} is not a port number; key each address by its switch port, "
                            f"e.g. 1: \"127.0.0.1:47001\"")
                continue
            if not 0 <= key <= MAX_PORT:
                self.err(w, f"port {key} out of range; use 0..{MAX_PORT}")
                continue
            if ports is not None and key not in ports:
                self.err(w, f"switch {name or '?'} has no port {key}; its ports are "
                            f"{', '.join(map(str, ports))} (add it to switches[].ports)")
                continue
            addr = _hostport(val)
            if addr is None:
                self.err(w, f"{val!r} must be HOST:PORT of the UDP port (netco switch --port "
                            f"{key}=udp:HOST:PORT): an IPv4 address and a port 1..65535, e.g. "
                            f"127.0.0.1:47001")
                continue
            if addr in seen:
                self.err(w, f"{val} is also port {seen[addr]}'s address; each UDP port binds its own")
                continue
            seen[addr] = key
            out[key] = addr
        return tuple(sorted(out.items()))

    def coords(self, where: str, raw: Any, target: str) -> int | None:
        """A switch's ``coords_per_packet``: 256, or 512/1024 on the software target."""
        if isinstance(raw, bool) or not isinstance(raw, int) or raw not in PACKET_WIDTHS:
            self.err(where, f"{raw!r}: use one of {', '.join(map(str, PACKET_WIDTHS))} (the "
                            f"switch's --coords-per-packet)")
            return None
        if raw != DEFAULT_COORDS_PER_PACKET and target not in WIDE_TARGETS:
            self.err(where, f"{raw}: the P4 programs take {DEFAULT_COORDS_PER_PACKET} coordinates "
                            f"per packet only (this switch is {target}); use "
                            f"{DEFAULT_COORDS_PER_PACKET}, or target: softswitch")
            return None
        return raw

    # -- sections ---------------------------------------------------------------------------
    def run(self, raw: Any) -> NetworkConfig | None:
        if raw is None:
            self.problems.append("the file is empty; it needs switches, hosts and jobs")
            return None
        top = self.mapping("(top level)", raw, {"links", "jobs", "paths", "controller"},
                           {"switches", "hosts"})
        if top is None:
            return None
        ctl = self.controller(top.get("controller"))
        switches = self.switches(top.get("switches"))
        hosts = self.hosts(top.get("hosts"), switches)
        links = self.links(top.get("links"), switches)
        self.check_ports(switches, hosts, links)
        cfg = NetworkConfig(tuple(switches.values()), tuple(hosts.values()), tuple(links), (), (), ctl)
        jobs = self.jobs(top.get("jobs"), cfg)
        paths = self.paths(top.get("paths"), cfg)
        return NetworkConfig(cfg.switches, cfg.hosts, cfg.links, tuple(jobs), tuple(paths), ctl)

    def controller(self, raw: Any) -> ControllerSpec:
        if raw is None:
            return ControllerSpec()
        m = self.mapping("controller", raw, {"election_id", "p4info", "bmv2_json"}, set())
        if m is None:
            return ControllerSpec()
        eid = DEFAULT_ELECTION_ID
        if "election_id" in m:
            eid = self.integer("controller.election_id", m["election_id"], 1, (1 << 64) - 1) or eid
        return ControllerSpec(
            election_id=eid,
            p4info=self.path("controller.p4info", m.get("p4info")),
            bmv2_json=self.path("controller.bmv2_json", m.get("bmv2_json")) or DEFAULT_BMV2_JSON,
        )

    def switches(self, raw: Any) -> dict[str, SwitchSpec]:
        out: dict[str, SwitchSpec] = {}
        addrs: dict[str, str] = {}
        udp_addrs: dict[tuple[str, int], str] = {}
        for i, s in enumerate(self.list_of("switches", raw)):
            w = f"switches[{i}]"
            m = self.mapping(w, s, {"device_id", "mac", "ports", "target", "p4blob", "tls", "udp",
                                    "coords_per_packet"},
                             {"name", "address", "addr"})
            if m is None:
                continue
            name = self.name(f"{w}.name", m.get("name"))
            if name in out:
                self.err(f"{w}.name", f"duplicate switch name {name!r}; names must be unique")
                name = None
            address = m.get("address")
            if not isinstance(address, str) or not re.match(r"^[^\s:]+:\d+$|^\[[0-9a-fA-F:]+\]:\d+$",
                                                            address):
                self.err(f"{w}.address", f"{address!r} must be HOST:PORT of the P4Runtime server, "
                                         "e.g. 127.0.0.1:9559")
                address = None
            elif address in addrs:
                self.err(f"{w}.address", f"{address} is also switch {addrs[address]}'s address")
            dev = self.integer(f"{w}.device_id", m.get("device_id", 1), 0, (1 << 64) - 1)
            addr = self.ipv4(f"{w}.addr", m.get("addr"))
            mac = self.mac(f"{w}.mac", m["mac"]) if "mac" in m else f"02:4e:43:00:00:{i + 1:02x}"
            ports = None
            if "ports" in m:
                ports_raw = m["ports"]
                if isinstance(ports_raw, int) and not isinstance(ports_raw, bool):
                    if self.integer(f"{w}.ports", ports_raw, 1, MAX_PORT) is not None:
                        ports = tuple(range(1, ports_raw + 1))
                else:
                    plist = [self.integer(f"{w}.ports[{j}]", p, 0, MAX_PORT)
                             for j, p in enumerate(self.list_of(f"{w}.ports", ports_raw))]
                    if None not in plist:
                        ports = tuple(sorted(set(plist)))  # type: ignore[arg-type]
            target = m.get("target", "bmv2")
            if target not in TARGETS:
                self.err(f"{w}.target", f"{target!r} unknown; use one of {', '.join(TARGETS)}")
                target = "bmv2"
            p4blob = self.path(f"{w}.p4blob", m.get("p4blob"))
            if target in ("p4runtime", "tofino") and p4blob is None:
                self.err(f"{w}.p4blob", f"required for target {target!r}: the target's compiled "
                                        "program (device config) to push with the P4Info")
            tls = self.tls(f"{w}.tls", m["tls"]) if "tls" in m else None
            udp = self.udp(f"{w}.udp", m["udp"], name, ports, target) if "udp" in m else ()
            coords = self.coords(f"{w}.coords_per_packet",
                                 m.get("coords_per_packet", DEFAULT_COORDS_PER_PACKET), target)
            for port, bound in udp:
                if bound in udp_addrs:
                    self.err(f"{w}.udp.{port}", f"{bound[0]}:{bound[1]} is also "
                                                f"{udp_addrs[bound]}'s address; each UDP port binds "
                                                "its own")
                udp_addrs.setdefault(bound, f"switch {name} port {port}")
            if name is None or address is None or addr is None or mac is None or dev is None \
                    or coords is None:
                if name is not None:
                    self.broken.add(name)
                continue
            addrs[address] = name
            out[name] = SwitchSpec(name, address, dev, addr, mac, ports, target, p4blob, tls, udp,
                                   coords)
        if isinstance(raw, list) and not raw:
            self.err("switches", "empty; define at least one switch")
        tna = sorted(s.name for s in out.values() if s.target in VALUES_TARGETS)
        other = sorted(s.name for s in out.values() if s.target not in VALUES_TARGETS)
        if tna and other:
            self.err("switches", f"Tofino switches ({', '.join(tna)}) run p4/tna, the others "
                                 f"({', '.join(other)}) p4/v1model: one controller pushes one "
                                 "P4Info; give each program its own config file")
        seen: dict[str, str] = {}
        for s in out.values():
            if s.addr in seen:
                self.err(f"switches[{list(out).index(s.name)}].addr",
                         f"{s.addr} is also switch {seen[s.addr]}'s address; give each its own")
            seen[s.addr] = s.name
        return out

    def hosts(self, raw: Any, switches: dict[str, SwitchSpec]) -> dict[str, HostSpec]:
        out: dict[str, HostSpec] = {}
        ips: dict[str, str] = {}
        for i, h in enumerate(self.list_of("hosts", raw)):
            w = f"hosts[{i}]"
            m = self.mapping(w, h, {"mac"}, {"name", "ip", "attach"})
            if m is None:
                continue
            name = self.name(f"{w}.name", m.get("name"))
            if name is not None and (name in out or name in switches):
                self.err(f"{w}.name", f"{name!r} is already used by another host or switch")
                name = None
            mac = self.mac(f"{w}.mac", m["mac"]) if "mac" in m else default_host_mac(i)
            ip = self.ipv4(f"{w}.ip", m.get("ip"))
            if ip is not None and ip in ips:
                self.err(f"{w}.ip", f"{ip} is also host {ips[ip]}'s address")
                ip = None
            if ip is not None and any(s.addr == ip for s in switches.values()):
                self.err(f"{w}.ip", f"{ip} is a switch's addr; give the host its own address")
                ip = None
            att = self.endpoint(f"{w}.attach", m.get("attach"), switches) if "attach" in m else None
            if name is None or mac is None or ip is None or att is None:
                if name is not None:
                    self.broken.add(name)
                continue
            ips[ip] = name
            out[name] = HostSpec(name, mac, ip, att[0], att[1])
        return out

    def links(self, raw: Any, switches: dict[str, SwitchSpec]) -> list[LinkSpec]:
        out: list[LinkSpec] = []
        for i, ln in enumerate(self.list_of("links", raw, required=False)):
            w = f"links[{i}]"
            m = self.mapping(w, ln, {"bandwidth_mbps", "delay_ms", "loss_pct"}, {"a", "b"})
            if m is None:
                continue
            a = self.endpoint(f"{w}.a", m.get("a"), switches) if "a" in m else None
            b = self.endpoint(f"{w}.b", m.get("b"), switches) if "b" in m else None
            bw = self.number(f"{w}.bandwidth_mbps", m.get("bandwidth_mbps"), 0.001, 1e7, "Mbit/s")
            dl = self.number(f"{w}.delay_ms", m.get("delay_ms"), 0.0, 1e5, "ms")
            ls = self.number(f"{w}.loss_pct", m.get("loss_pct"), 0.0, 100.0, "%")
            if a is None or b is None:
                continue
            if a[0] == b[0]:
                self.err(w, f"links switch {a[0]} to itself; connect two different switches")
                continue
            if any({(x.a, x.b)} & {(a[0], b[0]), (b[0], a[0])} for x in out):
                self.err(w, f"second link between {a[0]} and {b[0]}; parallel links are not supported")
                continue
            out.append(LinkSpec(a[0], a[1], b[0], b[1], bw, dl, ls))
        return out

    def check_ports(self, switches: dict[str, SwitchSpec], hosts: dict[str, HostSpec],
                    links: list[LinkSpec]) -> None:
        used: dict[tuple[str, int], str] = {}

        def claim(key: tuple[str, int], who: str, where: str) -> None:
            if key in used:
                self.err(where, f"port {key[0]}:{key[1]} is already used by {used[key]}; "
                                "each switch port connects one host or one link")
            else:
                used[key] = who

        for i, h in enumerate(hosts.values()):
            claim((h.switch, h.port), f"host {h.name}", f"hosts[{i}].attach")
        names = list(switches)
        for i, ln in enumerate(links):
            claim((ln.a, ln.a_port), f"link {i}", f"links[{i}].a")
            claim((ln.b, ln.b_port), f"link {i}", f"links[{i}].b")
            for end, sw, port in (("a", ln.a, ln.a_port), ("b", ln.b, ln.b_port)):
                if switches[sw].udp_address(port) is not None:
                    self.err(f"links[{i}].{end}", f"port {sw}:{port} is a UDP port for a host "
                                                  f"(switches[{names.index(sw)}].udp.{port}); "
                                                  "links use other ports (netco switch --port "
                                                  "N=tunnel:...)")

    # -- jobs -------------------------------------------------------------------------------
    def thc(self, w: str, raw: Any) -> ThcParams | None:
        m = self.mapping(w, raw if raw is not None else dict(DEFAULT_THC), {"b", "g", "p"}, set())
        if m is None:
            return None
        vals = {**DEFAULT_THC, **m}
        ok = True
        b = vals["b"]
        if b != lay.INDEX_BITS:
            self.err(f"{w}.b", f"{b!r}: the switch's DATA payload carries {lay.INDEX_BITS}-bit "
                               f"indices; set b: {lay.INDEX_BITS}")
            ok = False
        g = self.integer(f"{w}.g", vals["g"], (1 << lay.INDEX_BITS) - 1, MAX_GRANULARITY,
                         " (table values are 8-bit action parameters)")
        try:
            p = float(Fraction(str(vals["p"])))
            if not 0.0 < p < 1.0:
                raise ValueError
        except (ValueError, ZeroDivisionError):
            self.err(f"{w}.p", f"{vals['p']!r}: the clipped tail mass must lie in (0, 1), e.g. 1/32")
            p = None
        if not ok or g is None or p is None:
            return None
        return ThcParams(b, g, p)

    def jobs(self, raw: Any, cfg: NetworkConfig) -> list[JobSpec]:
        hosts = {h.name: h for h in cfg.hosts}
        out: list[JobSpec] = []
        ids: dict[int, str] = {}
        names: set[str] = set()
        bound: dict[tuple[str, int], str] = {}   # (host, worker_port) -> job
        for i, j in enumerate(self.list_of("jobs", raw, required=False)):
            w = f"jobs[{i}]"
            m = self.mapping(w, j, {"thc", "policy", "num_slots", "slot_base", "lane_bits",
                                    "root", "tree", "uplink", "worker_port"},
                             {"name", "id", "members"})
            if m is None:
                continue
            name = self.name(f"{w}.name", m.get("name"))
            if name is not None and name in names:
                self.err(f"{w}.name", f"duplicate job name {name!r}")
                name = None
            jid = self.integer(f"{w}.id", m.get("id"), 0, MAX_JOB_ID) if "id" in m else None
            if jid is not None and jid in ids:
                self.err(f"{w}.id", f"{jid} is also job {ids[jid]}'s id; job ids must be unique")
                jid = None
            members: list[str] = []
            bad_members = False
            mlist = self.list_of(f"{w}.members", m.get("members"))
            if not mlist and "members" in m:
                self.err(f"{w}.members", "empty; a job needs at least one member host")
                bad_members = True
            if len(mlist) > lay.MAX_WORKERS:
                self.err(f"{w}.members", f"{len(mlist)} members; a job has at most "
                                         f"{lay.MAX_WORKERS} (rank is a {lay.MAX_WORKERS}-bit bitmap)")
                bad_members = True
            for k, h in enumerate(mlist):
                if h not in hosts:
                    self.err(f"{w}.members[{k}]", f"unknown host {h!r}; hosts are "
                                                  f"{_names(cfg.hosts)}")
                    bad_members = True
                elif h in members:
                    self.err(f"{w}.members[{k}]", f"host {h} is listed twice; list each member once")
                    bad_members = True
                else:
                    members.append(h)
            thc = self.thc(f"{w}.thc", m.get("thc"))
            policy = m.get("policy", "exact")
            if policy not in POLICIES:
                self.err(f"{w}.policy", f"{policy!r} unknown; use one of {', '.join(POLICIES)}")
            nslots = self.integer(f"{w}.num_slots", m.get("num_slots", DEFAULT_NUM_SLOTS), 1, 0xFFFF)
            sbase = None
            if m.get("slot_base") is not None:
                sbase = self.integer(f"{w}.slot_base", m["slot_base"], 0, 0xFFFF)
            lane = None
            if thc is not None and members and not bad_members:
                need = lay.lane_bits_for(len(members), thc.g)
                lane = m.get("lane_bits", need)
                if lane not in lay.LANE_WIDTHS:
                    self.err(f"{w}.lane_bits", f"{lane!r}: use one of {lay.LANE_WIDTHS} (or leave it "
                                               f"out: {need} is derived from n·g)")
                    lane = None
                elif (why := lane_problem(lane, len(members), thc.g)) is not None:
                    self.err(f"{w}.lane_bits", why)   # the rule workers check too (JobSpec)
                    lane = None
            if None in (name, jid, thc, nslots, lane) or bad_members or policy not in POLICIES:
                continue
            assert name is not None and jid is not None and thc is not None
            assert nslots is not None and lane is not None
            tree, explicit = self.tree(w, m, members, cfg)
            if tree is None:
                continue
            targets = {sw.name: sw.target for sw in cfg.switches}
            bmv2 = [n.switch for n in tree if targets[n.switch] == "bmv2"]
            widest = dp.MAX_DATA_RESULT_LANE_BITS
            if lane > widest and bmv2:
                # BMv2 lets a packet grow by 512 bytes only: 128 B of indices -> 1 KiB of lanes
                # crashes it, so the P4 program drops such DATA (LANE_UNSUPPORTED).
                top = (1 << widest) - 1
                self.err(f"{w}.lane_bits", f"{lane}-bit lanes are not supported on BMv2 switch "
                                           f"{bmv2[0]}; use {widest} (n·g up to {top}: g <= "
                                           f"{top // lay.MAX_WORKERS} for {lay.MAX_WORKERS} workers)")
                continue
            widths = {n.switch: cfg.switch(n.switch).coords_per_packet for n in tree}
            if len(set(widths.values())) > 1:
                shown = ", ".join(f"{sw} {c}" for sw, c in widths.items())
                self.err(w, f"its switches take different coords_per_packet ({shown}); a job's "
                            "partial sums cross them, give them the same")
                continue
            width = next(iter(widths.values()))
            if (why := width_problem(width, lane)) is not None:
                self.err(f"{w}.lane_bits", f"{lane}-bit lanes on switches with coords_per_packet "
                                           f"{width}: {why}")
                continue
            tofino = [n.switch for n in tree if targets[n.switch] in VALUES_TARGETS]
            uplink = m.get("uplink", "values" if tofino else "indices")
            if uplink not in UPLINKS:
                self.err(f"{w}.uplink", f"{uplink!r} unknown; use one of {', '.join(UPLINKS)}")
                continue
            if tofino and uplink != "values":
                self.err(f"{w}.uplink", f"'indices' cannot go through Tofino switch {tofino[0]}: it "
                                        "adds table values in packed 8-bit lanes; use 'values' (or "
                                        "leave uplink out)")
                continue
            if tofino and lane != 8:
                self.err(f"{w}.lane_bits", f"Tofino switch {tofino[0]} adds packed 8-bit lanes, but "
                                           f"n·g = {len(members)}·{thc.g} = {len(members) * thc.g} "
                                           f"needs {lane}; keep n·g <= 255 (g <= "
                                           f"{255 // len(members)} for {len(members)} workers)")
                continue
            if uplink == "values" and thc.g > 255:
                self.err(f"{w}.thc.g", f"{thc.g}: the values uplink carries table values in 8 bits; "
                                       "use g <= 255")
                continue
            wport = None
            if m.get("worker_port") is not None:
                wport = self.integer(f"{w}.worker_port", m["worker_port"], 1, 0xFFFF,
                                     " (the UDP port every member sends from)")
                if wport is None:
                    continue
                clash = next((h for h in members if (h, wport) in bound), None)
                if clash is not None:
                    self.err(f"{w}.worker_port", f"{wport} is also job {bound[(clash, wport)]}'s "
                                                 f"worker_port, and both jobs have host {clash}; "
                                                 "give each job on a shared host its own port")
                    continue
                bound.update({(h, wport): name for h in members})
            ids[jid] = name
            names.add(name)
            out.append(JobSpec(name, jid, tuple(members), thc, policy, nslots, sbase, lane,
                               tree, explicit, uplink, wport))
        return out

    def tree(self, w: str, m: dict, members: list[str], cfg: NetworkConfig
             ) -> tuple[tuple[TreeNode, ...] | None, bool]:
        """The job's aggregation tree: explicit (``tree``) or derived from ``root``."""
        hosts = {h.name: h for h in cfg.hosts}
        switches = {s.name: s for s in cfg.switches}
        attach = {h: hosts[h].switch for h in members}
        if "tree" in m and "root" in m:
            self.err(f"{w}.root", "give either root (derived tree) or tree (explicit), not both")
            return None, False
        if "tree" not in m:
            root = m.get("root")
            if root is not None and root not in switches:
                self.err(f"{w}.root", f"unknown switch {root!r}; switches are {_names(cfg.switches)}")
                return None, False
            nodes = derive_tree(cfg, members, root)
            if nodes is None:
                sws = sorted(set(attach.values()))
                self.err(f"{w}.members", f"members attach to switches {', '.join(sws)}, which no "
                                         "chain of links connects; add links or split the job")
                return None, False
            return nodes, False
        raw_nodes = self.list_of(f"{w}.tree", m["tree"])
        nodes: list[TreeNode] = []
        covered: dict[str, str] = {}
        ok = True
        for k, n in enumerate(raw_nodes):
            wn = f"{w}.tree[{k}]"
            nm = self.mapping(wn, n, {"parent", "members"}, {"switch"})
            if nm is None:
                ok = False
                continue
            sw = nm.get("switch")
            if sw not in switches:
                self.err(f"{wn}.switch", f"unknown switch {sw!r}; switches are {_names(cfg.switches)}")
                ok = False
                continue
            if any(x.switch == sw for x in nodes):
                self.err(f"{wn}.switch", f"{sw} appears twice in the tree; list each switch once")
                ok = False
                continue
            parent = nm.get("parent")
            if parent is not None:
                if parent not in switches:
                    self.err(f"{wn}.parent", f"unknown switch {parent!r}; switches are "
                                             f"{_names(cfg.switches)}")
                    ok = False
                elif parent not in cfg.neighbours(sw):
                    self.err(f"{wn}.parent", f"{parent} is not linked to {sw}; a parent must be a "
                                             "direct neighbour (a switch in between would consume "
                                             "the THC packets)")
                    ok = False
            here = [h for h in members if attach[h] == sw]
            if "members" in nm:
                listed = self.list_of(f"{wn}.members", nm["members"])
                for q, h in enumerate(listed):
                    wm = f"{wn}.members[{q}]"
                    if h not in members:
                        self.err(wm, f"{h!r} is not a member of this job; members are "
                                     f"{', '.join(members)}")
                        ok = False
                    elif attach[h] != sw:
                        self.err(wm, f"{h} attaches to {attach[h]}, not {sw}; a member is "
                                     "aggregated by the switch it attaches to")
                        ok = False
                    elif h in covered:
                        self.err(wm, f"{h} is already aggregated at {covered[h]}")
                        ok = False
                if ok and sorted(listed) != sorted(here):
                    missing = [h for h in here if h not in listed]
                    self.err(f"{wn}.members", f"{', '.join(missing)} also attach to {sw}; list them "
                                              "here too (or leave members out to infer them)")
                    ok = False
            for h in here:
                covered[h] = sw
            nodes.append(TreeNode(sw, parent, tuple(here)))
        if not ok:
            return None, True
        names = {n.switch for n in nodes}
        for k, n in enumerate(nodes):
            if n.parent is not None and n.parent not in names:
                self.err(f"{w}.tree[{k}].parent", f"{n.parent} is not a node of this tree; add "
                                                  f"{{switch: {n.parent}}} to tree")
                ok = False
        roots = [n.switch for n in nodes if n.parent is None]
        if ok and len(roots) != 1:
            self.err(f"{w}.tree", f"needs exactly one root (a node without parent), found "
                                  f"{len(roots)}: {', '.join(roots) or 'none'}")
            ok = False
        missing = [h for h in members if h not in covered]
        if missing:
            self.err(f"{w}.tree", f"members {', '.join(missing)} attach to switches not in the "
                                  f"tree ({', '.join(sorted({attach[h] for h in missing}))}); "
                                  "add those switches")
            ok = False
        if ok:
            parent = {n.switch: n.parent for n in nodes}
            for n in nodes:
                seen, cur = set(), n.switch
                while cur is not None and cur not in seen:
                    seen.add(cur)
                    cur = parent[cur]
                if cur is not None:
                    self.err(f"{w}.tree", f"parent links form a cycle through {cur}; a tree has none")
                    ok = False
                    break
        if ok:
            for k, n in enumerate(nodes):
                kids = [c for c in nodes if c.parent == n.switch]
                if not n.members and not kids:
                    self.err(f"{w}.tree[{k}]", f"{n.switch} aggregates nobody (no members attach "
                                               "there and it has no children); remove it")
                    ok = False
        return (tuple(nodes), True) if ok else (None, True)

    def paths(self, raw: Any, cfg: NetworkConfig) -> list[PathSpec]:
        hosts = {h.name: h for h in cfg.hosts}
        switches = {s.name for s in cfg.switches}
        out: list[PathSpec] = []
        for i, p in enumerate(self.list_of("paths", raw, required=False)):
            w = f"paths[{i}]"
            m = self.mapping(w, p, {"src"}, {"dst", "via"})
            if m is None:
                continue
            dst, src = m.get("dst"), m.get("src")
            if dst not in hosts:
                self.err(f"{w}.dst", f"unknown host {dst!r}; hosts are {_names(cfg.hosts)}")
                continue
            if src is not None and src not in hosts:
                self.err(f"{w}.src", f"unknown host {src!r}; hosts are {_names(cfg.hosts)}")
                continue
            via = self.list_of(f"{w}.via", m.get("via"))
            bad = [s for s in via if s not in switches]
            if bad or not via:
                self.err(f"{w}.via", f"unknown switch {bad[0]!r}; switches are {_names(cfg.switches)}"
                         if bad else "empty; list the switches the path crosses, in order")
                continue
            if via[-1] != hosts[dst].switch:
                self.err(f"{w}.via", f"must end at {hosts[dst].switch}, where {dst} attaches "
                                     f"(ends at {via[-1]})")
                continue
            if src is not None and via[0] != hosts[src].switch:
                self.err(f"{w}.via", f"must start at {hosts[src].switch}, where {src} attaches "
                                     f"(starts at {via[0]})")
                continue
            if len(set(via)) != len(via):
                self.err(f"{w}.via", "visits a switch twice; a path has no loops")
                continue
            broken = [(x, y) for x, y in itertools.pairwise(via) if y not in cfg.neighbours(x)]
            if broken:
                x, y = broken[0]
                self.err(f"{w}.via", f"{x} and {y} are not linked; add a link or fix the path")
                continue
            for q in out:
                clash = _path_clash(q, via, dst)
                if clash:
                    self.err(f"{w}.via", f"at {clash} it leaves towards a different next hop than "
                                         f"an earlier path to {dst}; routes depend on the destination "
                                         "only, so paths to one host must agree where they meet")
                    break
            else:
                out.append(PathSpec(dst, tuple(via), src))
        return out


def default_host_mac(position: int) -> str:
    """The MAC of the host at ``position`` (0-based) of ``hosts`` without a ``mac``:
    ``02:4e:48:00:XX:YY``, XX:YY = position + 1 (the switches' default is ``02:4e:43:...``)."""
    n = position + 1
    return f"02:4e:48:00:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x}"


def _hostport(val: Any) -> tuple[str, int] | None:
    """``"IPv4:PORT"`` (port 1..65535) -> (host, port), else None."""
    if not isinstance(val, str) or val.count(":") != 1:
        return None
    host, _, port = val.partition(":")
    try:
        host = str(ipaddress.IPv4Address(host))
    except ValueError:
        return None
    if not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host, int(port)


def _path_clash(q: PathSpec, via: list[str], dst: str) -> str | None:
    if q.dst != dst:
        return None
    nxt = dict(zip(q.via, q.via[1:], strict=False))
    for x, y in itertools.pairwise(via):
        if x in nxt and nxt[x] != y:
            return x
    return None


