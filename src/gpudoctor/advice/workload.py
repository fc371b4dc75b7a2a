"""How much GPU memory a training or serving workload needs, with the arithmetic shown.

The estimate is deliberately simple and says every assumption it makes, so a person can check it
and redo it for their own model:

- weights: parameters x bytes per parameter at the chosen precision;
- full fine-tuning with Adam in mixed precision: 16 bytes per parameter (2 bf16/fp16 weights,
  2 gradients, 4 fp32 master weights, 4 + 4 Adam moments; ZeRO paper, Rajbhandari et al. 2020);
  pure fp32 training also comes to 16 (4 weights, 4 gradients, 8 Adam);
- LoRA: frozen 16-bit base weights (QLoRA: NF4 with double quantisation, 4.127 bits per
  parameter, Dettmers et al. 2023) plus rank-r adapters on every linear layer at 16 bytes per
  adapter parameter;
- training activations with full activation checkpointing and FlashAttention: the checkpointed
  layer inputs (layers x sequence x batch x hidden x bytes), one layer's working set while it is
  recomputed (34 x sequence x batch x hidden bytes, Korthikanti et al. 2022 without the attention
  score term that FlashAttention never materialises) and fp32 logits for the loss;
- serving: the KV cache, 2 (K and V) x layers x KV heads x head size x bytes x tokens x sequences;
- per GPU: 10 % headroom for allocator fragmentation plus 1 GiB for the CUDA context and library
  workspaces.

Across N GPUs the weights, gradients, optimizer state and KV cache are divided by N (tensor
parallel serving, FSDP / ZeRO-3 training); activations and logits are per GPU and are not.
The model's layer shape is taken from the public config of the nearest well-known model of that
size (named in the output): the parameter count alone does not say it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from ..lazy_re import LazyPattern

GIB = float(1 << 30)

PRECISION_BYTES: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5,
}
QLORA_BYTES = 4.127 / 8  # NF4 + double quantisation (Dettmers et al. 2023, QLoRA, section 3)
ADAM_MIXED_BYTES = 16.0
ADAPTER_BYTES = 16.0
RECOMPUTE_BYTES_PER_ELEMENT = 34.0  # Korthikanti et al. 2022, per layer, 16-bit, without the 5as/h term
HEADROOM = 0.10
CONTEXT_GIB = 1.0

MODES = {
    "finetune": "finetune",
    "full": "finetune",
    "train": "finetune",
    "pretrain": "finetune",
    "lora": "lora",
    "qlora": "qlora",
    "serve": "serve",
    "infer": "serve",
    "inference": "serve",
}
MODE_WORDS = {
    "finetune": "full fine-tune (Adam, mixed precision)",
    "lora": "LoRA fine-tune",
    "qlora": "QLoRA fine-tune (4-bit base)",
    "serve": "serving (inference)",
}
GPU_COUNTS = (1, 2, 4, 8)


class WorkloadError(ValueError):
    """A workload description that cannot be understood."""


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's layer shape, from a public model config."""

    name: str
    params_b: float
    layers: int
    hidden: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int

    def describe(self) -> str:
        return (
            f"like {self.name}: {self.layers} layers, hidden {self.hidden}, "
            f"{self.kv_heads} KV heads x {self.head_dim}, FFN {self.ffn}, vocab {self.vocab}"
        )


# Shapes from the models' config.json on Hugging Face (num_hidden_layers, hidden_size,
# num_key_value_heads, head size, intermediate_size, vocab_size).
SHAPES: tuple[Shape, ...] = (
    Shape("Llama 3.2 1B", 1.24, 16, 2048, 8, 64, 8192, 128256),
    Shape("Llama 3.2 3B", 3.21, 28, 3072, 8, 128, 8192, 128256),
    Shape("Llama 3.1 8B", 8.03, 32, 4096, 8, 128, 14336, 128256),
    Shape("Llama 2 13B", 13.0, 40, 5120, 40, 128, 13824, 32000),
    Shape("Qwen2.5 32B", 32.8, 64, 5120, 8, 128, 27648, 152064),
    Shape("Llama 3.1 70B", 70.6, 80, 8192, 8, 128, 28672, 128256),
    Shape("Llama 3.1 405B", 405.9, 126, 16384, 8, 128, 53248, 128256),
)


def nearest_shape(params: float) -> Shape:
    billions = params / 1e9
    return min(SHAPES, key=lambda s: abs(math.log(s.params_b) - math.log(max(billions, 1e-3))))


# Matched whole against stripped text: one run of blanks at most, so the match is linear.
_SIZE = LazyPattern(r"(\d+(?:\.\d+)?)\s*([kmbt]?)", re.I)


def parse_params(text: str) -> float:
    """ "70B", "7b", "1.5B", "500M", "7e9" → a parameter count."""
    raw = str(text).strip()
    m = _SIZE.fullmatch(raw)
    if m:
        value = float(m.group(1))
        scale = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]
        if scale == 1.0 and value < 1e4:
            scale = 1e9  # a bare "70" means 70B
        count = value * scale
    else:
        try:
            count = float(raw)
        except ValueError:
            raise WorkloadError(f"cannot read a parameter count from {text!r} (write e.g. 7B, 70B, 500M)") from None
    if not (1e6 <= count <= 1e14):
        raise WorkloadError(f"parameter count {text!r} is outside 1M..100T")
    return count


