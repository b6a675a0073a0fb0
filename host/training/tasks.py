"""Training tasks that run offline with deterministic data, splits and batches.

``digits``: the 8×8 handwritten digits bundled with scikit-learn (1797 images; Alpaydin &
Kaynak, UCI "Optical Recognition of Handwritten Digits"), a small CNN, a fixed stratified
75/25 split, held-out accuracy.

``charlm``: a character-level causal transformer language model on the Python standard
library's own source files (every Python installation has them), a fixed split of the text
(first 90 % train, last 10 % held out), held-out loss reported as bits per character
(``loss / ln 2``).

``digits-wide`` and ``charlm-ngram`` are the communication-bound variants (5.4 M and 5.3 M
parameters): the same data with a wide MLP, and hashed character n-gram embeddings.

Every worker draws its batch for step ``s`` as a pure function of (seed, step, rank), so runs
are reproducible and workers see disjoint data within a step.
"""

from __future__ import annotations

import itertools
import math
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F  # noqa: N812 - the usual alias

from host.training.names import TASK_NAMES


@dataclass
class EvalResult:
    """Held-out evaluation: the task's metric and the held-out loss (nats per target)."""

    metric: float
    loss: float


@dataclass
class Task:
    """A training task: model, batches, evaluation and sensible defaults.

    Subclasses set the class attributes and implement the four methods.
    """

    name: str = ""
    metric_name: str = ""
    higher_is_better: bool = True
    default_steps: int = 200
    default_eval_every: int = 10
    default_target: float = 0.0
    batch_per_worker: int = 32
    seed: int = 0
    extra: dict = field(default_factory=dict)

    def build_model(self) -> nn.Module:
        raise NotImplementedError

    def build_optimizer(self, params) -> torch.optim.Optimizer:
        raise NotImplementedError

    def build_scheduler(self, opt: torch.optim.Optimizer, steps: int):
        """Cosine decay of the learning rate to 0 over ``steps`` (Loshchilov & Hutter 2017)."""
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)

    def batch(self, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> EvalResult:
        raise NotImplementedError

    def reached(self, metric: float, target: float) -> bool:
        """Whether ``metric`` meets ``target`` in this task's direction."""
        return metric >= target if self.higher_is_better else metric <= target


# ---------------------------------------------------------------------------- digits
class DigitsCNN(nn.Module):
    """Two 3×3 convolutions, one pooling, two dense layers (about 38 k parameters)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


class DigitsTask(Task):
    """scikit-learn digits, small CNN, SGD with momentum; metric: held-out accuracy."""

    def __init__(self, seed: int = 0, lr: float | None = None) -> None:
        super().__init__(name="digits", metric_name="accuracy", higher_is_better=True,
                         default_steps=150, default_eval_every=5, default_target=0.95,
                         batch_per_worker=32, seed=seed)
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        d = load_digits()
        X = (d.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
        y = d.target.astype(np.int64)
        # The split is fixed (random_state=0) whatever the training seed.
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
        self.Xtr, self.ytr = torch.from_numpy(Xtr), torch.from_numpy(ytr)
        self.Xte, self.yte = torch.from_numpy(Xte), torch.from_numpy(yte)
        self.lr = lr if lr is not None else 0.1

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        return DigitsCNN()

    def build_optimizer(self, params) -> torch.optim.Optimizer:
        return torch.optim.SGD(params, lr=self.lr, momentum=0.9)

    def batch(self, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        B = self.batch_per_worker
        per_epoch = len(self.ytr) // (B * world)
        epoch, k = divmod(step, per_epoch)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        perm = torch.randperm(len(self.ytr), generator=g)
        start = (k * world + rank) * B
        idx = perm[start : start + B]
        return self.Xtr[idx], self.ytr[idx]

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(model(x), y)

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> EvalResult:
        logits = model(self.Xte)
        acc = float((logits.argmax(1) == self.yte).float().mean())
        return EvalResult(acc, float(F.cross_entropy(logits, self.yte)))


# ---------------------------------------------------------------------------- digits-wide
class WideMLP(nn.Module):
    """A wide multilayer perceptron, 64 → 2048 → 2048 → 512 → 10 (5.38 M parameters)."""

    def __init__(self, widths: tuple[int, ...] = (64, 2048, 2048, 512, 10)) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in itertools.pairwise(widths))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.flatten(1)
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


class DigitsWideTask(DigitsTask):
    """The digits data with a wide MLP: a communication-bound task.

    5.38 M parameters, 21.5 MB of fp32 gradient per step, but only about 0.35 GFLOP of compute
    per worker per step (32 images): at 100 Mbit/s an fp32 all-reduce takes seconds per step,
    the computation tens of milliseconds. Same split, batches and metric as ``digits``; Adam,
    lr 2e-3, cosine decay over 50 steps: fp32 reaches 0.95 held-out accuracy after about 20
    steps (seed 0; 0.964 after 50).
    """

    def __init__(self, seed: int = 0, lr: float | None = None) -> None:
        super().__init__(seed=seed, lr=lr if lr is not None else 2e-3)
        self.name = "digits-wide"
        self.default_steps = 50
        self.default_eval_every = 1   # about 5 GFLOP per evaluation, outside the measured steps
        self.default_target = 0.95

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        return WideMLP()

    def build_optimizer(self, params) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=self.lr)


# ---------------------------------------------------------------------------- charlm
VOCAB = 128  # 7-bit ASCII; other characters map to 0


def stdlib_corpus(n_chars: int) -> str:
    """The first ``n_chars`` characters of the standard library's top-level ``*.py`` files.

    Files are read in sorted name order from ``sysconfig.get_paths()["stdlib"]`` and joined
    with newlines, so every machine with the same Python version gets the same text.
    """
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    total = 0
    for f in sorted(root.glob("*.py")):
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        parts.append(text)
        total += len(text) + 1
        if total >= n_chars:
            break
    corpus = "\n".join(parts)[:n_chars]
    if len(corpus) < n_chars // 2:
        raise RuntimeError(f"standard library at {root} holds only {len(corpus)} characters of *.py")
    return corpus


class Block(nn.Module):
    """Pre-norm transformer block with causal self-attention (Vaswani et al. 2017)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + self.ff2(F.gelu(self.ff1(self.ln2(x))))


class CharTransformer(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a linear head (about 110 k parameters)."""

    def __init__(self, vocab: int = VOCAB, d: int = 64, layers: int = 2, heads: int = 4,
                 context: int = 64) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        return self.head(self.ln(x))


class CharLMTask(Task):
    """Character-level transformer LM on stdlib source; metric: held-out bits per character."""

    context = 64
    n_chars = 400_000
    eval_windows = 128

    def __init__(self, seed: int = 0, lr: float | None = None) -> None:
        super().__init__(name="charlm", metric_name="bits_per_char", higher_is_better=False,
                         default_steps=300, default_eval_every=5, default_target=3.15,
                         batch_per_worker=16, seed=seed)
        text = stdlib_corpus(self.n_chars)
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        codes = np.where(codes < VOCAB, codes, 0).astype(np.int64)
        split = int(len(codes) * 0.9)
        self.train_ids = torch.from_numpy(codes[:split].copy())
        self.test_ids = torch.from_numpy(codes[split:].copy())
        self.lr = lr if lr is not None else 5e-3
        n = len(self.test_ids) - self.context - 1
        starts = torch.linspace(0, n, self.eval_windows).long()
        self._eval = self._windows(self.test_ids, starts)

    def _windows(self, ids: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        off = torch.arange(self.context + 1)
        w = ids[starts[:, None] + off[None, :]]
        return w[:, :-1], w[:, 1:]

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        return CharTransformer(context=self.context)

    def build_optimizer(self, params) -> torch.optim.Optimizer:
        return torch.optim.Adam(params, lr=self.lr)

    def batch(self, step: int, rank: int, world: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(((self.seed * 1_000_003 + step) * 1009 + rank) % (2**62))
        hi = len(self.train_ids) - self.context - 1
        starts = torch.randint(0, hi, (self.batch_per_worker,), generator=g)
        return self._windows(self.train_ids, starts)

    def loss(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))

    @torch.no_grad()
    def evaluate(self, model: nn.Module) -> EvalResult:
        x, y = self._eval
        logits = model(x)
        loss = float(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)))
        return EvalResult(loss / math.log(2), loss)


# ---------------------------------------------------------------------------- charlm-ngram
#: Multipliers of the n-gram hash (odd 31-bit constants; any fixed choice works).
_NGRAM_MULT = (1_000_003, 998_244_353, 2_147_483_629, 1_234_567_891)


def ngram_buckets(ids: torch.Tensor, orders: tuple[int, ...], buckets: int) -> torch.Tensor:
    """Hashed n-gram ids ending at every position of ``ids`` (``(B, T + max(orders) - 1)``).

    Returns ``(B, T, len(orders))`` bucket indices in ``0..buckets-1``: for order ``n`` the
    characters ``t-n+1..t`` mixed by a polynomial hash, each order in its own slice of the
    table (``buckets // len(orders)`` rows), so that orders never collide with each other.
    """
    k = max(orders) - 1
    T = ids.shape[1] - k
    per = buckets // len(orders)
    out = []
    for j, n in enumerate(orders):
        h = torch.zeros(ids.shape[0], T, dtype=torch.int64)
        for i in range(n):
            h = (h * _NGRAM_MULT[i % len(_NGRAM_MULT)] + ids[:, k - i : k - i + T]) % (1 << 31)
        out.append(h % per + j * per)
    return torch.stack(out, dim=2)


class NGramLM(nn.Module):
    """Hashed character n-gram embeddings summed, then a small MLP head (fastText-like;
    Joulin et al. 2017): 65 536 × 80 embedding rows (5.24 M parameters) and 31 k more.

    Its gradient is embedding-heavy and not low-rank: a step touches a few thousand rows,
    each with its own direction in the 80 dimensions.
    """

    def __init__(self, buckets: int = 1 << 16, d: int = 80, hidden: int = 192,
                 vocab: int = VOCAB, orders: tuple[int, ...] = (1, 2, 3, 4)) -> None:
        super().__init__()
        self.orders = orders
        self.buckets = buckets
        self.emb = nn.Embedding(buckets, d)
        nn.init.normal_(self.emb.weight, std=0.02)
        self.ln = nn.LayerNorm(d)
        self.fc = nn.Linear(d, hidden)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ngram_buckets(ids, self.orders, self.buckets)).sum(dim=2)
        return self.head(F.gelu(self.fc(self.ln(x))))


class CharNGramTask(CharLMTask):
    """Next-character prediction from hashed n-grams of the stdlib source: a communication-
    bound task whose gradient a rank-4 approximation does not capture.

    5.27 M parameters (21.1 MB of fp32 gradient per step) but about 0.1 GFLOP of compute
    per worker per step; same corpus, split and held-out windows as ``charlm``; metric:
    held-out bits per character. Adam, lr 1e-2, cosine decay over 60 steps. 4 workers, seed 0:
    fp32 reaches the target, 2.4 bits/char, after 30 steps (2.246 after 60); PowerSGD rank 4
    ends at 2.454 and does not reach it.
    """

    context = 64
    orders = (1, 2, 3, 4)

    def __init__(self, seed: int = 0, lr: float | None = None) -> None:
        super().__init__(seed=seed, lr=lr if lr is not None else 1e-2)
        self.name = "charlm-ngram"
        self.default_steps = 60
        self.default_eval_every = 1
        self.default_target = 2.4
        k = max(self.orders) - 1
        # every held-out window carries the k characters before it (the n-grams' history)
        n = len(self.test_ids) - self.context - 1 - k
        starts = torch.linspace(0, n, self.eval_windows).long() + k
        self._eval = self._windows(self.test_ids, starts)

    def _windows(self, ids: torch.Tensor, starts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k = max(self.orders) - 1
        off = torch.arange(-k, self.context + 1)
        w = ids[(starts[:, None] + off[None, :]).clamp(min=0)]
        return w[:, :-1], w[:, k + 1 :]

    def build_model(self) -> nn.Module:
        torch.manual_seed(self.seed)
        return NGramLM(orders=self.orders)


#: Task name (:data:`host.training.names.TASK_NAMES`, in its order) -> class.
TASKS: dict[str, type[Task]] = dict(zip(
    TASK_NAMES, (DigitsTask, DigitsWideTask, CharLMTask, CharNGramTask), strict=True))


def make_task(name: str, seed: int = 0, lr: float | None = None) -> Task:
    """Build task ``name`` (``digits``, ``digits-wide`` or ``charlm``)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}")
    return TASKS[name](seed=seed, lr=lr)
