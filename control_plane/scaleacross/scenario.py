"""Scenario files: the model, the hardware, the buildings and (optionally) a parallel layout.

A scenario is a JSON or YAML mapping with the sections ``model``, ``hardware``, ``cluster``,
``training`` and ``parallel`` (see ``docs/scaleacross.md`` for every field, its unit and its
default). Loading checks every field and raises :class:`ScenarioError` whose message names the
field (``model.hidden``) and says how to fix it.

Units: bandwidths in ``*_gbps`` are gigabits per second (1e9 bit/s) per direction; ``hbm_gb_s``
is gigabytes per second; ``memory_gb`` is GiB (2**30 bytes); latencies are microseconds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "DTYPE_BYTES",
    "Building",
    "Cluster",
    "CrossBuilding",
    "Hardware",
    "Model",
    "Parallel",
    "Scenario",
    "ScenarioError",
    "load_scenario",
    "parse_scenario",
]

#: bytes per element of each training dtype (activations, weights and gradients on the wire).
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
RECOMPUTE = ("none", "selective", "full")
CROSS = ("auto", "none", "dp", "pp")
DP_SYNC = ("ring", "hierarchical", "ina", "thc")


class ScenarioError(ValueError):
    """A scenario field is missing or wrong; the message names the field and the fix."""


@dataclass(frozen=True)
class Model:
    """Transformer workload (GPT-style dense, or MoE when ``experts`` > 1)."""

    layers: int
    hidden: int
    heads: int
    seq: int
    vocab: int
    experts: int = 1
    top_k: int = 1
    capacity_factor: float = 1.0
    ffn_hidden: int = 0  # 0 -> 4 * hidden
    kv_heads: int = 0  # 0 -> heads (no grouped-query attention)
    gated_mlp: bool = False  # SwiGLU-style MLP with three matrices
    moe_every: int = 1  # every k-th layer is an MoE layer
    name: str = "model"

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 1

    @property
    def moe_layers(self) -> int:
        return self.layers // self.moe_every if self.is_moe else 0


@dataclass(frozen=True)
class Hardware:
    """One GPU type and its node."""

    peak_tflops: float
    memory_gb: float
    gpus_per_node: int
    nvlink_gbps: float
    nic_gbps: float
    hbm_gb_s: float = 2000.0
    nvlink_latency_us: float = 3.0
    nic_latency_us: float = 8.0
    memory_reserved_gb: float = 4.0
    #: peak of the attention core (scores and softmax·V) where it runs in another precision
    #: than the GEMMs (Transformer Engine's FP8 recipes: BF16); ``None``: ``peak_tflops``
    attention_peak_tflops: float | None = None

    @property
    def attention_peak(self) -> float:
        return self.attention_peak_tflops or self.peak_tflops


@dataclass(frozen=True)
class Building:
    name: str
    gpus: int
    uplink_gbps: float | None = None  # overrides the cluster-wide cross-building capacity


@dataclass(frozen=True)
class CrossBuilding:
    """Links from each building to the cross-building aggregation layer (a star).

    ``gbps`` is the capacity of one link; a building has ``parallel_links`` of them. Its usable
    uplink is also capped by ``gpus * nic_gbps / oversubscription``.
    """

    gbps: float | None = None
    latency_us: float = 500.0
    oversubscription: float = 1.0
    parallel_links: int = 1
    ina: bool = False  # an aggregation switch on the cross-building layer (in-network all-reduce)
    thc: bool = False  # that switch sums THC-compressed gradients (4-bit up, 8-bit down)


@dataclass(frozen=True)
class Cluster:
    buildings: tuple[Building, ...]
    cross_building: CrossBuilding = field(default_factory=CrossBuilding)
    intra_oversubscription: float = 1.0

    @property
    def total_gpus(self) -> int:
        return sum(b.gpus for b in self.buildings)


@dataclass(frozen=True)
class Parallel:
    """A parallel layout. ``None`` fields are free (searched) or derived (``dp``)."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: int | None = None
    cp: int | None = None
    microbatch: int | None = None
    global_batch: int | None = None
    interleave: int | None = None
    recompute: str | None = None
    sequence_parallel: bool | None = None
    zero: int | None = None
    cross: str | None = None
    dp_sync: str | None = None
    overlap_dp: bool | None = None
    overlap_ep: bool | None = None
    #: the embedding and the output layer count as one layer each when the layers are split
    #: into pipeline stages (DeepSpeed's ``type:transformer|embedding`` partition): the first
    #: and the last stage hold one transformer layer fewer; ``pp`` divides ``layers + 2``
    embedding_stage: bool = False