@dataclass(frozen=True)
class Workload:
    mode: str
    params: float
    precision: str
    context: int
    batch: int
    lora_rank: int = 16
    kv_precision: str = "bf16"

    def describe(self) -> str:
        size = f"{self.params / 1e9:g}B" if self.params >= 1e9 else f"{self.params / 1e6:g}M"
        what = MODE_WORDS[self.mode]
        if self.mode == "serve":
            return (
                f"{what} of a {size}-parameter model, {self.precision} weights, "
                f"{self.batch} sequence(s) x {self.context} tokens of context"
            )
        extra = f", rank {self.lora_rank}" if self.mode in ("lora", "qlora") else ""
        return (
            f"{what} of a {size}-parameter model in {self.precision}{extra}, "
            f"sequence {self.context} x micro-batch {self.batch}"
        )


def make_workload(
    mode: str,
    params: str | float,
    precision: str | None = None,
    context: int | None = None,
    batch: int | None = None,
    lora_rank: int = 16,
    kv_precision: str | None = None,
) -> Workload:
    canonical = MODES.get(str(mode).strip().lower())
    if canonical is None:
        raise WorkloadError(f"unknown mode {mode!r}; use one of finetune, lora, qlora, serve")
    count = params if isinstance(params, float) else parse_params(str(params))
    prec = (precision or ("int4" if canonical == "qlora" else "bf16")).strip().lower()
    if prec not in PRECISION_BYTES:
        raise WorkloadError(f"unknown precision {precision!r}; use one of {', '.join(PRECISION_BYTES)}")
    if canonical != "serve" and prec in ("int8", "int4") and canonical != "qlora":
        raise WorkloadError(f"{canonical} in {prec} is not a training precision; use bf16, fp16, fp32 or fp8")
    kv = (kv_precision or "bf16").strip().lower()
    if kv not in PRECISION_BYTES:
        raise WorkloadError(f"unknown KV cache precision {kv_precision!r}")
    ctx = context if context is not None else (8192 if canonical == "serve" else 4096)
    bat = batch if batch is not None else 1
    if ctx < 1 or bat < 1 or lora_rank < 1:
        raise WorkloadError("context, batch and LoRA rank must be positive")
    return Workload(canonical, count, prec, int(ctx), int(bat), int(lora_rank), kv)


_NAMED = LazyPattern(r"^(?P<mode>[a-z]+)-(?P<size>\d+(?:\.\d+)?[kmbt]?)(?:-(?P<prec>[a-z0-9]+))?$", re.I)


def parse_workload(name: str, context: int | None = None, batch: int | None = None) -> Workload:
    """ "finetune-7b-bf16", "serve-70b-fp8", "lora-8b", "qlora-70b" → a Workload."""
    m = _NAMED.match(name.strip().lower())
    if not m:
        raise WorkloadError(
            f"cannot read workload {name!r}; write MODE-SIZE[-PRECISION], e.g. finetune-7b-bf16, "
            "lora-8b-bf16, qlora-70b, serve-70b-fp8 (modes: finetune, lora, qlora, serve)"
        )
    return make_workload(m.group("mode"), m.group("size"), m.group("prec"), context, batch)


@dataclass
class Line:
    """One term of the estimate: what it is, how it was computed, and its size."""

    label: str
    formula: str
    gib: float
    sharded: bool  # divided among GPUs (True) or needed on every GPU (False)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "formula": self.formula, "gib": round(self.gib, 2), "sharded": self.sharded}


