"""Plain PyTorch reference for the Baichuan decoder family, used to make Kiln's golden logits.

Hugging Face transformers has no built-in Baichuan model (the published checkpoints ship their own
modeling code), so the golden data for `model_type: "baichuan"` comes from this file instead. It is
written from the published architecture description, independently of that modeling code:

* Baichuan-7B: a Llama-style decoder. RMSNorm (eps from the config), rotary position embedding on
  the full head (base 10000, "rotate half" layout), q/k/v fused into one matrix
  `model.layers.N.self_attn.W_pack.weight` of shape [3 * hidden, hidden] whose rows are q, then k,
  then v; SiLU-gated MLP (gate/up/down); untied `lm_head.weight`.
* Baichuan2-13B: the same layer, but ALiBi instead of RoPE (no position embedding at all; the
  attention score of query i and key j gets `slope[h] * (j - i)` added), and a normalised output
  head ("NormHead"): at inference every row of `lm_head.weight` is divided by its L2 norm.

How the two variants are told apart (the rule a loader can use on a real config.json):
* ALiBi iff the config has no `max_position_embeddings` (Baichuan-13B and Baichuan2-13B carry only
  `model_max_length`; Baichuan-7B and Baichuan2-7B carry `max_position_embeddings`).
* NormHead iff the config has `z_loss_weight` (only Baichuan2 configs carry it; the real Baichuan2
  checkpoints can also be recognised by `vocab_size == 125696`).

The core, `DecoderReference`, is a small generic pre-norm decoder (RMSNorm, RoPE or ALiBi, grouped
query attention, optional biases and sliding window, SiLU-gated MLP). `make_goldens.py` also builds
it from Llama/Mistral/Qwen2 weights to cross-check this code against transformers.

All maths runs in the dtype given to the loader (float32 for the goldens; float64 to estimate the
float32 rounding noise). Weights stored as f16/bf16 are upcast exactly before use.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

# inv_freq_fn(total_len) -> inv_freq [head_dim / 2]; total_len is the number of tokens the
# forward call covers (cache included), which only dynamic-NTK scaling looks at.
InvFreqFn = Callable[[int], torch.Tensor]


# ---------------------------------------------------------------------------------------------
# Position encodings
# ---------------------------------------------------------------------------------------------


def rope_inv_freq_default(head_dim: int, theta: float) -> torch.Tensor:
    """inv_freq[i] = theta^(-2i / head_dim), i in [0, head_dim / 2), computed in float64."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim
    return 1.0 / (theta**exponents)


def rope_inv_freq_linear(head_dim: int, theta: float, factor: float) -> torch.Tensor:
    """Position interpolation: every position is divided by `factor`."""
    return rope_inv_freq_default(head_dim, theta) / factor


def rope_inv_freq_dynamic(head_dim: int, theta: float, factor: float, max_positions: int,
                          total_len: int) -> torch.Tensor:
    """Dynamic NTK scaling: once the sequence is longer than max_positions, the base grows to
    theta * (factor * L / max_positions - (factor - 1))^(d / (d - 2)), L = current length."""
    if total_len <= max_positions:
        return rope_inv_freq_default(head_dim, theta)
    scale = (factor * total_len / max_positions) - (factor - 1.0)
    base = theta * scale ** (head_dim / (head_dim - 2))
    return rope_inv_freq_default(head_dim, base)


