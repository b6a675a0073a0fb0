"""Plan -> network: a ScaleAcross network plan (version 1) on a topology file -> the
controller's desired state.

:func:`install_plan` takes the plan ``netco explore plan`` writes (``docs/scaleacross.md``,
"Network plan file") and the controller's topology file (``docs/controller.md``) and returns
the topology's desired state with

* a **host for every plan node**: the plan's nodes (``ranks[].host``, e.g. ``A-n0003``) of
  building ``A`` go, in order, to the topology's hosts of building ``A``, in file order;
* a **THC job per DP group** (``aggregation_trees[]``) with an explicit ``tree``: in each
  building the switch tree from the building's uplink switch down to the members' switches;
  above it the cross-building switch at the far end of the uplink the plan picked for the
  group (in-network aggregation/THC), or nothing (``ring``: one job per building, the leaders
  run the cross phase over routed paths; a group that stays in one building: one job);
* **paths** (``paths[].via``) for the building-to-building flows (``cross_building_flows[]``:
  PP activations/gradients, DP ring/hierarchical), so they cross the uplinks the plan names.

Topology conventions (the controller's file has no building field):

* a switch belongs to building ``X`` when its name starts with ``X-`` (case-insensitive,
  longest plan building name wins); a host belongs to the building of its attachment switch;
* every other switch is part of the **cross-building layer** (the plan's ``xcore``);
* uplink ``X-x<i>`` is the ``i``-th link (file order) between a switch of ``X`` and a
  cross-building switch.

A flow split over ``k`` paths is split **by destination host** (routes are per destination
address): the destination building's ranked hosts are dealt to the paths in proportion to
their ``share`` (smooth weighted round robin). Flows to or from ``xcore`` (in-network
aggregation) are carried by the trees: the DP groups are dealt to the uplinks the same way,
so group ``k`` aggregates at the cross-building switch of its uplink.

Everything here is pure: no switch, no root. Errors are :class:`PlanError` (a
:class:`control_plane.config.ConfigError`) whose lines name the field of the plan or of the
topology file and the fix.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from control_plane.config import ConfigError, NetworkConfig, parse_config
from control_plane.config.topology import derive_tree, shortest_paths
from control_plane.config.validation import syntax_error

__all__ = ["PLAN_VERSION", "Installation", "PlanError", "install_files", "install_plan",
           "load_plan", "read_topology"]

PLAN_VERSION = 1
XCORE = "xcore"
#: sync methods whose cross-building phase is summed by a cross-building switch
SWITCH_METHODS = ("ina", "thc")
_UPLINK_RE = re.compile(r"^(?P<b>.+)-x(?P<i>\d+)$")


class PlanError(ConfigError):
    """A plan that cannot be installed on the topology; each line names a field and the fix."""


@dataclass
class Installation:
    """The merged desired state and how the plan was mapped onto the topology."""

    #: validated desired state (topology + the plan's jobs and paths)
    config: NetworkConfig
    #: the same as a mapping (the file format of docs/controller.md), ready for YAML
    desired: dict[str, Any]
    #: plan node (``A-n0000``) -> topology host
    node_hosts: dict[str, str]
    #: plan rank -> topology host
    rank_hosts: dict[int, str]
    #: one per installed job: name, id, group, method, members, ranks per member, tree
    jobs: list[dict[str, Any]] = field(default_factory=list)
    #: one per cross-building flow: its paths as installed (``via`` per destination host) or
    #: the jobs that carry it
    flows: list[dict[str, Any]] = field(default_factory=list)
    #: what was not installed and why
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready summary (without the merged file itself)."""
        return {"node_hosts": self.node_hosts,
                "rank_hosts": {str(k): v for k, v in self.rank_hosts.items()},
                "jobs": self.jobs, "flows": self.flows, "notes": self.notes}


# ---------------------------------------------------------------------------------------------
# reading


def load_plan(path: str | Path) -> dict[str, Any]:
    """Read a plan file (JSON, ``version`` 1).

    Raises
    ------
    PlanError
        If it cannot be read, is not JSON, or has another version.
    """
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except OSError as exc:
        raise PlanError([f"cannot read the plan: {exc.strerror}"], str(path)) from exc
    except json.JSONDecodeError as exc:
        raise PlanError([f"not valid JSON: {exc}; write it with netco explore plan --out"],
                        str(path)) from exc
    if not isinstance(raw, dict) or raw.get("version") != PLAN_VERSION:
        got = raw.get("version") if isinstance(raw, dict) else type(raw).__name__
        raise PlanError([f"version: {got!r}; this controller reads version {PLAN_VERSION} "
                         "(netco explore plan writes it)"], str(path))
    return raw


