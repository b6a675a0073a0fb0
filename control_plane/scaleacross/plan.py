"""One resolved parallel plan: degrees, schedule, placement and network technique.

:func:`resolve_plan` fills the defaults of a scenario's ``parallel`` section and checks it,
raising :class:`ScenarioError` that names the offending field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from control_plane.scaleacross.cost import (
    COLUMNS,
    CROSS_CODES,
    RECOMPUTE_CODES,
    SYNC_CODES,
    Efficiency,
    Plans,
    evaluate,
)
from control_plane.scaleacross.scenario import Scenario, ScenarioError

__all__ = ["Plan", "plans_to_list", "resolve_plan"]

_INV_CROSS = {v: k for k, v in CROSS_CODES.items()}
_INV_SYNC = {v: k for k, v in SYNC_CODES.items()}
_INV_RC = {v: k for k, v in RECOMPUTE_CODES.items()}


@dataclass(frozen=True)
class Plan:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    cp: int = 1
    microbatch: int = 1
    interleave: int = 1
    recompute: str = "selective"
    sequence_parallel: bool = False
    zero: int = 1
    cross: str = "none"
    dp_sync: str = "ring"
    overlap_dp: bool = True
    overlap_ep: bool = False

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def schedule(self) -> str:
        return "interleaved" if self.interleave > 1 else "1f1b"

    def microbatches(self, global_batch: int) -> int:
        return global_batch // (self.microbatch * self.dp)

    def to_arrays(self) -> Plans:
        vals = {
            "tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "cp": self.cp,
            "mb": self.microbatch, "v": self.interleave, "rc": RECOMPUTE_CODES[self.recompute],
            "sp": int(self.sequence_parallel), "zero": self.zero,
            "cross": CROSS_CODES[self.cross], "sync": SYNC_CODES[self.dp_sync],
            "odp": int(self.overlap_dp), "oep": int(self.overlap_ep),
        }
        return {k: np.array([vals[k]], dtype=np.int64) for k in COLUMNS}

    def to_dict(self) -> dict:
        out = asdict(self)
        out["schedule"] = self.schedule
        return out


def plans_to_list(P: Plans, idx) -> list[Plan]:
    """Rows ``idx`` of a plan table as :class:`Plan` objects."""
    out = []
    for i in np.atleast_1d(idx):
        r = {k: int(P[k][i]) for k in COLUMNS}
        out.append(Plan(
            tp=r["tp"], pp=r["pp"], dp=r["dp"], ep=r["ep"], cp=r["cp"], microbatch=r["mb"],
            interleave=r["v"], recompute=_INV_RC[r["rc"]], sequence_parallel=bool(r["sp"]),
            zero=r["zero"], cross=_INV_CROSS[r["cross"]], dp_sync=_INV_SYNC[r["sync"]],
            overlap_dp=bool(r["odp"]), overlap_ep=bool(r["oep"]),
        ))
    return out


def check_plan(sc: Scenario, pl: Plan) -> None:
    """Raise :class:`ScenarioError` (naming the field) if ``pl`` is not a valid layout."""
    md, B = sc.model, sc.global_batch
    if md.heads % pl.tp or md.hidden % pl.tp:
        raise ScenarioError(
            f"parallel.tp: {pl.tp} must divide model.heads ({md.heads}) and model.hidden")
    if md.kv % pl.tp and md.kv < pl.tp and pl.tp % md.kv:
        raise ScenarioError(f"parallel.tp: {pl.tp} incompatible with model.kv_heads ({md.kv})")
    units = sc.stage_units
    what = "model.layers + 2 (parallel.embedding_stage)" if units != md.layers else "model.layers"
    if units % pl.pp:
        raise ScenarioError(
            f"parallel.pp: {pl.pp} must divide {what} ({units}); try a divisor")
    if (units // pl.pp) % pl.interleave:
        raise ScenarioError(
            f"parallel.interleave: {pl.interleave} must divide the layers per stage "
            f"({units // pl.pp})")
    if pl.interleave > 1 and pl.pp == 1:
        raise ScenarioError("parallel.interleave: needs pp > 1; set interleave: 1")
    if md.seq % pl.cp:
        raise ScenarioError(f"parallel.cp: {pl.cp} must divide model.seq ({md.seq})")
    if pl.ep > 1 and not md.is_moe:
        raise ScenarioError("parallel.ep: expert parallelism needs model.experts > 1; set ep: 1")
    if md.is_moe and md.experts % pl.ep:
        raise ScenarioError(f"parallel.ep: {pl.ep} must divide model.experts ({md.experts})")
    if pl.dp % pl.ep:
        raise ScenarioError(
            f"parallel.ep: {pl.ep} must divide parallel.dp ({pl.dp}); EP groups are made of "
            "data-parallel ranks")
    if B % (pl.microbatch * pl.dp):
        raise ScenarioError(
            f"parallel.global_batch: {B} is not divisible by microbatch*dp "
            f"({pl.microbatch}*{pl.dp}); change microbatch, dp or global_batch")
    m = B // (pl.microbatch * pl.dp)
    if pl.interleave > 1 and m % pl.pp:
        raise ScenarioError(
            f"parallel.interleave: the interleaved schedule needs the microbatch count ({m}) to "
            f"be a multiple of pp ({pl.pp}); change microbatch or global_batch")
    total = sc.cluster.total_gpus
    if pl.world > total:
        raise ScenarioError(
            f"parallel.dp: tp*pp*dp*cp = {pl.world} GPUs but the cluster has {total}; "
            "lower a degree")
    xb = sc.cluster.cross_building
    if pl.dp_sync in ("ina", "thc") and not xb.ina:
        raise ScenarioError(
            f"parallel.dp_sync: {pl.dp_sync} needs cluster.cross_building.ina: true")
    if pl.dp_sync == "thc" and not xb.thc:
        raise ScenarioError("parallel.dp_sync: thc needs cluster.cross_building.thc: true")
    if pl.zero not in (0, 1, 2, 3):
        raise ScenarioError("parallel.zero: must be 0, 1, 2 or 3")


def resolve_plan(sc: Scenario, eff: Efficiency | None = None) -> Plan:
    """The plan the scenario's ``parallel`` section describes, with defaults filled in.

    ``dp`` defaults to as many replicas as the cluster holds (and the batch divides); ``cross``
    ``auto`` keeps a plan that fits in the largest building inside it, else splits DP over
    buildings when that places, else PP.
    """
    pr = sc.parallel
    if pr.tp is None and pr.pp is None and pr.dp is None:
        raise ScenarioError(
            "parallel: missing; 'predict' needs at least parallel.tp and parallel.pp "
            "(use 'search' to find them)")
    tp, pp, cp, ep = pr.tp or 1, pr.pp or 1, pr.cp or 1, pr.ep or 1
    b = pr.microbatch or 1
    dp = pr.dp
    if dp is None:
        dp = sc.cluster.total_gpus // (tp * pp * cp)
        while dp > 0 and (sc.global_batch % (b * dp) or dp % ep):
            dp -= 1
        if dp == 0:
            raise ScenarioError(
                "parallel.dp: no data-parallel degree fits the cluster and divides "
                "global_batch/microbatch; set parallel.dp")
    base = dict(
        tp=tp, pp=pp, dp=dp, ep=ep, cp=cp, microbatch=b, interleave=pr.interleave or 1,
        recompute=pr.recompute or "selective",
        sequence_parallel=pr.sequence_parallel if pr.sequence_parallel is not None else tp > 1,
        zero=pr.zero if pr.zero is not None else 1,
        overlap_dp=pr.overlap_dp if pr.overlap_dp is not None else True,
        overlap_ep=bool(pr.overlap_ep),
    )
    sync = pr.dp_sync
    cross = pr.cross or "auto"
    candidates = ["none", "dp", "pp"] if cross == "auto" else [cross]
    last_err = ""
    for cr in candidates:
        s = sync or ("hierarchical" if cr == "dp" else "ring")
        pl = Plan(**base, cross=cr, dp_sync=s)
        check_plan(sc, pl)
        res = evaluate(sc, pl.to_arrays(), eff)
        if bool(res["placeable"][0]):
            return pl
        last_err = (f"parallel.cross: '{cr}' cannot place {pl.world} GPUs on the buildings "
                    f"({', '.join(str(x.gpus) for x in sc.cluster.buildings)} GPUs)")
    raise ScenarioError(last_err + "; try cross: dp or pp, or smaller degrees")
