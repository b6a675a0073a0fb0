"""Graph algorithms over the validated network: shortest paths and aggregation trees.

Pure functions shared by validation (default trees), routing (next hops) and ScaleAcross
(installing a plan).
"""

from __future__ import annotations

import itertools

from control_plane.config.schema import NetworkConfig, TreeNode


def shortest_paths(cfg: NetworkConfig, src: str) -> dict[str, list[str]]:
    """Hop-count shortest paths from switch ``src`` to every reachable switch.

    Ties are broken by the order of ``switches`` in the file, so the result is
    deterministic. Returns switch → path (list of switches, ``src`` first).
    """
    order = {s.name: i for i, s in enumerate(cfg.switches)}
    paths = {src: [src]}
    frontier = [src]
    while frontier:
        nxt: list[str] = []
        for u in frontier:
            for v in sorted(cfg.neighbours(u), key=order.__getitem__):
                if v not in paths:
                    paths[v] = [*paths[u], v]
                    nxt.append(v)
        frontier = sorted(nxt, key=lambda s: (order[paths[s][-2]], order[s]))
    return paths


def derive_tree(cfg: NetworkConfig, members: list[str], root: str | None) -> tuple[TreeNode, ...] | None:
    """Aggregation tree for ``members``: the shortest-path tree from ``root`` over the links,
    pruned to the switches that lead to a member's attachment switch.

    The default root is the switch closest to all attachment switches: the smallest maximum
    hop count, then the smallest total, then the most members attached, then the first in
    the file. Returns None when some attachment switch is unreachable from the root.
    """
    order = {s.name: i for i, s in enumerate(cfg.switches)}
    attach = {h: cfg.host(h).switch for h in members}
    counts: dict[str, int] = {}
    for sw in attach.values():
        counts[sw] = counts.get(sw, 0) + 1
    if root is None:
        best = None
        for s in cfg.switches:
            sp = shortest_paths(cfg, s.name)
            if any(a not in sp for a in counts):
                continue
            dist = [len(sp[a]) - 1 for a in counts]
            rank = (max(dist), sum(dist), -counts.get(s.name, 0), order[s.name])
            if best is None or rank < best[0]:
                best = (rank, s.name)
        if best is None:
            return None
        root = best[1]
    paths = shortest_paths(cfg, root)
    if any(sw not in paths for sw in counts):
        return None
    parent: dict[str, str | None] = {root: None}
    for sw in counts:
        p = paths[sw]
        for a, b in itertools.pairwise(p):
            parent[b] = a
    return tuple(TreeNode(sw, parent[sw], tuple(h for h in members if attach[h] == sw))
                 for sw in sorted(parent, key=order.__getitem__))