@dataclass(frozen=True)
class Scenario:
    model: Model
    hardware: Hardware
    cluster: Cluster
    parallel: Parallel
    dtype: str = "bf16"
    global_batch: int = 0
    name: str = "scenario"
    #: dtype of the accumulated and data-parallel-reduced gradients (``None``: 2 bytes, the
    #: half-precision gradients of Megatron's fp16 path)
    grad_dtype: str | None = None
    #: gradients accumulated by a separate memory-bound pass after each microbatch's backward
    #: (``True``) rather than inside the weight-gradient GEMM (``False``, Megatron's
    #: gradient-accumulation fusion)
    grad_accum_pass: bool = False
    #: with ZeRO >= 1 the gradients are still all-reduced in full, then the updated parameter
    #: shards all-gathered (DeepSpeed's BF16 optimizer); ``False``: reduce-scattered
    zero_grad_allreduce: bool = False
    #: the attention core runs as one fused (flash) kernel: no s x s score matrix in memory,
    #: the masked half of the causal scores skipped, the scores recomputed in its backward
    fused_attention: bool = False
    #: TP collectives overlapped with the GEMMs they feed (Transformer Engine's userbuffers,
    #: NeMo's ``tp_comm_overlap``): only the part the GEMMs cannot hide is exposed
    tp_comm_overlap: bool = False
    #: pipeline sends and receives block in pairs (DeepSpeed's pipeline engine): the
    #: transfers sit on the critical path (see ``cost.evaluate``; not in the event simulation)
    blocking_p2p: bool = False

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def wire_bytes(self) -> int:
        """Bytes per activation element sent between GPUs (TP, CP, EP, pipeline).

        FP8 training (Transformer Engine) casts to FP8 inside its GEMM modules only: their
        outputs, the residual stream and the attention's K, V stay BF16, and the TP
        reductions sum in BF16, so an FP8 run sends 2-byte activations.
        """
        return 2 if self.dtype == "fp8" else self.dtype_bytes

    @property
    def stage_units(self) -> int:
        """What ``pp`` divides: the layers, plus 2 with ``parallel.embedding_stage``."""
        return self.model.layers + (2 if self.parallel.embedding_stage else 0)

    @property
    def grad_bytes(self) -> int:
        return DTYPE_BYTES[self.grad_dtype] if self.grad_dtype else 2

    def with_parallel(self, **kw: Any) -> Scenario:
        return replace(self, parallel=replace(self.parallel, **kw))


# --------------------------------------------------------------------------------------------
# parsing


def _section(raw: dict, name: str, required: bool = True) -> dict:
    sec = raw.get(name)
    if sec is None:
        if required:
            raise ScenarioError(f"{name}: missing section; add a '{name}:' mapping")
        return {}
    if not isinstance(sec, dict):
        raise ScenarioError(f"{name}: must be a mapping of fields, got {type(sec).__name__}")
    return sec


def _check_unknown(sec: dict, prefix: str, allowed: set[str]) -> None:
    for key in sec:
        if key not in allowed:
            raise ScenarioError(
                f"{prefix}.{key}: unknown field; allowed: {', '.join(sorted(allowed))}"
            )


def _num(sec: dict, prefix: str, key: str, kind: type, default: Any = ..., lo: float = 0,
         lo_open: bool = True, allow_none: bool = False) -> Any:
    path = f"{prefix}.{key}"
    if key not in sec or sec[key] is None:
        if sec.get(key, ...) is None and allow_none:
            return None
        if default is ...:
            raise ScenarioError(f"{path}: missing; give a number")
        return default
    val = sec[key]
    if isinstance(val, bool) or not isinstance(val, int | float):
        raise ScenarioError(f"{path}: must be a number, got {val!r}")
    if not math.isfinite(val):
        raise ScenarioError(f"{path}: must be a finite number, got {val!r}")
    if kind is int:
        if float(val) != int(val):
            raise ScenarioError(f"{path}: must be a whole number, got {val!r}")
        val = int(val)
    else:
        val = float(val)
    if (lo_open and val <= lo) or (not lo_open and val < lo):
        op = ">" if lo_open else ">="
        raise ScenarioError(f"{path}: must be {op} {lo:g}, got {val!r}")
    return val


def _bool(sec: dict, prefix: str, key: str, default: bool | None) -> bool | None:
    if key not in sec or sec[key] is None:
        return default
    if not isinstance(sec[key], bool):
        raise ScenarioError(f"{prefix}.{key}: must be true or false, got {sec[key]!r}")
    return sec[key]


def _choice(sec: dict, prefix: str, key: str, choices: tuple[str, ...], default: str | None
            ) -> str | None:
    if key not in sec or sec[key] is None:
        return default
    val = str(sec[key]).lower()
    if val not in choices:
        raise ScenarioError(f"{prefix}.{key}: must be one of {', '.join(choices)}, got {sec[key]!r}")
    return val