def rope_inv_freq_llama3(head_dim: int, theta: float, factor: float, low_freq_factor: float,
                         high_freq_factor: float, original_max_positions: int) -> torch.Tensor:
    """Llama 3.1 scaling: wavelengths longer than original/low_freq_factor are divided by
    `factor`, shorter than original/high_freq_factor are kept, and the band in between is a linear
    blend in original/wavelength."""
    inv = rope_inv_freq_default(head_dim, theta)
    wavelen = 2.0 * math.pi / inv
    low_freq_wavelen = original_max_positions / low_freq_factor
    high_freq_wavelen = original_max_positions / high_freq_factor
    out = inv.clone()
    for i in range(inv.numel()):
        w = float(wavelen[i])
        if w > low_freq_wavelen:
            out[i] = inv[i] / factor
        elif w >= high_freq_wavelen:
            smooth = (original_max_positions / w - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out[i] = (1.0 - smooth) * inv[i] / factor + smooth * inv[i]
    return out


def rope_cos_sin(positions: torch.Tensor, inv_freq: torch.Tensor,
                 dtype: torch.dtype) -> Tuple[torch.Tensor, torch.Tensor]:
    """positions: [T] ints -> cos, sin: [T, head_dim], the half-size table repeated twice."""
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # [T, head_dim / 2]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [heads, T, head_dim]; "rotate half" layout: pairs are (i, i + head_dim / 2)."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[None] + rotated * sin[None]


def alibi_slopes(num_heads: int) -> List[float]:
    """ALiBi head slopes. For a power of two n: slope[h] = 2^(-8 (h + 1) / n). Otherwise the
    slopes of the largest power of two p < n, followed by every other slope of 2p (the odd
    exponents) until n slopes are there."""

    def power_of_two(n: int) -> List[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    if num_heads & (num_heads - 1) == 0:
        return power_of_two(num_heads)
    p = 1 << (num_heads.bit_length() - 1)
    return power_of_two(p) + alibi_slopes(2 * p)[0::2][: num_heads - p]


# ---------------------------------------------------------------------------------------------
# The decoder
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class LayerWeights:
    """One decoder layer; Linear weights are [out, in] like torch.nn.Linear."""

    input_norm: torch.Tensor  # [hidden]
    post_norm: torch.Tensor  # [hidden]
    q: torch.Tensor  # [heads * head_dim, hidden]
    k: torch.Tensor  # [kv_heads * head_dim, hidden]
    v: torch.Tensor  # [kv_heads * head_dim, hidden]
    o: torch.Tensor  # [hidden, heads * head_dim]
    gate: torch.Tensor  # [intermediate, hidden]
    up: torch.Tensor  # [intermediate, hidden]
    down: torch.Tensor  # [hidden, intermediate]
    q_bias: Optional[torch.Tensor] = None
    k_bias: Optional[torch.Tensor] = None
    v_bias: Optional[torch.Tensor] = None
    o_bias: Optional[torch.Tensor] = None
    gate_bias: Optional[torch.Tensor] = None
    up_bias: Optional[torch.Tensor] = None
    down_bias: Optional[torch.Tensor] = None


@dataclasses.dataclass
class DecoderSpec:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    # "rope" or "alibi".
    position: str = "rope"
    inv_freq_fn: Optional[InvFreqFn] = None
    # Sliding-window attention: query i sees key j iff 0 <= i - j < window ("lt") or
    # 0 <= i - j <= window ("le"). None: full causal attention.
    sliding_window: Optional[int] = None
    window_rule: str = "lt"
    # ALiBi bias form. "relative": slope * (j - i). "key_position": slope * j, which is what a
    # cached [heads, max_len, max_len] mask holds; the same after softmax up to rounding.
    alibi_form: str = "relative"
    # Divide each lm_head row by its L2 norm (Baichuan2 NormHead).
    norm_head: bool = False


class DecoderReference:
    """Pre-norm decoder-only transformer, one sequence at a time (no batch dimension)."""

    def __init__(self, spec: DecoderSpec, embed: torch.Tensor, layers: Sequence[LayerWeights],
                 final_norm: torch.Tensor, lm_head: torch.Tensor):
        self.spec = spec
        self.embed = embed  # [vocab, hidden]
        self.layers = list(layers)
        self.final_norm = final_norm  # [hidden]
        if spec.norm_head:
            lm_head = lm_head / lm_head.norm(dim=-1, keepdim=True).clamp_min(1e-12)
        self.lm_head = lm_head  # [vocab, hidden]
        self.dtype = embed.dtype
        if spec.position == "alibi":
            self.slopes = torch.tensor(alibi_slopes(spec.num_heads), dtype=torch.float64)
        elif spec.position != "rope":
            raise ValueError(f"unknown position encoding {spec.position!r}")

    def _rms_norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        # x: [T, hidden]
        variance = x.pow(2).mean(dim=-1, keepdim=True)
        return x * torch.rsqrt(variance + self.spec.rms_norm_eps) * weight

    def _score_bias(self, past: int, t: int) -> torch.Tensor:
        """Additive bias [heads or 1, t, past + t]: -inf where masked, ALiBi where used."""
        spec = self.spec
        q_pos = torch.arange(past, past + t)[:, None]  # [t, 1]
        k_pos = torch.arange(past + t)[None, :]  # [1, past + t]
        distance = q_pos - k_pos  # i - j
        allowed = distance >= 0
        if spec.sliding_window is not None:
            if spec.window_rule == "lt":
                allowed &= distance < spec.sliding_window
            elif spec.window_rule == "le":
                allowed &= distance <= spec.sliding_window
            else:
                raise ValueError(f"unknown window rule {spec.window_rule!r}")
        mask = torch.zeros(allowed.shape, dtype=torch.float64).masked_fill(~allowed, float("-inf"))
        if spec.position != "alibi":
            return mask[None].to(self.dtype)
        if spec.alibi_form == "relative":
            rel = (-distance).to(torch.float64)  # j - i <= 0 where allowed
        elif spec.alibi_form == "key_position":
            rel = k_pos.expand(t, -1).to(torch.float64)
        else:
            raise ValueError(f"unknown alibi form {spec.alibi_form!r}")
        bias = self.slopes[:, None, None] * rel[None]  # [heads, t, past + t]
        return (bias + mask[None]).to(self.dtype)

    def _attention(self, layer: LayerWeights, x: torch.Tensor, past: int, bias: torch.Tensor,
                   cache: Optional[Tuple[torch.Tensor, torch.Tensor]]):
        spec = self.spec
        t = x.shape[0]
        q = F.linear(x, layer.q, layer.q_bias).view(t, spec.num_heads, spec.head_dim).transpose(0, 1)
        k = F.linear(x, layer.k, layer.k_bias).view(t, spec.num_kv_heads, spec.head_dim).transpose(0, 1)
        v = F.linear(x, layer.v, layer.v_bias).view(t, spec.num_kv_heads, spec.head_dim).transpose(0, 1)
        # q: [heads, t, head_dim]; k, v: [kv_heads, t, head_dim]
        if spec.position == "rope":
            inv_freq = spec.inv_freq_fn(past + t)
            cos, sin = rope_cos_sin(torch.arange(past, past + t), inv_freq, self.dtype)
            q = apply_rope(q, cos, sin)
            k = apply_rope(k, cos, sin)
        if cache is not None:
            k = torch.cat([cache[0], k], dim=1)
            v = torch.cat([cache[1], v], dim=1)
        new_cache = (k, v)
        group = spec.num_heads // spec.num_kv_heads
        k_all = k.repeat_interleave(group, dim=0)  # [heads, past + t, head_dim]
        v_all = v.repeat_interleave(group, dim=0)
        scores = torch.matmul(q, k_all.transpose(1, 2)) / math.sqrt(spec.head_dim)
        probs = torch.softmax(scores + bias, dim=-1)  # [heads, t, past + t]
        out = torch.matmul(probs, v_all).transpose(0, 1).reshape(t, spec.num_heads * spec.head_dim)
        return F.linear(out, layer.o, layer.o_bias), new_cache

    @torch.no_grad()
    def forward(self, ids: Sequence[int], cache: Optional[list] = None):
        """ids: new tokens; cache: what the previous call returned (None to start).
        Returns logits [len(ids), vocab] and the new cache."""
        past = 0 if cache is None else cache[0][0].shape[1]
        x = self.embed[torch.tensor(list(ids), dtype=torch.long)]  # [t, hidden]
        bias = self._score_bias(past, x.shape[0])
        new_cache = []
        for index, layer in enumerate(self.layers):
            attn, layer_cache = self._attention(layer, self._rms_norm(x, layer.input_norm), past, bias,
                                                None if cache is None else cache[index])
            new_cache.append(layer_cache)
            x = x + attn
            h = self._rms_norm(x, layer.post_norm)
            mlp = F.silu(F.linear(h, layer.gate, layer.gate_bias)) * F.linear(h, layer.up, layer.up_bias)
            x = x + F.linear(mlp, layer.down, layer.down_bias)
        logits = F.linear(self._rms_norm(x, self.final_norm), self.lm_head)
        return logits, new_cache

    def greedy(self, prompt: Sequence[int], new_tokens: int) -> Tuple[List[int], List[torch.Tensor]]:
        """Greedy decoding with the KV cache: prefill the prompt, then one token per step.
        Returns the new tokens and the logits [vocab] each one was chosen from."""
        logits, cache = self.forward(prompt)
        step_logits = [logits[-1]]
        tokens: List[int] = []
        while True:
            tokens.append(int(torch.argmax(step_logits[-1])))
            if len(tokens) == new_tokens:
                return tokens, step_logits
            logits, cache = self.forward([tokens[-1]], cache)
            step_logits.append(logits[-1])


# ---------------------------------------------------------------------------------------------
# Loading a Baichuan checkpoint directory
# ---------------------------------------------------------------------------------------------


def load_safetensors_dir(model_dir: str, dtype: torch.dtype) -> Dict[str, torch.Tensor]:
    """All tensors of model.safetensors, or of the shards named by model.safetensors.index.json,
    converted (exactly, for f16/bf16 -> f32/f64) to `dtype`."""
    from safetensors.torch import load_file

    index_path = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index_path):
        with open(index_path) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors: Dict[str, torch.Tensor] = {}
    for name in files:
        for key, value in load_file(os.path.join(model_dir, name)).items():
            tensors[key] = value.to(dtype)
    return tensors


def load_baichuan(model_dir: str, dtype: torch.dtype = torch.float32,
                  alibi_form: str = "relative") -> DecoderReference:
    """Builds the reference from a Baichuan directory (config.json + safetensors)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type") != "baichuan":
        raise ValueError(f"{model_dir}: model_type is {config.get('model_type')!r}, not 'baichuan'")
    weights = load_safetensors_dir(model_dir, dtype)
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = hidden // heads
    use_alibi = "max_position_embeddings" not in config
    spec = DecoderSpec(
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=head_dim,
        rms_norm_eps=config["rms_norm_eps"],
        position="alibi" if use_alibi else "rope",
        inv_freq_fn=None if use_alibi else (lambda _len: rope_inv_freq_default(head_dim, 10000.0)),
        alibi_form=alibi_form,
        norm_head="z_loss_weight" in config,
    )
    layers = []
    for n in range(config["num_hidden_layers"]):
        prefix = f"model.layers.{n}."
        w_pack = weights[prefix + "self_attn.W_pack.weight"]  # [3 * hidden, hidden]: q, k, v rows
        if tuple(w_pack.shape) != (3 * hidden, hidden):
            raise ValueError(f"{prefix}self_attn.W_pack.weight has shape {tuple(w_pack.shape)}")
        layers.append(LayerWeights(
            input_norm=weights[prefix + "input_layernorm.weight"],
            post_norm=weights[prefix + "post_attention_layernorm.weight"],
            q=w_pack[:hidden], k=w_pack[hidden:2 * hidden], v=w_pack[2 * hidden:],
            o=weights[prefix + "self_attn.o_proj.weight"],
            gate=weights[prefix + "mlp.gate_proj.weight"],
            up=weights[prefix + "mlp.up_proj.weight"],
            down=weights[prefix + "mlp.down_proj.weight"],
        ))
    return DecoderReference(spec, weights["model.embed_tokens.weight"], layers,
                            weights["model.norm.weight"], weights["lm_head.weight"])