def read_topology(path: str | Path) -> dict[str, Any]:
    """The topology file's raw mapping (YAML or TOML), to be merged with a plan."""
    path = Path(path)
    try:
        text = path.read_text()
        raw = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError([f"cannot read the file: {exc.strerror}"], str(path)) from exc
    except (yaml.YAMLError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError([syntax_error(path, exc)], str(path)) from exc
    if not isinstance(raw, dict):
        raise ConfigError(["the file must be a mapping with switches and hosts"], str(path))
    return raw


def install_files(topology: str | Path, plan: str | Path, **kw: Any) -> Installation:
    """:func:`install_plan` on two files (relative paths in the topology stay relative to it)."""
    topology = Path(topology)
    return install_plan(load_plan(plan), read_topology(topology), base_dir=topology.parent,
                        source=f"{topology} + {plan}", **kw)


# ---------------------------------------------------------------------------------------------
# the topology seen as buildings


@dataclass(frozen=True)
class _Buildings:
    cfg: NetworkConfig
    of_switch: dict[str, str | None]          # switch -> plan building (None: cross layer)
    hosts: dict[str, list[str]]               # building -> hosts, file order
    uplinks: dict[str, list[tuple[str, str]]]  # building -> [(its switch, cross switch)]

    def switches(self, b: str | None) -> list[str]:
        return [s.name for s in self.cfg.switches if self.of_switch[s.name] == b]

    def part(self, b: str | None) -> NetworkConfig:
        """The sub-network of building ``b`` (or of the cross layer): its switches, the links
        between them and the hosts attached to them."""
        sws = set(self.switches(b))
        return dataclasses.replace(
            self.cfg, switches=tuple(s for s in self.cfg.switches if s.name in sws),
            hosts=tuple(h for h in self.cfg.hosts if h.switch in sws),
            links=tuple(ln for ln in self.cfg.links if ln.a in sws and ln.b in sws),
            jobs=(), paths=())


def _building_of(name: str, buildings: list[str]) -> str | None:
    low = name.lower()
    hits = [b for b in buildings if low.startswith(b.lower() + "-")]
    return max(hits, key=len) if hits else None


def _view(cfg: NetworkConfig, buildings: list[str]) -> _Buildings:
    of = {s.name: _building_of(s.name, buildings) for s in cfg.switches}
    hosts = {b: [h.name for h in cfg.hosts if of[h.switch] == b] for b in buildings}
    up: dict[str, list[tuple[str, str]]] = {b: [] for b in buildings}
    for ln in cfg.links:
        for x, y in ((ln.a, ln.b), (ln.b, ln.a)):
            if of[x] is not None and of[y] is None:
                up[of[x]].append((x, y))  # type: ignore[index]
    return _Buildings(cfg, of, hosts, up)


def _deal(shares: list[float], n: int) -> list[int]:
    """Item k (0..n-1) -> path index, in proportion to ``shares`` (smooth weighted round
    robin: every prefix of the items is as close to the shares as whole items allow)."""
    total = sum(shares) or 1.0
    w = [s / total for s in shares]
    count = [0] * len(w)
    out = []
    for k in range(n):
        j = max(range(len(w)), key=lambda i: (w[i] * (k + 1) - count[i], -i))
        count[j] += 1
        out.append(j)
    return out


def _job_name(group: dict, building: str | None) -> str:
    base = f"dp-pp{group.get('pp', 0)}-tp{group.get('tp', 0)}"
    if building is not None:
        base += "-" + re.sub(r"[^A-Za-z0-9_.-]", "_", building)
    return base[:32]


# ---------------------------------------------------------------------------------------------
# the translation


class _Installer:
    def __init__(self, plan: dict, topo_raw: dict, base_dir: Path | None, source: str) -> None:
        self.plan = plan
        self.topo_raw = topo_raw
        self.base_dir = base_dir
        self.source = source
        self.problems: list[str] = []
        self.notes: list[str] = []

    def err(self, where: str, msg: str) -> None:
        self.problems.append(f"{where}: {msg}")

    def fail(self) -> None:
        if self.problems:
            raise PlanError(self.problems, self.source)

    # -- plan shape -------------------------------------------------------------------------
    def check_plan(self) -> None:
        p = self.plan
        if p.get("version") != PLAN_VERSION:
            self.err("plan version", f"{p.get('version')!r}; this controller reads version "
                                     f"{PLAN_VERSION}")
        for key in ("buildings", "ranks", "cross_building_flows", "aggregation_trees"):
            if not isinstance(p.get(key), list):
                self.err(f"plan {key}", "missing or not a list; write the plan with "
                                        "netco explore plan --out")
        self.fail()
        names = []
        for i, b in enumerate(p["buildings"]):
            if not isinstance(b, dict) or not isinstance(b.get("name"), str):
                self.err(f"plan buildings[{i}].name", "missing; every building needs a name")
            else:
                names.append(b["name"])
        self.building_names = names
        for i, r in enumerate(p["ranks"]):
            w = f"plan ranks[{i}]"
            if not isinstance(r, dict):
                self.err(w, "must be a mapping with rank, building, host")
                continue
            if r.get("rank") != i:
                self.err(f"{w}.rank", f"{r.get('rank')!r}; ranks must be listed in order 0, 1, ...")
            if r.get("building") not in names:
                self.err(f"{w}.building", f"unknown building {r.get('building')!r}; plan buildings "
                                          f"are {', '.join(names)}")
            if not isinstance(r.get("host"), str):
                self.err(f"{w}.host", "missing; the plan node this rank runs on")
        self.fail()

    # -- ranks -> hosts ---------------------------------------------------------------------
    def map_hosts(self, view: _Buildings, host_map: dict[str, str] | None) -> dict[str, str]:
        nodes: dict[str, list[str]] = {b: [] for b in self.building_names}
        for r in self.plan["ranks"]:
            if r["host"] not in nodes[r["building"]]:
                nodes[r["building"]].append(r["host"])
        out: dict[str, str] = {}
        if host_map is not None:
            where = {n: b for b, ns in nodes.items() for n in ns}
            for node, host in host_map.items():
                if node not in where:
                    self.err(f"host_map[{node}]", "not a node of the plan (plan ranks[].host)")
                elif host not in {h.name for h in view.cfg.hosts}:
                    self.err(f"host_map[{node}]", f"unknown host {host!r} in the topology")
                elif view.of_switch[view.cfg.host(host).switch] != where[node]:
                    self.err(f"host_map[{node}]", f"{host} attaches to {view.cfg.host(host).switch}, "
                                                  f"not to a switch of building {where[node]}")
                else:
                    out[node] = host
            missing = [n for n in where if n not in host_map]
            if missing:
                self.err("host_map", f"no host for plan nodes {', '.join(missing[:6])}; map every node")
            if len(set(out.values())) != len(out):
                self.err("host_map", "two plan nodes map to one host; give each node its own host")
            return out
        for b, ns in nodes.items():
            if not ns:
                continue
            hosts = view.hosts[b]
            if not view.switches(b):
                self.err("topology switches", f"no switch of plan building {b}; name building "
                                              f"{b}'s switches '{b.lower()}-...' (switches[].name)")
            elif len(hosts) < len(ns):
                self.err("topology hosts", f"the plan runs building {b}'s ranks on {len(ns)} nodes "
                                           f"({ns[0]}..{ns[-1]}) but building {b} has {len(hosts)} "
                                           f"host(s) ({', '.join(hosts) or 'none'}: hosts attached "
                                           f"to switches named '{b.lower()}-...'); add hosts or "
                                           "plan a smaller scenario")
            else:
                out.update(zip(ns, hosts, strict=False))
        return out

    # -- uplinks ----------------------------------------------------------------------------
    def uplink(self, view: _Buildings, name: Any, where: str) -> tuple[str, str] | None:
        """``"A-x1"`` -> (building switch, cross-building switch) of the topology."""
        m = _UPLINK_RE.match(name) if isinstance(name, str) else None
        if m is None or m["b"] not in view.uplinks:
            self.err(where, f"{name!r} is not an uplink name B-x<i> of a plan building")
            return None
        b, i = m["b"], int(m["i"])
        ups = view.uplinks[b]
        if i >= len(ups):
            have = ", ".join(f"{x}-{y}" for x, y in ups) or (
                "none: the cross-building layer is every switch whose name starts with no plan "
                "building's name, e.g. 'x0'")
            self.err(where, f"uplink {name} needs at least {i + 1} link(s) from building {b}'s "
                            f"switches to cross-building switches; the topology has {len(ups)} "
                            f"({have}); add links (links[]) or plan with fewer "
                            "cross_building.parallel_links")
            return None
        return ups[i]

    def cross_route(self, view: _Buildings, a: str, b: str, where: str) -> list[str] | None:
        if a == b:
            return [a]
        sp = shortest_paths(view.part(None), a)
        if b not in sp:
            self.err(where, f"cross-building switches {a} and {b} are not linked through the "
                            "cross-building layer; add a link")
            return None
        return sp[b]

    # -- jobs -------------------------------------------------------------------------------
    def jobs(self, view: _Buildings, rank_hosts: dict[int, str], first_id: int,
             job_kw: dict[str, Any]) -> tuple[list[dict], list[dict]]:
        flows = self.plan["cross_building_flows"]
        up_flows: dict[str, tuple[int, dict]] = {}
        for i, f in enumerate(flows):
            if isinstance(f, dict) and str(f.get("class", "")).endswith("_up") and f.get("dst") == XCORE:
                up_flows.setdefault(f.get("src"), (i, f))
        trees = self.plan["aggregation_trees"]
        crossing = [t for t in trees if isinstance(t, dict) and any(
            isinstance(lf, dict) and lf.get("parent") == XCORE for lf in t.get("leaves", []))]
        deals: dict[str, list[int]] = {}
        for b, (_, f) in up_flows.items():
            deals[b] = _deal([float(p.get("share", 1.0)) for p in f.get("paths", [])], len(crossing))
        raw_jobs: list[dict] = []
        info: list[dict] = []
        next_id = first_id
        k_cross = 0
        for ti, t in enumerate(trees):
            w = f"plan aggregation_trees[{ti}]"
            if not isinstance(t, dict) or not isinstance(t.get("leaves"), list) or not t["leaves"]:
                self.err(w, "needs leaves [{building, ranks, parent}]")
                continue
            group = t.get("group") or {}
            method = t.get("method")
            if method == "ring":
                self.notes.append(f"{w}: flat ring sync: no switch aggregation, no job")
                continue
            leaves = []
            for li, lf in enumerate(t["leaves"]):
                wl = f"{w}.leaves[{li}]"
                ranks = lf.get("ranks") if isinstance(lf, dict) else None
                if not isinstance(ranks, list) or any(r not in rank_hosts for r in ranks):
                    self.err(f"{wl}.ranks", "must list ranks of plan ranks[]")
                    continue
                if lf.get("building") not in view.hosts:
                    self.err(f"{wl}.building", f"unknown building {lf.get('building')!r}")
                    continue
                hosts: list[str] = []
                per: dict[str, list[int]] = {}
                for r in ranks:
                    h = rank_hosts[r]
                    if h not in per:
                        hosts.append(h)
                    per.setdefault(h, []).append(r)
                leaves.append((lf["building"], hosts, per, lf.get("parent")))
            if len(leaves) != len(t["leaves"]):
                continue
            if any(par == XCORE for *_, par in leaves):
                k = k_cross
                k_cross += 1
                if method != "thc":
                    self.notes.append(f"{w}: method {method!r} summed by the cross-building switch "
                                      "is installed as a THC job (the netco switch sums THC indices)")
                nodes: list[dict] = []
                roots = {}
                for b, hosts, _per, _par in leaves:
                    if b in up_flows:
                        fi, f = up_flows[b]
                        j = deals[b][k]
                        hops = f["paths"][j].get("hops", [])
                        name = hops[1] if len(hops) > 1 else None
                        up = self.uplink(view, name, f"plan cross_building_flows[{fi}].paths[{j}].hops")
                    else:
                        name = f"{b}-x0"
                        up = self.uplink(view, name, f"{w}.leaves (building {b}, uplink {name})")
                    if up is None:
                        continue
                    roots[b] = (name, up)
                    nodes += self.building_tree(view, b, hosts, up[0], up[1], w)
                if len(roots) != len(leaves):
                    continue
                xs = {up[1] for _, up in roots.values()}
                if len(xs) != 1:
                    ends = ", ".join(f"{n} -> {up[1]}" for n, up in roots.values())
                    self.err(w, f"the uplinks chosen for this group end at different cross-building "
                                f"switches ({ends}); a THC parent must be a direct neighbour, so link "
                                "every building's uplink of one index to the same cross switch")
                    continue
                root = xs.pop()
                nodes.append({"switch": root})
                members = [h for _, hosts, _, _ in leaves for h in hosts]
                per_all = {h: r for _, _, per, _ in leaves for h, r in per.items()}
                units = [(None, members, per_all, nodes, root)]
            else:
                units = []
                split = len(leaves) > 1
                for b, hosts, per, _par in leaves:
                    sub = derive_tree(view.part(b), hosts, None)
                    if sub is None:
                        self.err(w, f"building {b}'s hosts {', '.join(hosts)} are not connected "
                                    f"through building {b}'s switches; add links")
                        continue
                    nodes = [{"switch": n.switch, **({"parent": n.parent} if n.parent else {})}
                             for n in sub]
                    root = next(n.switch for n in sub if n.parent is None)
                    units.append((b if split else None, hosts, per, nodes, root))
            for b, members, per, nodes, root in units:
                name = _job_name(group, b)
                if len(members) < 2:
                    self.notes.append(f"{w}: {name} has {len(members)} member host; nothing to "
                                      "aggregate, no job")
                    continue
                multi = {h: per[h] for h in members if len(per[h]) > 1}
                if multi:
                    h0 = next(iter(multi))
                    self.notes.append(
                        f"{w}: {name}: {len(multi)} member host(s) hold several ranks of the group "
                        f"(e.g. {h0}: ranks {', '.join(map(str, multi[h0]))}); such a host "
                        "contributes once, the sum of its ranks (reduced over NVLink first)")
                raw_jobs.append({"name": name, "id": next_id, "members": members, "tree": nodes,
                                 **job_kw})
                info.append({"job": name, "id": next_id, "group": group, "method": method,
                             "building": b, "root": root, "members": members,
                             "ranks": {h: per[h] for h in members}, "tree": nodes})
                next_id += 1
        return raw_jobs, info

    def building_tree(self, view: _Buildings, b: str, hosts: list[str], top: str, parent: str,
                      w: str) -> list[dict]:
        """Tree nodes of building ``b`` for ``hosts``: from ``top`` (the uplink switch, child of
        ``parent``) down to the hosts' switches, over building ``b``'s own links."""
        sub = derive_tree(view.part(b), hosts, top)
        if sub is None:
            self.err(w, f"building {b}'s hosts {', '.join(hosts)} are not reachable from its "
                        f"uplink switch {top} over building {b}'s links; add links")
            return []
        return [{"switch": n.switch, "parent": n.parent or parent} for n in sub]

    # -- paths ------------------------------------------------------------------------------
    def paths(self, view: _Buildings, ranked_hosts: dict[str, list[str]],
              carried_by: dict[str, list[str]]) -> tuple[list[dict], list[dict]]:
        raw_paths: list[dict] = []
        seen: set[tuple[str, tuple[str, ...]]] = set()
        info: list[dict] = []
        for fi, f in enumerate(self.plan["cross_building_flows"]):
            w = f"plan cross_building_flows[{fi}]"
            if not isinstance(f, dict):
                self.err(w, "must be a mapping")
                continue
            src, dst, cls = f.get("src"), f.get("dst"), f.get("class")
            entry: dict[str, Any] = {"flow": fi, "class": cls, "src": src, "dst": dst,
                                     "mode": f.get("mode")}
            if XCORE in (src, dst):
                entry["carried_by_jobs"] = carried_by.get(src if dst == XCORE else dst, [])
                info.append(entry)
                continue
            if src not in view.hosts or dst not in view.hosts:
                self.err(f"{w}.src", f"{src!r} -> {dst!r}: use plan building names or {XCORE}")
                continue
            fpaths = f.get("paths")
            if not isinstance(fpaths, list) or not fpaths:
                self.err(f"{w}.paths", "missing; a cross-building flow needs at least one path")
                continue
            targets = ranked_hosts.get(dst, [])
            deal = _deal([float(p.get("share", 1.0)) for p in fpaths], len(targets))
            src_sws = sorted({view.cfg.host(h).switch for h in ranked_hosts.get(src, [])})
            installed = []
            for h, j in zip(targets, deal, strict=True):
                wp = f"{w}.paths[{j}].hops"
                hops = fpaths[j].get("hops") if isinstance(fpaths[j], dict) else None
                if (not isinstance(hops, list) or len(hops) != 5 or hops[0] != src
                        or hops[2] != XCORE or hops[-1] != dst):
                    self.err(wp, f"{hops!r}: expected [{src}, {src}-x<i>, {XCORE}, {dst}-x<j>, {dst}]")
                    break
                a = self.uplink(view, hops[1], wp)
                b = self.uplink(view, hops[3], wp)
                if a is None or b is None:
                    break
                mid = self.cross_route(view, a[1], b[1], wp)
                down = shortest_paths(view.part(dst), b[0]).get(view.cfg.host(h).switch)
                if mid is None:
                    break
                if down is None:
                    self.err(wp, f"{h}'s switch is not reachable from {b[0]} inside building {dst}")
                    break
                tree_up = shortest_paths(view.part(src), a[0])
                vias = []
                for s in [a[0], *src_sws]:
                    up = tree_up.get(s)
                    if up is None:
                        self.err(wp, f"{s} does not reach uplink switch {a[0]} inside building {src}")
                        continue
                    via = tuple([*reversed(up), *mid, *down])
                    if via not in vias:
                        vias.append(via)
                for via in vias:
                    if (h, via) not in seen:
                        seen.add((h, via))
                        raw_paths.append({"dst": h, "via": list(via)})
                installed.append({"dst": h, "path": j, "uplinks": [hops[1], hops[3]],
                                  "via": [list(v) for v in vias]})
            entry["installed"] = installed
            info.append(entry)
        return raw_paths, info

    # -- all --------------------------------------------------------------------------------
    def run(self, host_map: dict[str, str] | None, first_job_id: int | None,
            job_kw: dict[str, Any]) -> Installation:
        self.check_plan()
        topo = parse_config(self.topo_raw, base_dir=self.base_dir, source=self.source)
        view = _view(topo, self.building_names)
        node_hosts = self.map_hosts(view, host_map)
        self.fail()
        rank_hosts = {r["rank"]: node_hosts[r["host"]] for r in self.plan["ranks"]}
        ranked: dict[str, list[str]] = {}
        for r in self.plan["ranks"]:
            lst = ranked.setdefault(r["building"], [])
            if rank_hosts[r["rank"]] not in lst:
                lst.append(rank_hosts[r["rank"]])
        if first_job_id is None:
            ids = [j.id for j in topo.jobs]
            first_job_id = max(ids) + 1 if ids else 1
        jobs, job_info = self.jobs(view, rank_hosts, first_job_id, job_kw)
        carried: dict[str, list[str]] = {}
        for j in job_info:
            if j["building"] is None and j["root"] in view.switches(None):
                for b in {view.of_switch[view.cfg.host(h).switch] for h in j["members"]}:
                    carried.setdefault(b, []).append(j["job"])
        paths, flow_info = self.paths(view, ranked, carried)
        self.fail()
        desired = copy.deepcopy(self.topo_raw)
        taken = {j.get("name") for j in desired.get("jobs") or [] if isinstance(j, dict)}
        for j in jobs:
            if j["name"] in taken:
                self.err("topology jobs", f"a job named {j['name']} is already in the file; rename "
                                          "it (the plan's DP groups are named dp-pp<s>-tp<t>)")
        self.fail()
        desired["jobs"] = [*(desired.get("jobs") or []), *jobs]
        desired["paths"] = [*(desired.get("paths") or []), *paths]
        cfg = parse_config(desired, base_dir=self.base_dir, source=self.source)
        return Installation(cfg, desired, node_hosts, rank_hosts, job_info, flow_info, self.notes)


def install_plan(plan: dict[str, Any], topology: dict[str, Any], *, base_dir: Path | None = None,
                 source: str = "", host_map: dict[str, str] | None = None,
                 first_job_id: int | None = None, **job_fields: Any) -> Installation:
    """Merge a network plan (v1) into a topology's desired state.

    Parameters
    ----------
    plan : dict
        The plan ``netco explore plan --out`` writes (``docs/scaleacross.md``).
    topology : dict
        The controller's topology file as a mapping (``docs/controller.md``); its own jobs and
        paths are kept.
    base_dir, source : optional
        Folder relative paths of the topology are relative to; name used in error messages.
    host_map : dict, optional
        Plan node -> topology host, instead of the naming convention (module docstring).
    first_job_id : int, optional
        ``id`` of the first job (default: one above the file's highest job id, or 1).
    **job_fields
        Extra fields for every job (``num_slots``, ``thc``, ``lane_bits``, ``policy``).

    Returns
    -------
    Installation
        The validated merged config and the mapping (ranks -> hosts, jobs, paths per flow).

    Raises
    ------
    PlanError
        The plan does not fit the topology (each line names the field and the fix).
    ConfigError
        The topology file (or the merged state) is invalid.
    """
    return _Installer(plan, topology, base_dir, source).run(host_map, first_job_id, job_fields)