def _names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def _parse_model(raw: dict) -> Model:
    sec = _section(raw, "model")
    _check_unknown(sec, "model", _names(Model))
    p = "model"
    m = Model(
        layers=_num(sec, p, "layers", int),
        hidden=_num(sec, p, "hidden", int),
        heads=_num(sec, p, "heads", int),
        seq=_num(sec, p, "seq", int),
        vocab=_num(sec, p, "vocab", int),
        experts=_num(sec, p, "experts", int, 1),
        top_k=_num(sec, p, "top_k", int, 1),
        capacity_factor=_num(sec, p, "capacity_factor", float, 1.0),
        ffn_hidden=_num(sec, p, "ffn_hidden", int, 0, lo_open=False),
        kv_heads=_num(sec, p, "kv_heads", int, 0, lo_open=False),
        gated_mlp=bool(_bool(sec, p, "gated_mlp", False)),
        moe_every=_num(sec, p, "moe_every", int, 1),
        name=str(sec.get("name", "model")),
    )
    if m.hidden % m.heads:
        raise ScenarioError(
            f"model.heads: hidden ({m.hidden}) must be divisible by heads ({m.heads})"
        )
    if m.heads % m.kv:
        raise ScenarioError(f"model.kv_heads: heads ({m.heads}) must be a multiple of {m.kv}")
    if m.top_k > m.experts:
        raise ScenarioError(
            f"model.top_k: {m.top_k} exceeds model.experts ({m.experts}); use top_k <= experts"
        )
    return m


def _parse_hardware(raw: dict) -> Hardware:
    sec = _section(raw, "hardware")
    _check_unknown(sec, "hardware", _names(Hardware))
    p = "hardware"
    return Hardware(
        peak_tflops=_num(sec, p, "peak_tflops", float),
        memory_gb=_num(sec, p, "memory_gb", float),
        gpus_per_node=_num(sec, p, "gpus_per_node", int),
        nvlink_gbps=_num(sec, p, "nvlink_gbps", float),
        nic_gbps=_num(sec, p, "nic_gbps", float),
        hbm_gb_s=_num(sec, p, "hbm_gb_s", float, 2000.0),
        nvlink_latency_us=_num(sec, p, "nvlink_latency_us", float, 3.0, lo_open=False),
        nic_latency_us=_num(sec, p, "nic_latency_us", float, 8.0, lo_open=False),
        memory_reserved_gb=_num(sec, p, "memory_reserved_gb", float, 4.0, lo_open=False),
        attention_peak_tflops=_num(sec, p, "attention_peak_tflops", float, None,
                                   allow_none=True),
    )


def _parse_cluster(raw: dict, hw: Hardware) -> Cluster:
    sec = _section(raw, "cluster")
    _check_unknown(sec, "cluster", {"buildings", "cross_building", "intra_oversubscription"})
    blds = sec.get("buildings")
    if not isinstance(blds, list) or not blds:
        raise ScenarioError("cluster.buildings: must be a non-empty list like [{gpus: 1024}]")
    buildings = []
    for i, b in enumerate(blds):
        p = f"cluster.buildings[{i}]"
        if not isinstance(b, dict):
            raise ScenarioError(f"{p}: must be a mapping like {{gpus: 1024}}")
        _check_unknown(b, p, _names(Building))
        gpus = _num(b, p, "gpus", int)
        if gpus % hw.gpus_per_node:
            raise ScenarioError(
                f"{p}.gpus: {gpus} is not a multiple of hardware.gpus_per_node "
                f"({hw.gpus_per_node}); buildings hold whole nodes"
            )
        buildings.append(Building(
            name=str(b.get("name", chr(ord("A") + i) if i < 26 else f"B{i}")),
            gpus=gpus,
            uplink_gbps=_num(b, p, "uplink_gbps", float, None, allow_none=True),
        ))
    if len({b.name for b in buildings}) != len(buildings):
        raise ScenarioError("cluster.buildings: building names must be unique")
    xs = sec.get("cross_building", {}) or {}
    if not isinstance(xs, dict):
        raise ScenarioError("cluster.cross_building: must be a mapping")
    p = "cluster.cross_building"
    _check_unknown(xs, p, _names(CrossBuilding))
    over = _num(xs, p, "oversubscription", float, 1.0)
    if over < 1:
        raise ScenarioError(f"{p}.oversubscription: must be >= 1 (1:N is written N), got {over}")
    xb = CrossBuilding(
        gbps=_num(xs, p, "gbps", float, None, allow_none=True),
        latency_us=_num(xs, p, "latency_us", float, 500.0, lo_open=False),
        oversubscription=over,
        parallel_links=_num(xs, p, "parallel_links", int, 1),
        ina=bool(_bool(xs, p, "ina", False)),
        thc=bool(_bool(xs, p, "thc", False)),
    )
    if xb.thc and not xb.ina:
        raise ScenarioError(f"{p}.thc: THC needs the aggregation switch; set {p}.ina: true too")
    intra = _num(sec, "cluster", "intra_oversubscription", float, 1.0)
    if intra < 1:
        raise ScenarioError(f"cluster.intra_oversubscription: must be >= 1, got {intra}")
    return Cluster(tuple(buildings), xb, intra)