@dataclass
class Estimate:
    workload: Workload
    shape: Shape
    lines: list[Line] = field(default_factory=list)
    headroom: float = HEADROOM
    context_gib: float = CONTEXT_GIB

    @property
    def sharded_gib(self) -> float:
        return sum(line.gib for line in self.lines if line.sharded)

    @property
    def per_gpu_fixed_gib(self) -> float:
        return sum(line.gib for line in self.lines if not line.sharded)

    def per_gpu_gib(self, gpus: int = 1) -> float:
        return (self.sharded_gib / gpus + self.per_gpu_fixed_gib) * (1 + self.headroom) + self.context_gib

    def gpus_needed(self, capacity_gib: float, counts: tuple[int, ...] = GPU_COUNTS) -> int | None:
        """Fewest GPUs (of counts) whose memory holds the workload, or None when even the most do not."""
        for n in counts:
            if self.per_gpu_gib(n) <= capacity_gib:
                return n
        return None

    def arithmetic(self) -> list[str]:
        """The estimate as lines a person can check."""
        width = max((len(line.label) for line in self.lines), default=10) + 2
        out = [f"{line.label:<{width}}{line.formula} = {line.gib:,.1f} GiB" for line in self.lines]
        shard = ", ".join(line.label for line in self.lines if line.sharded) or "nothing"
        out.append(
            f"{'per GPU':<{width}}(sharded {self.sharded_gib:,.1f} / N + per-GPU {self.per_gpu_fixed_gib:,.1f}) "
            f"x {1 + self.headroom:.2f} headroom + {self.context_gib:g} GiB CUDA context"
        )
        out.append(
            f"{'':<{width}}= {self.per_gpu_gib(1):,.1f} GiB on 1 GPU, {self.per_gpu_gib(2):,.1f} on 2, "
            f"{self.per_gpu_gib(4):,.1f} on 4, {self.per_gpu_gib(8):,.1f} on 8 (sharded across N: {shard})"
        )
        return out

    def to_json(self) -> dict[str, Any]:
        w = self.workload
        return {
            "mode": w.mode,
            "params": w.params,
            "precision": w.precision,
            "kv_precision": w.kv_precision if w.mode == "serve" else None,
            "context": w.context,
            "batch": w.batch,
            "lora_rank": w.lora_rank if w.mode in ("lora", "qlora") else None,
            "description": w.describe(),
            "assumed_shape": self.shape.describe(),
            "lines": [line.to_json() for line in self.lines],
            "headroom": self.headroom,
            "context_gib": self.context_gib,
            "per_gpu_gib": {str(n): round(self.per_gpu_gib(n), 2) for n in GPU_COUNTS},
        }


def _gib(nbytes: float) -> float:
    return nbytes / GIB


def _n(value: float) -> str:
    """A count as people write it in a formula: 7e9 → 7.0e9, 4096 → 4096."""
    if value >= 1e6:
        return f"{value:.2e}".replace("e+0", "e").replace("e+", "e")
    return f"{int(value)}" if float(value).is_integer() else f"{value:g}"


def lora_adapter_params(shape: Shape, rank: int) -> int:
    """Parameters of rank-r adapters on q, k, v, o, gate, up and down of every layer."""
    d, kv, f = shape.hidden, shape.kv_heads * shape.head_dim, shape.ffn
    q = d  # query projection width equals the hidden size in these models
    pairs = [(d, q), (d, kv), (d, kv), (q, d), (d, f), (d, f), (f, d)]
    return shape.layers * rank * sum(i + o for i, o in pairs)


def estimate(workload: Workload) -> Estimate:
    w = workload
    shape = nearest_shape(w.params)
    est = Estimate(w, shape)
    p = w.params
    s, b, h, layers = w.context, w.batch, shape.hidden, shape.layers
    act_bytes = 4.0 if w.precision in ("fp32", "tf32") else 2.0

    if w.mode == "serve":
        wb = PRECISION_BYTES[w.precision]
        est.lines.append(Line("weights", f"{_n(p)} params x {wb:g} B ({w.precision})", _gib(p * wb), True))
        kvb = PRECISION_BYTES[w.kv_precision]
        kv = 2 * layers * shape.kv_heads * shape.head_dim * kvb * s * b
        est.lines.append(
            Line(
                "KV cache",
                f"2 x {layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} x {kvb:g} B ({w.kv_precision}) "
                f"x {s} tokens x {b} sequence(s)",
                _gib(kv),
                True,
            )
        )
        return est

    if w.mode == "finetune":
        est.lines.append(
            Line(
                "weights+grads+Adam",
                f"{_n(p)} params x 16 B (2 weights + 2 grads + 4 fp32 master + 4 + 4 Adam moments)",
                _gib(p * ADAM_MIXED_BYTES),
                True,
            )
        )
    else:
        base_bytes = QLORA_BYTES if w.mode == "qlora" else 2.0
        base_word = "NF4 4.127 bits" if w.mode == "qlora" else "frozen bf16"
        est.lines.append(
            Line("base weights", f"{_n(p)} params x {base_bytes:.3g} B ({base_word})", _gib(p * base_bytes), True)
        )
        adapters = lora_adapter_params(shape, w.lora_rank)
        est.lines.append(
            Line(
                "adapters+grads+Adam",
                f"{_n(adapters)} adapter params (rank {w.lora_rank} on q,k,v,o,gate,up,down x {layers} layers) x 16 B",
                _gib(adapters * ADAPTER_BYTES),
                True,
            )
        )
    est.lines.append(
        Line(
            "checkpointed acts",
            f"{layers} layers x {s} x {b} x {h} x {act_bytes:g} B",
            _gib(layers * s * b * h * act_bytes),
            False,
        )
    )
    est.lines.append(
        Line(
            "recomputed layer",
            f"{RECOMPUTE_BYTES_PER_ELEMENT:g} x {s} x {b} x {h} B",
            _gib(RECOMPUTE_BYTES_PER_ELEMENT * s * b * h * act_bytes / 2.0),
            False,
        )
    )
    est.lines.append(
        Line("logits (fp32)", f"{s} x {b} x {shape.vocab} vocab x 4 B", _gib(s * b * shape.vocab * 4.0), False)
    )
    return est
