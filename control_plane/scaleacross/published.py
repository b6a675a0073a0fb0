"""Published end-to-end training runs the cost model is validated against.

Each :class:`Row` holds one run: its publication and the table it comes from, the configuration
as published (model shape, GPUs, TP/PP/DP/CP, micro and global batch, sequence, dtype,
recomputation, pipeline schedule) and the published number, quoted next to it. Where a source
leaves a setting out, the row says what is assumed:

* **pipeline schedule**: when a source does not state interleaving, the row uses the
  non-interleaved 1F1B schedule (``v = 1``), which Narayanan et al. SC'21 §5.3.2 call the
  "default" schedule; rows whose source states a chunk count use it.
* **no DP overlap**, **no distributed optimizer** (``zero = 0``) unless the source says
  otherwise (MT-NLG and BLOOM: ZeRO stage 1; NeMo's recipes: distributed optimizer with
  overlapped gradient reduce and parameter gather); sequence parallelism only where the source
  says so;
* **engine**: Megatron's 2-byte gradients with the accumulation fused into the weight-gradient
  GEMM, except the DeepSpeed bf16 runs (MT-NLG, BLOOM): fp32 gradients all-reduced in full and
  a per-microbatch accumulation pass (``_DS_BF16``; see the comment above those rows).

How the iteration time is derived from the published number (``Row.derivation``):

* ``iteration_s``: the source gives the iteration time itself;
* ``tflops``: ``F / (GPUs · X)`` with ``F`` the FLOPs of Narayanan et al. eq. (3)
  (``96·B·s·l·h²·(1 + s/6h + V/16lh)``, recomputation included), the count both Narayanan
  tables use for their "achieved teraFLOP/s per GPU" ``X``;
* ``tokens_s_gpu``: ``B · s / (GPUs · tokens/s/GPU)``.

Rows left out, and why (so that nobody adds them back unknowingly):

* Llama 3 405B (Llama Team 2024, Table 4: 8,192 GPUs TP8 CP1 PP16 DP64, seq 8,192, 32
  sequences per DP group, 430 TFLOP/s per GPU; 16,384 GPUs DP128, 16 per group, 400): 126 layers
  over 16 stages with the first and last stage one layer short, which a plan here cannot
  express (``pp`` must divide the layers), and the FLOP count behind "TFLOPs/GPU" is not
  stated; its CP16 row is transcribed with DP 4 in one copy of the paper and DP 8 in others.
* MegaScale (Jiang et al., NSDI'24): parallel transformer blocks, sliding-window attention and
  LAMB, which the cost model does not represent.
* NeMo's Nemotron rows (squared-ReLU MLP and shapes the cost model does not take); every
  other row of NeMo's table (v2.1.0 copy, which states all global batches) is in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from control_plane.scaleacross import formulas as fm
from control_plane.scaleacross.scenario import Scenario, parse_scenario

__all__ = ["A100", "H100_FP8", "PUBLICATIONS", "ROWS", "TABLE1", "Row"]

#: Selene DGX A100: 8 A100-80GB per node, NVLink 300 GB/s per direction, 8 x 200 Gb/s HDR
#: (Narayanan et al. §5, Korthikanti et al. §6; MT-NLG ran on the same machine).
A100 = {"peak_tflops": 312, "memory_gb": 80, "gpus_per_node": 8, "nvlink_gbps": 2400,
        "nic_gbps": 200, "hbm_gb_s": 2039}
#: DGX H100 under Transformer Engine's FP8 recipe: GEMMs at the dense FP8 peak (1,979 TFLOP/s),
#: the attention at the dense BF16 peak (989 TFLOP/s): TE's ``DelayedScaling`` recipe has
#: "fp8_dpa: bool, default = `False`  Whether to enable FP8 dot product attention" and no row
#: here states FP8 attention (transformer_engine/common/recipe.py)
H100_FP8 = {"peak_tflops": 1979, "memory_gb": 80, "gpus_per_node": 8, "nvlink_gbps": 3600,
            "nic_gbps": 400, "hbm_gb_s": 3350, "attention_peak_tflops": 989}

NARAYANAN = "Narayanan et al. SC'21"
KORTHIKANTI = "Korthikanti et al. MLSys'23"
MTNLG = "Smith et al. 2022 (MT-NLG)"
NEMO = "NVIDIA NeMo 24.12"
BLOOM = "BigScience BLOOM (tr11)"
BRIDGE = "NVIDIA Megatron-Bridge 25.11"
#: the publications, in the order tables list them
PUBLICATIONS = (NARAYANAN, KORTHIKANTI, MTNLG, BLOOM, NEMO, BRIDGE)


@dataclass(frozen=True)
class Row:
    """One published run. Exactly one of ``iteration_s``, ``tflops``, ``tokens_s_gpu``."""

    name: str
    publication: str
    source: str  # table/section and the published cells
    model: dict
    hardware: dict
    tp: int
    pp: int
    gpus: int
    batch: int
    dtype: str
    recompute: str
    interleave: int = 1  # 1 where the source states none (see the module docstring)
    microbatch: int = 1
    cp: int = 1
    sequence_parallel: bool = False
    zero: int = 0
    embedding_stage: bool = False
    overlap_dp: bool = False
    training: dict = field(default_factory=dict)  # extra ``training`` fields (grad_dtype, ...)
    iteration_s: float | None = None
    tflops: float | None = None
    tokens_s_gpu: float | None = None
    calibrate: bool = False

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp * self.cp)

    @property
    def derivation(self) -> str:
        if self.iteration_s is not None:
            return "iteration time as published"
        if self.tflops is not None:
            return f"eq. 3 FLOPs / ({self.gpus} GPUs x {self.tflops:g} TFLOP/s)"
        return f"GBS x seq / ({self.gpus} GPUs x {self.tokens_s_gpu:g} tokens/s/GPU)"

    def scenario(self) -> Scenario:
        raw = {
            "model": self.model, "hardware": self.hardware,
            "cluster": {"buildings": [{"gpus": self.gpus}]},
            "training": {"dtype": self.dtype},
            "parallel": {"tp": self.tp, "pp": self.pp, "dp": self.dp, "cp": self.cp,
                         "microbatch": self.microbatch, "global_batch": self.batch,
                         "interleave": self.interleave, "recompute": self.recompute,
                         "zero": self.zero, "overlap_dp": self.overlap_dp, "dp_sync": "ring",
                         "sequence_parallel": self.sequence_parallel,
                         "embedding_stage": self.embedding_stage},
        }
        raw["training"].update(self.training)
        return parse_scenario(raw, name=self.name)

    def measured_s(self) -> float:
        """The iteration time the publication implies (see :attr:`derivation`)."""
        if self.iteration_s is not None:
            return self.iteration_s
        sc = self.scenario()
        if self.tflops is not None:
            return fm.flops_per_iteration(sc.model, self.batch, "full") / (
                self.gpus * self.tflops * 1e12)
        assert self.tokens_s_gpu is not None
        return self.batch * sc.model.seq / (self.gpus * self.tokens_s_gpu)

    def config(self) -> dict:
        """The configuration as a flat dict (tables and JSON)."""
        m = self.model
        return {"layers": m["layers"], "hidden": m["hidden"], "heads": m["heads"],
                "seq": m["seq"], "vocab": m["vocab"], "gpus": self.gpus, "tp": self.tp,
                "pp": self.pp, "dp": self.dp, "cp": self.cp, "microbatch": self.microbatch,
                "global_batch": self.batch, "interleave": self.interleave,
                "dtype": self.dtype, "recompute": self.recompute,
                "sequence_parallel": self.sequence_parallel, "zero": self.zero,
                "embedding_stage": self.embedding_stage, "overlap_dp": self.overlap_dp,
                **self.training}


def _gpt(L: int, h: int, a: int, vocab: int = 51200) -> dict:
    return {"layers": L, "hidden": h, "heads": a, "seq": 2048, "vocab": vocab}


# ---- Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", SC'21. Table 1 (weak scaling), cells: params (B), heads, hidden, layers, TP,
# PP, GPUs, batch, achieved TFLOP/s per GPU. fp16, s = 2048, V = 51200, full recomputation,
# microbatch 1 (eq. 3 "assumes activation recomputation"). Interleaving is not stated.
TABLE1 = [
    (1.7, 24, 2304, 24, 1, 1, 32, 512, 137), (3.6, 32, 3072, 30, 2, 1, 64, 512, 138),
    (7.5, 32, 4096, 36, 4, 1, 128, 512, 142), (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135),
    (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138), (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140),
    (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148), (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155),
    (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163),
    (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163),
]
ROWS: list[Row] = [
    Row(f"GPT-{pb}B", NARAYANAN, f"Table 1: {pb}B, t={t} p={p}, {g} GPUs, B={bs}, {tf} TFLOP/s",
        _gpt(L, h, a), A100, t, p, g, bs, "fp16", "full", tflops=tf, calibrate=i % 2 == 0)
    for i, (pb, a, h, L, t, p, g, bs, tf) in enumerate(TABLE1)
]
# Table 2, PTD-P rows (same machine and settings as Table 1, microbatch 1). Cells: 174.6B,
# model-parallel size 96 (= t 8 x p 12: "tensor-model-parallel size of 8" for large models),
# batch 1536, 384 / 768 / 1536 GPUs, 153 / 149 / 141 TFLOP/s; 529.6B (Table 1's model),
# model-parallel 280 (8 x 35), batch 2240, 560 / 1120 / 2240 GPUs, 171 / 167 / 159 TFLOP/s.
ROWS += [
    Row(f"GPT-174.6B {g} GPUs", NARAYANAN,
        f"Table 2 PTD-P: 174.6B, model-parallel 96, B=1536, {g} GPUs, {tf} TFLOP/s",
        _gpt(96, 12288, 96), A100, 8, 12, g, 1536, "fp16", "full", tflops=tf)
    for g, tf in ((384, 153), (768, 149), (1536, 141))
] + [
    Row(f"GPT-529.6B {g} GPUs", NARAYANAN,
        f"Table 2 PTD-P: 529.6B, model-parallel 280, B=2240, {g} GPUs, {tf} TFLOP/s",
        _gpt(105, 20480, 128), A100, 8, 35, g, 2240, "fp16", "full", tflops=tf)
    for g, tf in ((560, 171), (1120, 167), (2240, 159))
]

# ---- Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models"
# (arXiv:2205.05198, MLSys'23). Table 3 (configurations, no data parallelism): 22B 64 heads
# h 6144 48 layers t8 p1 8 GPUs B4 b4; 175B 96/12288/96 t8 p8 64 GPUs B64 b1; 530B
# 128/20480/105 t8 p35 280 GPUs B280 b1; 1T 160/25600/128 t8 p64 512 GPUs B512 b1. §6: s = 2048,
# V = 51200, "three interleaving stages" for the 175B and 530B models (none stated for 1T),
# mixed precision on Selene. Table 5, iteration time (s), full recompute / present work
# (selective recompute + sequence parallelism): 22B 1.42 / 1.10, 175B 18.13 / 13.75,
# 530B 49.05 / 37.83, 1T 94.42 / 71.49. §6.3: the 530B model at 8-way DP (2240 GPUs, batch
# x 8) takes 39.15 s per iteration, gradient all-reduce not overlapped.
_K = [  # name, (L, h, a), t, p, GPUs, B, b, v, full s, present-work s
    ("22B", (48, 6144, 64), 8, 1, 8, 4, 4, 1, 1.42, 1.10),
    ("175B", (96, 12288, 96), 8, 8, 64, 64, 1, 3, 18.13, 13.75),
    ("530B", (105, 20480, 128), 8, 35, 280, 280, 1, 3, 49.05, 37.83),
    ("1T", (128, 25600, 160), 8, 64, 512, 512, 1, 1, 94.42, 71.49),
]
for _n, _shape, _t, _p, _g, _B, _b, _v, _full, _sel in _K:
    ROWS.append(Row(f"K-{_n} full recompute", KORTHIKANTI,
                    f"Tables 3+5: {_n}, full recompute, {_full} s", _gpt(*_shape), A100, _t,
                    _p, _g, _B, "fp16", "full", interleave=_v, microbatch=_b,
                    iteration_s=_full))
    ROWS.append(Row(f"K-{_n} selective+SP", KORTHIKANTI,
                    f"Tables 3+5: {_n}, present work, {_sel} s", _gpt(*_shape), A100, _t, _p,
                    _g, _B, "fp16", "selective", interleave=_v, microbatch=_b,
                    sequence_parallel=True, iteration_s=_sel))
ROWS.append(Row("K-530B selective+SP DP8", KORTHIKANTI, "§6.3: 530B at 8-way DP, 39.15 s",
                _gpt(105, 20480, 128), A100, 8, 35, 2240, 2240, "fp16", "selective",
                interleave=3, sequence_parallel=True, iteration_s=39.15))

# ---- Smith et al., "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B" (2022).
# §2.4: global batch 1920 on 280 / 350 / 420 DGX A100 servers, iteration time 60.1 / 50.2 /
# 44.4 s (126 / 121 / 113 TFLOP/s per GPU). 105 layers, hidden 20480, 128 heads, sequence
# 2048; 8-way tensor and 35-way pipeline parallelism (DeepSpeed's pipeline engine), data
# parallelism with ZeRO stage 1 (DeepSpeed ZeRO tutorial). Not stated, assumed: no
# interleaving (v = 1), microbatch 1, full recomputation (the published TFLOP/s equal eq. 3,
# which counts the recomputed forward, to 0.2 %). GPT-2 BPE vocabulary, 50,272 entries once
# padded (cli99/llm-analysis model config "mt-nlg-530b").
# DeepSpeed's pipeline engine sends and receives in blocking pairs ("The communication is
# blocking and must be paired with a :class:`RecvActivation` on the next pipeline stage to
# avoid deadlock", deepspeed/runtime/pipe/schedule.py; p2p.py: ``dist.send``/``dist.recv``):
# ``blocking_p2p``. Its activations are partitioned over the TP ranks ("self.is_pipe_partitioned
# = self.is_model_parallel", runtime/pipe/engine.py), as Megatron's scatter/gather does.
_DS_BF16 = {"grad_dtype": "fp32", "grad_accum_pass": True, "zero_grad_allreduce": True,
            "blocking_p2p": True}
ROWS += [
    Row(f"MT-NLG 530B {n} nodes", MTNLG, f"§2.4: {n} DGX A100, B=1920, {s} s ({tf} TFLOP/s)",
        _gpt(105, 20480, 128, 50272), A100, 8, 35, n * 8, 1920, "bf16", "full", zero=1,
        training=_DS_BF16, iteration_s=s)
    for n, s, tf in ((280, 60.1, 126), (350, 50.2, 121), (420, 44.4, 113))
]

# ---- BigScience BLOOM-176B (bigscience-workshop/bigscience, train/tr11-176B-ml/README.md,
# commit 00327f8). "GPUs = 384 (48 nodes of 8) ... TP=4 PP=12 DP=8 MBS=2", GBS 2048, SEQ_LEN
# 2048, NHIDDEN=14336 NLAYERS=70 NHEADS=112, embedding "250880*14336"; "--bf16" with the
# "BF16_Optimizer [which] implements its own ZeRO Stage 1" and "accumulates grads in fp32. It
# doesn't shard the static fp32 buffer"; "Deepspeed's activation checkpointing" (full);
# "--pp-partition-method 'type:transformer|embedding'": "pp rank 0: [embed | 5 transformer
# blocks] ... pp rank 11: [5 transformer blocks | embed]". Jean Zay nodes: "416 A100 80GB",
# "8 GPUs per node Using NVLink 4 inter-gpu connects, 4 OmniPath links" (100 Gb/s each: 50
# Gb/s per GPU; NVLink taken as the A100 SXM4's 300 GB/s per direction). Main log at the end of
# the first epoch: "iteration 85376/ 115311 | ... elapsed time per iteration (s): 104.70 | ...
# global batch size: 2048 | ... TFLOPs: 149.77". Not modelled: ALiBi and the embedding layer
# norm (element-wise, small). DeepSpeed's pipeline has no interleaving (v = 1).
JEAN_ZAY_A100 = {**A100, "nic_gbps": 50}
ROWS.append(Row("BLOOM-176B 384 GPUs", BLOOM,
                "tr11-176B-ml README: TP4 PP12 DP8 MBS2, GBS 2048, 104.70 s/iteration",
                {"layers": 70, "hidden": 14336, "heads": 112, "seq": 2048, "vocab": 250880},
                JEAN_ZAY_A100, 4, 12, 384, 2048, "bf16", "full", microbatch=2, zero=1,
                embedding_stage=True, training=_DS_BF16, iteration_s=104.70))

# ---- NVIDIA NeMo 24.12 performance summary (H100-80GB SXM, FP8, 400 Gb/s per GPU): tokens/s
# per GPU for GPT3-175B (128 GPUs: GBS 256, MBS 1, TP4 PP8 VP6, 716; 512 GPUs: GBS 2048,
# MBS 2, 825) and LLAMA2-70B (64 GPUs: GBS 128, MBS 1, TP4 PP4 VP20, 1728). Sequence
# parallelism (the recipe's "sequence_parallelism: bool = True"); no recomputation: NeMo
# v2.1.0's recipes and model configs set none, and Megatron-core's TransformerConfig defaults
# to "recompute_granularity: Optional[str] = None" (these rows assumed selective before; the
# attention backward of the fused/flash kernels recomputes its scores, ~0.5 of the attention
# core's forward, which the model does not count). The same three
# numbers are in NeMo's docs/source/performance/performance_summary.md at tag v2.1.0 (there
# labelled "Container: NeMo24.07", DGX-H100, FP8). Data-parallel settings from NeMo v2.1.0's
# recipe nemo/collections/llm/recipes/gpt3_175b.py: "optim=distributed_fused_adam_with_cosine_
# annealing" (``use_distributed_optimizer=True``: zero = 1) and "DistributedDataParallelConfig(
# ... overlap_grad_reduce=True, overlap_param_gather=True ...)" (overlap_dp). Stated there and
# not modelled: "tp_comm_overlap=True" (userbuffers) in its performance mode; its
# grad_reduce_in_fp32 is True in the DDP config and set False by the performance mode, so the
# rows keep 2-byte gradients.
_LLAMA70 = {"layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "ffn_hidden": 28672,
            "gated_mlp": True, "seq": 4096, "vocab": 32000}
# Attention: Megatron-core with Transformer Engine runs the attention core as TE's
# ``DotProductAttention`` (flash-attention or cuDNN fused attention): ``fused_attention`` (no
# s x s scores in memory, the masked half of the causal scores skipped, 2.5 x backward). The
# 2021-2022 Megatron and DeepSpeed rows above materialize the scores (Megatron's fused
# scale-mask-softmax kernel): no ``fused_attention``.
# TP communication: NeMo v2.1.0's performance recipes add "MegatronCommOverlapCallback,
# tp_comm_overlap=True, tp_comm_overlap_cfg=userbuffers_..." (llama3_70b.py
# pretrain_recipe_performance; gpt3_175b.py the same); Megatron-Bridge's llama3_70b recipe
# sets "CommOverlapConfig(tp_comm_overlap=True, ...)" and its H100 performance config the
# userbuffers config ("userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192"). Assumed for the
# other NeMo rows with TP > 1 (LLAMA2-70B, GPT3-20B) too.
_NEMO_DP = {"zero": 1, "overlap_dp": True,
            "training": {"fused_attention": True, "tp_comm_overlap": True}}
ROWS += [
    Row("NeMo GPT3-175B 128 GPUs", NEMO, "GPT3-175B, 128 GPUs, GBS 256, 716 tokens/s/GPU",
        _gpt(96, 12288, 96), H100_FP8, 4, 8, 128, 256, "fp8", "none", interleave=6,
        sequence_parallel=True, tokens_s_gpu=716, **_NEMO_DP),
    Row("NeMo GPT3-175B 512 GPUs", NEMO, "GPT3-175B, 512 GPUs, GBS 2048, 825 tokens/s/GPU",
        _gpt(96, 12288, 96), H100_FP8, 4, 8, 512, 2048, "fp8", "none", interleave=6,
        microbatch=2, sequence_parallel=True, tokens_s_gpu=825, **_NEMO_DP),
    Row("NeMo LLAMA2-70B 64 GPUs", NEMO, "LLAMA2-70B, 64 GPUs, GBS 128, 1728 tokens/s/GPU",
        _LLAMA70, H100_FP8, 4, 4, 64, 128, "fp8", "none", interleave=20,
        sequence_parallel=True, tokens_s_gpu=1728, **_NEMO_DP),
]
# The other rows of the same table (NeMo docs/source/performance/performance_summary.md at tag
# v2.1.0, "Container: NeMo24.07", DGX-H100, FP8; cells: GPUs, GBS, MBS, sequence, TP, PP, CP,
# VP, tokens/s/GPU): GPT3-5B 64 2048 4 2048 1 1 1 1 23406; GPT3-20B 64 256 2 2048 2 1 1 1 5851;
# LLAMA2-7B 8 128 1 4096 1 1 1 1 16934; LLAMA2-13B 16 128 1 4096 1 4 1 10 8715; LLAMA3-8B 8 128 1
# 8192 1 1 2 1 12273; LLAMA3-70B 64 128 1 8192 4 4 2 5 1524. Shapes from NeMo v2.1.0
# (llm/gpt/model/base.py GPTConfig5B: 24 layers, hidden 4096, ffn 16384, 32 heads; GPTConfig20B:
# 44, 6144, 24576, 48; llm/gpt/model/llama.py Llama2Config7B: 32, 4096, 32 heads, ffn 11008;
# Llama2Config13B: 40, 5120, 40, 13824; Llama3Config8B: 32, 4096, 32 heads, 8 query groups,
# ffn 14336, seq 8192; Llama3Config70B: 80, 8192, 64, 8, 28672). Vocabularies: Llama 2 32,000,
# Llama 3 128,256; GPT3 not stated (51,200 as for the 175B rows). Same assumptions as above
# (no recompute, SP where TP > 1, NeMo's DP settings). Nemotron rows left out (squared-
# ReLU MLP and other shapes the cost model does not take).
_L2 = {"gated_mlp": True, "seq": 4096, "vocab": 32000}
_L3 = {"gated_mlp": True, "seq": 8192, "vocab": 128256, "kv_heads": 8}
_NEMO_MORE = [  # name, model, t, p, cp, GPUs, GBS, MBS, VP, tokens/s/GPU
    ("GPT3-5B", {**_gpt(24, 4096, 32), "ffn_hidden": 16384}, 1, 1, 1, 64, 2048, 4, 1, 23406),
    ("GPT3-20B", {**_gpt(44, 6144, 48), "ffn_hidden": 24576}, 2, 1, 1, 64, 256, 2, 1, 5851),
    ("LLAMA2-7B", {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 11008, **_L2},
     1, 1, 1, 8, 128, 1, 1, 16934),
    ("LLAMA2-13B", {"layers": 40, "hidden": 5120, "heads": 40, "ffn_hidden": 13824, **_L2},
     1, 4, 1, 16, 128, 1, 10, 8715),
    ("LLAMA3-8B", {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 14336, **_L3},
     1, 1, 2, 8, 128, 1, 1, 12273),
    ("LLAMA3-70B", {"layers": 80, "hidden": 8192, "heads": 64, "ffn_hidden": 28672, **_L3},
     4, 4, 2, 64, 128, 1, 5, 1524),
]
ROWS += [
    Row(f"NeMo {n} {g} GPUs", NEMO, f"{n}, {g} GPUs, GBS {B}, {tok} tokens/s/GPU (v2.1.0 table)",
        md, H100_FP8, t, p, g, B, "fp8", "none", interleave=v, microbatch=b, cp=c,
        sequence_parallel=t > 1, tokens_s_gpu=tok, **_NEMO_DP)
    for n, md, t, p, c, g, B, b, v, tok in _NEMO_MORE
]

# ---- NVIDIA Megatron-Bridge performance summary, "25.11 NeMo Container", "System: DGX-H100"
# (NVIDIA-NeMo/Megatron-Bridge, docs/performance-summary.md; cells: model, GPUs, precision,
# GBS, MBS, sequence, FSDP, TP, PP, CP, VP, EP, GA, tokens/s/GPU, model TFLOP/s/GPU):
# "LLAMA3_8B | 8 | FP8-CS | 128 | 1 | 8192 | 1 | 1 | 1 | 1 | n/a | 1 | 16 | 14451 | 744" and
# "LLAMA3_70B | 64 | FP8-CS | 128 | 1 | 8192 | 0 | 4 | 8 | 1 | 5 | 1 | 64 | 1602 | 719".
# Training split for ``eta_fp8`` (the one constant only FP8 rows see; see validate.py): a later
# release and recipe (FP8 current scaling) than the NeMo 24.12 rows, which stay held out.
# FSDP 1 is taken as ZeRO-3 over the 8 data-parallel ranks; FSDP 0 as NeMo's distributed
# optimizer. The table's other DGX-H100 rows: LLAMA3.1_405B (126 layers over PP 8 x VP 8
# chunks, which ``pp`` cannot express) and MoE rows (GPT OSS, Qwen3) left out.
ROWS += [
    Row("Bridge LLAMA3-8B 8 GPUs", BRIDGE, "LLAMA3_8B, 8 GPUs, FP8-CS, FSDP, 14451 tokens/s/GPU",
        {"layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 14336, **_L3}, H100_FP8,
        1, 1, 8, 128, "fp8", "none", zero=3, overlap_dp=True,
        training={"fused_attention": True}, tokens_s_gpu=14451, calibrate=True),
    Row("Bridge LLAMA3-70B 64 GPUs", BRIDGE, "LLAMA3_70B, 64 GPUs, FP8-CS, 1602 tokens/s/GPU",
        {"layers": 80, "hidden": 8192, "heads": 64, "ffn_hidden": 28672, **_L3}, H100_FP8,
        4, 8, 64, 128, "fp8", "none", interleave=5, sequence_parallel=True,
        tokens_s_gpu=1602, calibrate=True, **_NEMO_DP),
]