def _parse_parallel(raw: dict) -> Parallel:
    sec = _section(raw, "parallel", required=False)
    _check_unknown(sec, "parallel", _names(Parallel))
    p = "parallel"
    out = Parallel(
        tp=_num(sec, p, "tp", int, None),
        pp=_num(sec, p, "pp", int, None),
        dp=_num(sec, p, "dp", int, None),
        ep=_num(sec, p, "ep", int, None),
        cp=_num(sec, p, "cp", int, None),
        microbatch=_num(sec, p, "microbatch", int, None),
        global_batch=_num(sec, p, "global_batch", int, None),
        interleave=_num(sec, p, "interleave", int, None),
        recompute=_choice(sec, p, "recompute", RECOMPUTE, None),
        sequence_parallel=_bool(sec, p, "sequence_parallel", None),
        zero=_num(sec, p, "zero", int, None, lo=0, lo_open=False),
        embedding_stage=bool(_bool(sec, p, "embedding_stage", False)),
        cross=_choice(sec, p, "cross", CROSS, None),
        dp_sync=_choice(sec, p, "dp_sync", DP_SYNC, None),
        overlap_dp=_bool(sec, p, "overlap_dp", None),
        overlap_ep=_bool(sec, p, "overlap_ep", None),
    )
    if out.zero is not None and out.zero > 3:
        raise ScenarioError(f"parallel.zero: ZeRO stage must be 0, 1, 2 or 3, got {out.zero}")
    return out


def parse_scenario(raw: Any, name: str = "scenario") -> Scenario:
    """Build a :class:`Scenario` from a parsed JSON/YAML mapping, checking every field."""
    if not isinstance(raw, dict):
        raise ScenarioError("scenario: the file must hold a mapping with model, hardware, cluster")
    _check_unknown(raw, "scenario", {"model", "hardware", "cluster", "parallel", "training",
                                     "name", "description"})
    model = _parse_model(raw)
    hw = _parse_hardware(raw)
    cluster = _parse_cluster(raw, hw)
    par = _parse_parallel(raw)
    tr = _section(raw, "training", required=False)
    _check_unknown(tr, "training", {"global_batch", "dtype", "grad_dtype", "grad_accum_pass",
                                    "zero_grad_allreduce", "fused_attention",
                                    "tp_comm_overlap", "blocking_p2p"})
    dtype = _choice(tr, "training", "dtype", tuple(DTYPE_BYTES), "bf16") or "bf16"
    grad_dtype = _choice(tr, "training", "grad_dtype", tuple(DTYPE_BYTES), None)
    grad_accum_pass = bool(_bool(tr, "training", "grad_accum_pass", False))
    zero_ar = bool(_bool(tr, "training", "zero_grad_allreduce", False))
    fused = bool(_bool(tr, "training", "fused_attention", False))
    tp_overlap = bool(_bool(tr, "training", "tp_comm_overlap", False))
    blocking = bool(_bool(tr, "training", "blocking_p2p", False))
    gb = par.global_batch or _num(tr, "training", "global_batch", int, 0, lo_open=False)
    if not gb:
        raise ScenarioError(
            "parallel.global_batch: missing; give parallel.global_batch or training.global_batch "
            "(sequences per iteration)"
        )
    return Scenario(model, hw, cluster, par, dtype=dtype, global_batch=int(gb),
                    name=str(raw.get("name", name)), grad_dtype=grad_dtype,
                    grad_accum_pass=grad_accum_pass, zero_grad_allreduce=zero_ar,
                    fused_attention=fused, tp_comm_overlap=tp_overlap, blocking_p2p=blocking)


def load_scenario(path: str | Path) -> Scenario:
    """Read a scenario file (``.json``, ``.yaml`` or ``.yml``)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"scenario: cannot read {path}: {exc.strerror}") from exc
    try:
        is_json = path.suffix.lower() == ".json"
        raw = json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ScenarioError(f"scenario: {path} is not valid JSON/YAML: {exc}") from exc
    return parse_scenario(raw, name=path.stem)
