#!/usr/bin/env python3
"""Makes Kiln's golden reference data: tiny checkpoints plus the logits a reference framework
computes for them.

Every case is one folder under tests/golden/data/<case>/ (see README.md next to this file):
a Hugging Face model directory (config.json, safetensors, ...), golden.json and logits_<i>.npy.
Llama, Mistral, Qwen2 and GPT-2 cases are computed by Hugging Face transformers; the two
Baichuan cases by baichuan_reference.py (transformers has no Baichuan model). Everything runs on
the CPU in float32 with eager attention, so no TF32 or fused-kernel rounding is involved.

Weights are random but not transformers' default init (std 0.02 gives nearly flat logits and
greedy ties): every tensor is drawn so that the logits are spread out, and a case is re-drawn with
another seed until the top-1/top-2 logit gap along every greedy path is at least MIN_MARGIN.
Everything is seeded: running the script again gives the same files.

Needs torch, transformers (5.x), safetensors and numpy. Usage:
    python3 tests/golden/make_goldens.py [--out DIR] [--cases NAME,NAME]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
import traceback
from typing import Callable, Dict, List, Sequence

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import baichuan_reference as bref  # noqa: E402

PROMPT_LENGTHS = (1, 6, 19, 45)
NEW_TOKENS = 12
MIN_MARGIN = 0.02
MAX_ATTEMPTS = 16
# Scale of the output projection: logits end up with a standard deviation of about this much.
LM_HEAD_GAIN = 8.0
# q/k projections a little larger than 1/sqrt(fan_in) so attention is far from uniform and
# position encodings visibly matter.
QK_GAIN = 1.5
# Tied cases use small embeddings (embed_scale) and a large final norm (final_norm_scale):
# with unit-variance embeddings the input token dominates the residual stream and, through the
# tied output head, greedy decoding just repeats the last token. A seed is also re-drawn when
# fewer than this many greedy paths have at least 4 distinct tokens.
MIN_DIVERSE_PATHS = 2
FINAL_NORM_NAMES = ("model.norm.weight", "transformer.ln_f.weight")


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def _rope(rope_type: str, theta: float, **extra) -> dict:
    return {"rope_type": rope_type, "rope_theta": theta, **extra}


HF_CASES = [
    dict(
        name="llama_gqa",
        architecture="LlamaForCausalLM",
        config_class="LlamaConfig",
        config=dict(vocab_size=384, hidden_size=80, intermediate_size=128, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                    max_position_embeddings=128, rms_norm_eps=1e-5,
                    rope_parameters=_rope("default", 10000.0), tie_word_embeddings=False,
                    bos_token_id=1, eos_token_id=2),
        store_dtype="float32",
        ref_inv_freq=lambda n: bref.rope_inv_freq_default(24, 10000.0),
        notes="Llama, grouped-query attention (4 query heads, 2 kv heads), head_dim 24 given "
              "explicitly (hidden/heads would be 20), default RoPE theta 10000, untied lm_head, "
              "float32 tensors.",
    ),
    dict(
        name="llama_linear_tied_f16",
        architecture="LlamaForCausalLM",
        config_class="LlamaConfig",
        config=dict(vocab_size=320, hidden_size=64, intermediate_size=192, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                    rms_norm_eps=1e-6, rope_parameters=_rope("linear", 10000.0, factor=2.0),
                    tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
        store_dtype="float16",
        embed_scale=0.2,
        final_norm_scale=4.0,
        rewrite_config_4x=True,
        ref_inv_freq=lambda n: bref.rope_inv_freq_linear(16, 10000.0, 2.0),
        notes="Llama, multi-head attention, RoPE linear scaling factor 2 (positions divided by 2), "
              "tied embeddings (no lm_head.weight stored), tensors stored float16; the reference "
              "logits use exactly the stored float16 values upcast to float32. config.json is in "
              "transformers 4.x style (rope_theta, rope_scaling with both 'type' and 'rope_type', "
              "torch_dtype).",
    ),
    dict(
        name="llama_dynamic",
        architecture="LlamaForCausalLM",
        config_class="LlamaConfig",
        config=dict(vocab_size=448, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=32,
                    rms_norm_eps=1e-5, rope_parameters=_rope("dynamic", 10000.0, factor=2.0),
                    attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                    bos_token_id=1, eos_token_id=2),
        store_dtype="float32",
        ref_inv_freq=lambda n: bref.rope_inv_freq_dynamic(16, 10000.0, 2.0, 32, n),
        notes="Llama, multi-query attention (1 kv head), q/k/v/o and MLP biases, 3 layers, RoPE "
              "dynamic NTK factor 2 with max_position_embeddings 32. transformers applies it per "
              "forward call from the total length L = (largest position id + 1): when L > 32 the "
              "base becomes theta * (factor * L / 32 - (factor - 1))^(d / (d - 2)) for ALL tokens "
              "of that call. So the 45-token prompt's logits use L = 45 everywhere; during greedy "
              "decoding with the KV cache each new token is rotated with its own L while cached "
              "keys keep the rotation they were made with (greedy[i].matches_full_recompute tells "
              "whether that path equals re-running the whole sequence each step).",
    ),
    dict(
        name="llama3_rope_bf16_sharded",
        architecture="LlamaForCausalLM",
        config_class="LlamaConfig",
        config=dict(vocab_size=512, hidden_size=128, intermediate_size=160, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                    rms_norm_eps=1e-5,
                    rope_parameters=_rope("llama3", 10000.0, factor=8.0, low_freq_factor=1.0,
                                          high_freq_factor=4.0, original_max_position_embeddings=16),
                    tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
        store_dtype="bfloat16",
        max_shard_size="300KB",
        ref_inv_freq=lambda n: bref.rope_inv_freq_llama3(32, 10000.0, 8.0, 1.0, 4.0, 16),
        notes="Llama, GQA (4/2), head_dim 32, RoPE type llama3 (factor 8, low_freq_factor 1, "
              "high_freq_factor 4, original_max_position_embeddings 16; with theta 10000 two "
              "frequency pairs fall in the blended band, the rest are divided by 8), tensors "
              "stored bfloat16 (reference uses the stored values upcast to float32), saved in "
              "several shards with model.safetensors.index.json.",
    ),
    dict(
        name="mistral_sliding",
        architecture="MistralForCausalLM",
        config_class="MistralConfig",
        config=dict(vocab_size=352, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                    rms_norm_eps=1e-5, rope_parameters=_rope("default", 10000.0),
                    sliding_window=8, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
        store_dtype="float32",
        ref_inv_freq=lambda n: bref.rope_inv_freq_default(16, 10000.0),
        sliding_window=8,
        notes="Mistral, GQA (4/2), sliding_window 8, float32.",
    ),
    dict(
        name="qwen2_tied",
        architecture="Qwen2ForCausalLM",
        config_class="Qwen2Config",
        config=dict(vocab_size=416, hidden_size=80, intermediate_size=160, num_hidden_layers=2,
                    num_attention_heads=5, num_key_value_heads=1, max_position_embeddings=128,
                    rms_norm_eps=1e-6, rope_parameters=_rope("default", 1000000.0),
                    tie_word_embeddings=True, use_sliding_window=False,
                    bos_token_id=1, eos_token_id=2),
        store_dtype="float32",
        embed_scale=0.2,
        final_norm_scale=4.0,
        ref_inv_freq=lambda n: bref.rope_inv_freq_default(16, 1000000.0),
        notes="Qwen2: q/k/v projections with bias (o_proj and MLP without), 5 query heads and 1 kv "
              "head, RoPE theta 1e6, tied embeddings (no lm_head.weight stored), float32.",
    ),
    dict(
        name="gpt2",
        architecture="GPT2LMHeadModel",
        config_class="GPT2Config",
        config=dict(vocab_size=400, n_positions=64, n_embd=64, n_layer=2, n_head=4,
                    activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
                    attn_pdrop=0.0, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                    bos_token_id=0, eos_token_id=0),
        store_dtype="float32",
        embed_scale=0.2,
        final_norm_scale=4.0,
        notes="GPT-2: learned position embeddings (n_positions 64), pre-LayerNorm with bias, "
              "gelu_new (tanh approximation) MLP with 4*n_embd hidden units, fused c_attn, tied "
              "wte/lm_head. Conv1D weights (c_attn, c_proj, c_fc) are stored [in, out], i.e. "
              "transposed relative to torch.nn.Linear. Tensor names carry the 'transformer.' "
              "prefix that GPT2LMHeadModel.save_pretrained writes.",
    ),
]

BAICHUAN_CASES = [
    dict(
        name="baichuan_7b",
        architecture="BaichuanForCausalLM",
        config={
            "architectures": ["BaichuanForCausalLM"],
            "auto_map": {
                "AutoConfig": "configuration_baichuan.BaichuanConfig",
                "AutoModelForCausalLM": "modeling_baichuan.BaichuanForCausalLM",
            },
            "bos_token_id": 1,
            "eos_token_id": 2,
            "hidden_act": "silu",
            "hidden_size": 64,
            "initializer_range": 0.02,
            "intermediate_size": 176,
            "max_position_embeddings": 64,
            "model_type": "baichuan",
            "num_attention_heads": 4,
            "num_hidden_layers": 2,
            "pad_token_id": 0,
            "rms_norm_eps": 1e-06,
            "tie_word_embeddings": False,
            "torch_dtype": "float32",
            "transformers_version": "4.29.1",
            "use_cache": True,
            "vocab_size": 336,
        },
        store_dtype="float32",
        final_norm_scale=1.0,
        notes="Baichuan-7B architecture: Llama layer with q/k/v fused in W_pack [3*hidden, hidden] "
              "(rows q, then k, then v), RoPE theta 10000 on the whole head (rotate-half layout), "
              "RMSNorm eps 1e-6, SiLU-gated MLP, untied lm_head, float32. Logits and greedy "
              "continuations (KV cache) come from baichuan_reference.py, which is cross-checked "
              "against transformers' LlamaForCausalLM with W_pack split into q/k/v "
              "(checks.llama_crosscheck_max_abs_diff).",
    ),
    dict(
        name="baichuan2_13b",
        architecture="BaichuanForCausalLM",
        config={
            "_from_model_config": True,
            "architectures": ["BaichuanForCausalLM"],
            "auto_map": {
                "AutoConfig": "configuration_baichuan.BaichuanConfig",
                "AutoModelForCausalLM": "modeling_baichuan.BaichuanForCausalLM",
            },
            "bos_token_id": 1,
            "eos_token_id": 2,
            "gradient_checkpointing": False,
            "hidden_act": "silu",
            "hidden_size": 96,
            "initializer_range": 0.02,
            "intermediate_size": 192,
            "model_max_length": 64,
            "model_type": "baichuan",
            "num_attention_heads": 6,
            "num_hidden_layers": 2,
            "pad_token_id": 0,
            "rms_norm_eps": 1e-06,
            "tie_word_embeddings": False,
            "torch_dtype": "bfloat16",
            "transformers_version": "4.29.2",
            "use_cache": True,
            "vocab_size": 480,
            "z_loss_weight": 0,
        },
        store_dtype="bfloat16",
        # NormHead logits are <h, w/|w|>; a larger final norm keeps them spread out.
        final_norm_scale=8.0,
        notes="Baichuan2-13B architecture: no RoPE, ALiBi with 6 heads (not a power of two, like "
              "the real 40, so the interleaved slope rule is exercised: slopes 2^-2, 2^-4, 2^-6, "
              "2^-8, then 2^-1, 2^-3); score(i, j) += slope * (j - i) for j <= i. W_pack fused "
              "q/k/v, RMSNorm, SiLU MLP, NormHead: each lm_head row is divided by its L2 norm at "
              "inference (the stored rows are NOT normalised). Tensors stored bfloat16; the "
              "reference uses the stored values upcast to float32. Recognise it by config: no "
              "max_position_embeddings (only model_max_length) -> ALiBi; z_loss_weight present -> "
              "NormHead. Logits and greedy continuations (KV cache) from baichuan_reference.py.",
    ),
]

ALL_CASE_NAMES = [c["name"] for c in HF_CASES] + [c["name"] for c in BAICHUAN_CASES]


# ---------------------------------------------------------------------------------------------
# Shared functions
# ---------------------------------------------------------------------------------------------

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def case_seed(name: str) -> int:
    """A stable per-case seed (Python's hash() is salted per process)."""
    return sum((i + 1) * ord(ch) for i, ch in enumerate(name)) % 100000


def make_prompts(name: str, vocab: int) -> List[List[int]]:
    rng = np.random.default_rng(case_seed(name) + 7)
    # Ids 0..2 are the special tokens of every config here; prompts avoid them.
    return [rng.integers(3, vocab, size=n).tolist() for n in PROMPT_LENGTHS]


def init_value(name: str, shape: Sequence[int], gen: torch.Generator, conv1d: bool) -> torch.Tensor:
    """Initial value of one parameter, chosen by its name (see module docstring)."""

    def randn() -> torch.Tensor:
        return torch.randn(tuple(shape), generator=gen, dtype=torch.float32)

    lname = name.lower()
    is_norm = "norm" in lname or ".ln_" in lname or lname.startswith("ln_")
    if len(shape) == 1:
        if is_norm and lname.endswith(".weight"):
            return 1.0 + 0.1 * randn()
        return 0.1 * randn()  # biases, LayerNorm biases included
    if "embed_tokens" in lname or "wte" in lname:
        return randn()
    if "wpe" in lname:
        return 0.3 * randn()
    fan_in = shape[0] if conv1d else shape[1]
    if "lm_head" in lname:
        gain = LM_HEAD_GAIN
    elif any(s in lname for s in ("q_proj", "k_proj", "w_pack", "c_attn")):
        gain = QK_GAIN
    else:
        gain = 1.0
    return randn() * (gain / math.sqrt(fan_in))


def top2_margin(logits: np.ndarray) -> float:
    top = np.sort(logits.astype(np.float64))[-2:]
    return float(top[1] - top[0])


def dir_size(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(path) for f in files)


def stored_dtypes(model_dir: str) -> List[str]:
    from safetensors import safe_open

    kinds = set()
    for f in sorted(os.listdir(model_dir)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(model_dir, f), "pt") as st:
                for key in st.keys():
                    kinds.add(str(st.get_tensor(key).dtype).replace("torch.", ""))
    return sorted(kinds)


def stored_keys(model_dir: str) -> List[str]:
    from safetensors import safe_open

    keys = []
    for f in sorted(os.listdir(model_dir)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(model_dir, f), "pt") as st:
                keys.extend(st.keys())
    return sorted(keys)


class Runner:
    """What a case needs from its reference: full-sequence logits and a cached greedy path."""

    def full_logits(self, ids: Sequence[int]) -> np.ndarray:  # [len(ids), vocab]
        raise NotImplementedError

    def greedy(self, ids: Sequence[int]):  # -> (tokens, [logits [vocab] per step])
        raise NotImplementedError

    def recompute_greedy(self, ids: Sequence[int]):
        """Greedy without a cache: the whole sequence is run again for every new token."""
        seq = list(ids)
        steps = []
        for _ in range(NEW_TOKENS):
            last = self.full_logits(seq)[-1]
            steps.append(last)
            seq.append(int(np.argmax(last)))
        return seq[len(ids):], steps


def evaluate(runner: Runner, prompts: List[List[int]]):
    """Logits for every prompt, greedy paths, and the smallest top-2 gap seen on them."""
    logits = [runner.full_logits(p).astype(np.float32) for p in prompts]
    greedy = []
    margin = math.inf
    margin_recompute = math.inf
    for p in prompts:
        tokens, steps = runner.greedy(p)
        if len(tokens) != NEW_TOKENS:
            raise RuntimeError(f"greedy produced {len(tokens)} tokens, expected {NEW_TOKENS}")
        re_tokens, re_steps = runner.recompute_greedy(p)
        margin = min([margin] + [top2_margin(s) for s in steps])
        margin_recompute = min([margin_recompute] + [top2_margin(s) for s in re_steps])
        greedy.append({"prompt": list(p), "continuation": [int(t) for t in tokens],
                       "matches_full_recompute": [int(t) for t in re_tokens] == [int(t) for t in tokens]})
    return logits, greedy, margin, margin_recompute


def diverse_paths(greedy) -> int:
    return sum(1 for g in greedy if len(set(g["continuation"])) >= 4)


class SeedSearch:
    """Keeps the first attempt whose greedy paths are well separated and diverse; falls back to
    the first well-separated one when no attempt is diverse enough."""

    def __init__(self, name: str):
        self.name = name
        self.fallback_seed = None

    def accept(self, seed: int, greedy, margin: float, margin_re: float) -> bool:
        worst = min(margin, margin_re)
        if worst < MIN_MARGIN:
            print(f"  {self.name}: seed {seed} gives top-2 margin {worst:.4f}; re-drawing")
            return False
        if diverse_paths(greedy) < MIN_DIVERSE_PATHS:
            print(f"  {self.name}: seed {seed} gives only {diverse_paths(greedy)} diverse greedy paths; re-drawing")
            if self.fallback_seed is None:
                self.fallback_seed = seed
            return False
        return True


def fmt(value) -> str:
    return f"{value:.2g}" if isinstance(value, float) else str(value)


def verified_notes(name: str, checks: dict) -> str:
    """Sentences stating what the checks of this run established (empty if a check failed)."""
    try:
        ref = checks.get("independent_reference_max_abs_diff")
        if name == "llama_linear_tied_f16":
            return (" Checked: this 4.x-style config.json gives bitwise the same logits as the 5.x "
                    "config transformers wrote (kept in checks.config_as_saved_by_transformers): "
                    f"{checks['config_4x_loads_identically']}; linear scaling changes the logits by "
                    f"up to {fmt(checks['max_abs_diff_vs_default_rope']['len45'])} against default "
                    f"RoPE; the independent decoder of baichuan_reference.py matches to {fmt(ref)}.")
        if name == "llama_dynamic":
            d = checks["max_abs_diff_vs_default_rope"]
            return (f" Checked: logits equal default RoPE for the 1/6/19-token prompts (max diff "
                    f"{fmt(max(d['len1'], d['len6'], d['len19']))}) and differ by {fmt(d['len45'])} for "
                    f"the 45-token one; the independent decoder using the formula above with L = 45 "
                    f"matches to {fmt(ref)}.")
        if name == "llama3_rope_bf16_sharded":
            return (f" Checked: differs from default RoPE by up to "
                    f"{fmt(checks['max_abs_diff_vs_default_rope']['len45'])}; the independent decoder "
                    f"with the llama3 formula matches to {fmt(ref)}.")
        if name == "mistral_sliding":
            d = checks["max_abs_diff_vs_sliding_window_none"]
            return (" Checked: transformers applies the window with eager attention: against "
                    f"sliding_window=None the logits differ by {fmt(d['len45'])} for the 45-token prompt "
                    f"and {fmt(d['len19'])} for the 19-token one, and are identical for 1 and 6 tokens. "
                    "Query i attends key j iff 0 <= i - j < 8 (itself and the 7 tokens before): the "
                    "independent decoder with that rule matches to "
                    f"{fmt(checks['independent_reference_max_abs_diff_window_i_minus_j_lt_w'])}, with "
                    "i - j <= 8 it is off by "
                    f"{fmt(checks['independent_reference_max_abs_diff_window_i_minus_j_le_w'])}.")
        if name in ("llama_gqa", "qwen2_tied"):
            return f" Checked: the independent decoder of baichuan_reference.py matches to {fmt(ref)}."
        if name == "baichuan_7b":
            return (" Checked: transformers' LlamaForCausalLM with W_pack split into q/k/v matches to "
                    f"{fmt(checks['llama_crosscheck_max_abs_diff'])}.")
        if name == "baichuan2_13b":
            return (" Checked: the bias form slope * j (key position, as a cached causal ALiBi mask "
                    "holds it) gives the same logits to "
                    f"{fmt(checks['alibi_key_position_form_max_abs_diff'])}; the slopes equal "
                    "transformers' BLOOM ALiBi slopes for 6 and 40 heads to "
                    f"{fmt(checks['alibi_slopes_vs_transformers_bloom_max_abs_diff'])}.")
    except (KeyError, TypeError):
        return ""
    return ""


def write_golden(case_dir: str, case: dict, prompts, logits, greedy, margin: float, extra: dict):
    names = []
    for i, arr in enumerate(logits):
        fname = f"logits_{i}.npy"
        np.save(os.path.join(case_dir, fname), np.ascontiguousarray(arr, dtype=np.float32))
        names.append(fname)
    golden = {
        "case": case["name"],
        "architecture": case["architecture"],
        "notes": case["notes"] + verified_notes(case["name"], extra["checks"]),
        "prompts": prompts,
        "logits": names,
        "greedy": greedy,
        "min_top2_margin": round(float(margin), 6),
    }
    golden.update(extra)
    with open(os.path.join(case_dir, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
        f.write("\n")


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


# ---------------------------------------------------------------------------------------------
# Hugging Face cases
# ---------------------------------------------------------------------------------------------

def hf_from_config(config):
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    except TypeError:
        config._attn_implementation = "eager"
        return AutoModelForCausalLM.from_config(config)


def hf_load(model_dir: str, config=None, dtype=torch.float32):
    from transformers import AutoModelForCausalLM

    kwargs = {"attn_implementation": "eager"}
    if config is not None:
        kwargs["config"] = config
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, **kwargs)
    model.eval()
    got = {p.dtype for p in model.parameters()}
    if got != {dtype}:
        raise RuntimeError(f"loaded parameters have dtypes {got}, wanted {dtype}")
    return model


def hf_logits(model, ids: Sequence[int]) -> np.ndarray:
    with torch.no_grad():
        out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long), use_cache=False)
    return out.logits[0].to(torch.float64).numpy()


class HfRunner(Runner):
    """Reloads the model for every sequence, so no state (dynamic RoPE) leaks between them."""

    def __init__(self, model_dir: str):
        self.model_dir = model_dir

    def full_logits(self, ids):
        return hf_logits(hf_load(self.model_dir), ids)

    def greedy(self, ids):
        model = hf_load(self.model_dir)
        gen = model.generation_config
        gen.eos_token_id = None  # greedy must run all NEW_TOKENS steps
        gen.pad_token_id = 0
        gen.do_sample = False
        gen.num_beams = 1
        input_ids = torch.tensor([list(ids)], dtype=torch.long)
        with torch.no_grad():
            out = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                 do_sample=False, max_new_tokens=NEW_TOKENS, use_cache=True,
                                 return_dict_in_generate=True, output_logits=True)
        tokens = out.sequences[0, len(ids):].tolist()
        steps = [l[0].to(torch.float64).numpy() for l in out.logits]
        return tokens, steps

    def recompute_greedy(self, ids):
        model = hf_load(self.model_dir)  # lengths only grow in this loop: one model is enough
        seq = list(ids)
        steps = []
        for _ in range(NEW_TOKENS):
            last = hf_logits(model, seq)[-1]
            steps.append(last)
            seq.append(int(np.argmax(last)))
        return seq[len(ids):], steps


def rewrite_config_4x(model_dir: str) -> None:
    """Rewrites config.json the way transformers 4.x wrote it: rope_theta + rope_scaling instead of
    rope_parameters, torch_dtype instead of dtype."""
    path = os.path.join(model_dir, "config.json")
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters", None)
    if rope is not None:
        rope = dict(rope)
        cfg["rope_theta"] = rope.pop("rope_theta", 10000.0)
        rope_type = rope.pop("rope_type", rope.pop("type", "default"))
        cfg["rope_scaling"] = None if rope_type == "default" else {"type": rope_type, "rope_type": rope_type, **rope}
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    cfg["transformers_version"] = "4.46.3"
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def reshard(model_dir: str, max_bytes: int) -> None:
    """Splits a single model.safetensors into shards + index (used only when save_pretrained did
    not shard by itself)."""
    from safetensors.torch import load_file, save_file

    single = os.path.join(model_dir, "model.safetensors")
    tensors = load_file(single)
    os.remove(single)
    groups: List[Dict[str, torch.Tensor]] = [{}]
    size = 0
    for key in sorted(tensors):
        nbytes = tensors[key].numel() * tensors[key].element_size()
        if groups[-1] and size + nbytes > max_bytes:
            groups.append({})
            size = 0
        groups[-1][key] = tensors[key]
        size += nbytes
    weight_map = {}
    total = 0
    for i, group in enumerate(groups):
        fname = f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors"
        save_file(group, os.path.join(model_dir, fname), metadata={"format": "pt"})
        for key, t in group.items():
            weight_map[key] = fname
            total += t.numel() * t.element_size()
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2, sort_keys=True)
        f.write("\n")


def build_hf_checkpoint(case: dict, seed: int, case_dir: str) -> dict:
    """Writes the checkpoint of one attempt; returns facts for the checks."""
    import transformers

    facts: dict = {}
    config = getattr(transformers, case["config_class"])(**case["config"])
    torch.manual_seed(seed)
    model = hf_from_config(config)
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    conv1d = case["config_class"] == "GPT2Config"
    with torch.no_grad():
        for name, param in sorted(model.named_parameters(), key=lambda kv: kv[0]):
            is_conv = conv1d and any(s in name for s in ("c_attn", "c_proj", "c_fc"))
            value = init_value(name, list(param.shape), gen, is_conv)
            if name in FINAL_NORM_NAMES:
                value = value * case.get("final_norm_scale", 1.0)
            if any(s in name for s in ("embed_tokens", "wte", "wpe")):
                value = value * case.get("embed_scale", 1.0)
            param.copy_(value)
    model.to(DTYPES[case["store_dtype"]])
    save_kwargs = {}
    if "max_shard_size" in case:
        save_kwargs["max_shard_size"] = case["max_shard_size"]
    model.save_pretrained(case_dir, **save_kwargs)
    if "max_shard_size" in case and not os.path.exists(os.path.join(case_dir, "model.safetensors.index.json")):
        facts["resharded_by_script"] = True
        reshard(case_dir, 300 * 1000)
    if case.get("rewrite_config_4x"):
        # Same model through the 5.x config that save_pretrained wrote, then through the 4.x one.
        probe = make_prompts(case["name"], case["config"]["vocab_size"])[-1]
        before_model = hf_load(case_dir)
        before = hf_logits(before_model, probe)
        before_rope = dict(getattr(before_model.config, "rope_parameters", {}) or {})
        with open(os.path.join(case_dir, "config.json")) as f:
            facts["config_as_saved_by_transformers"] = json.load(f)
        rewrite_config_4x(case_dir)
        after_model = hf_load(case_dir)
        after = hf_logits(after_model, probe)
        after_rope = dict(getattr(after_model.config, "rope_parameters", {}) or {})
        facts["config_4x_loads_identically"] = bool(np.array_equal(before, after))
        after_rope_no_alias = {k: v for k, v in after_rope.items() if k != "type"}
        facts["config_4x_rope_parameters_equal_except_type_alias"] = (
            json.dumps(before_rope, sort_keys=True, default=str)
            == json.dumps(after_rope_no_alias, sort_keys=True, default=str))
        facts["rope_parameters_after_4x_load"] = json.loads(json.dumps(after_rope, default=str))
    return facts


def hf_reference_model(case: dict, model_dir: str, **spec_overrides) -> bref.DecoderReference:
    """The independent decoder of baichuan_reference.py, built from a Llama-family checkpoint."""
    cfg = case["config"]
    sd = {k: v.to(torch.float32) for k, v in hf_load(model_dir).state_dict().items()}
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    spec = bref.DecoderSpec(num_heads=heads, num_kv_heads=cfg.get("num_key_value_heads", heads),
                            head_dim=head_dim, rms_norm_eps=cfg["rms_norm_eps"], position="rope",
                            inv_freq_fn=case["ref_inv_freq"], **spec_overrides)
    layers = []
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        layers.append(bref.LayerWeights(
            input_norm=sd[p + "input_layernorm.weight"], post_norm=sd[p + "post_attention_layernorm.weight"],
            q=sd[p + "self_attn.q_proj.weight"], k=sd[p + "self_attn.k_proj.weight"],
            v=sd[p + "self_attn.v_proj.weight"], o=sd[p + "self_attn.o_proj.weight"],
            gate=sd[p + "mlp.gate_proj.weight"], up=sd[p + "mlp.up_proj.weight"],
            down=sd[p + "mlp.down_proj.weight"],
            q_bias=sd.get(p + "self_attn.q_proj.bias"), k_bias=sd.get(p + "self_attn.k_proj.bias"),
            v_bias=sd.get(p + "self_attn.v_proj.bias"), o_bias=sd.get(p + "self_attn.o_proj.bias"),
            gate_bias=sd.get(p + "mlp.gate_proj.bias"), up_bias=sd.get(p + "mlp.up_proj.bias"),
            down_bias=sd.get(p + "mlp.down_proj.bias")))
    embed = sd["model.embed_tokens.weight"]
    return bref.DecoderReference(spec, embed, layers, sd["model.norm.weight"], sd.get("lm_head.weight", embed))


def hf_logits_with_config(model_dir: str, mutate: Callable, ids) -> np.ndarray:
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir)
    mutate(cfg)
    return hf_logits(hf_load(model_dir, config=cfg), ids)


def hf_checks(case: dict, model_dir: str, prompts, logits) -> dict:
    """Cross-checks against the independent decoder and against variations of the config."""
    checks: dict = {}

    def guarded(key: str, fn: Callable):
        try:
            checks[key] = fn()
        except Exception as e:  # a failed check is reported, not fatal
            checks[key] = f"ERROR: {type(e).__name__}: {e}"
            traceback.print_exc()

    if "ref_inv_freq" in case:
        def ref_diff(**overrides):
            ref = hf_reference_model(case, model_dir, **overrides)
            return max(max_abs_diff(ref.forward(p)[0].numpy(), l) for p, l in zip(prompts, logits))

        if "sliding_window" in case:
            w = case["sliding_window"]
            guarded("independent_reference_max_abs_diff_window_i_minus_j_lt_w",
                    lambda: ref_diff(sliding_window=w, window_rule="lt"))
            guarded("independent_reference_max_abs_diff_window_i_minus_j_le_w",
                    lambda: ref_diff(sliding_window=w, window_rule="le"))
            guarded("independent_reference_max_abs_diff_no_window", lambda: ref_diff())

            def no_window():
                def mutate(cfg):
                    cfg.sliding_window = None
                return {f"len{len(p)}": max_abs_diff(hf_logits_with_config(model_dir, mutate, p), l)
                        for p, l in zip(prompts, logits)}
            guarded("max_abs_diff_vs_sliding_window_none", no_window)
        else:
            guarded("independent_reference_max_abs_diff", lambda: ref_diff())

    rope_type = case["config"].get("rope_parameters", {}).get("rope_type")
    if rope_type and rope_type != "default":
        def vs_default():
            theta = case["config"]["rope_parameters"]["rope_theta"]

            def mutate(cfg):
                cfg.rope_parameters = {"rope_type": "default", "rope_theta": theta}
            return {f"len{len(p)}": max_abs_diff(hf_logits_with_config(model_dir, mutate, p), l)
                    for p, l in zip(prompts, logits)}
        guarded("max_abs_diff_vs_default_rope", vs_default)

    def f64_noise():
        model = hf_load(model_dir).to(torch.float64)
        return max_abs_diff(hf_logits(model, prompts[-1]), logits[-1])
    guarded("float64_vs_float32_max_abs_diff_len45", f64_noise)
    return checks


def make_hf_case(case: dict, out_root: str) -> dict:
    import transformers

    name = case["name"]
    case_dir = os.path.join(out_root, name)
    prompts = make_prompts(name, case["config"]["vocab_size"])
    base_seed = case_seed(name)
    search = SeedSearch(name)
    seeds = [base_seed + 1000 * attempt for attempt in range(MAX_ATTEMPTS)]
    for attempt, seed in enumerate(seeds + [None]):
        if seed is None:
            if search.fallback_seed is None:
                raise RuntimeError(f"{name}: no seed in {MAX_ATTEMPTS} attempts reached margin {MIN_MARGIN}")
            seed = search.fallback_seed
        shutil.rmtree(case_dir, ignore_errors=True)
        os.makedirs(case_dir)
        facts = build_hf_checkpoint(case, seed, case_dir)
        logits, greedy, margin, margin_re = evaluate(HfRunner(case_dir), prompts)
        if attempt == MAX_ATTEMPTS or search.accept(seed, greedy, margin, margin_re):
            break
    checks = dict(facts)
    checks.update(hf_checks(case, case_dir, prompts, logits))
    checks["min_top2_margin_full_recompute"] = round(margin_re, 6)
    checks["greedy_paths_with_4_or_more_distinct_tokens"] = diverse_paths(greedy)
    checks["stored_dtypes"] = stored_dtypes(case_dir)
    checks["stored_tensor_names"] = stored_keys(case_dir)
    extra = {
        "vocab_size": case["config"]["vocab_size"],
        "stored_dtype": case["store_dtype"],
        "reference": f"transformers {transformers.__version__}, torch {torch.__version__}, "
                     "CPU float32, attn_implementation=eager; greedy = generate(do_sample=False, "
                     "use_cache=True)",
        "seed": seed,
        "checks": checks,
    }
    write_golden(case_dir, case, prompts, logits, greedy, margin, extra)
    return {"seed": seed, "attempts": attempt + 1, "margin": margin, "checks": checks}


# ---------------------------------------------------------------------------------------------
# Baichuan cases
# ---------------------------------------------------------------------------------------------

def baichuan_tensor_shapes(cfg: dict) -> Dict[str, List[int]]:
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    shapes = {"model.embed_tokens.weight": [v, h], "model.norm.weight": [h], "lm_head.weight": [v, h]}
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        shapes[p + "self_attn.W_pack.weight"] = [3 * h, h]
        shapes[p + "self_attn.o_proj.weight"] = [h, h]
        shapes[p + "mlp.gate_proj.weight"] = [i, h]
        shapes[p + "mlp.up_proj.weight"] = [i, h]
        shapes[p + "mlp.down_proj.weight"] = [h, i]
        shapes[p + "input_layernorm.weight"] = [h]
        shapes[p + "post_attention_layernorm.weight"] = [h]
    return shapes


def build_baichuan_checkpoint(case: dict, seed: int, case_dir: str) -> None:
    from safetensors.torch import save_file

    cfg = case["config"]
    gen = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, shape in sorted(baichuan_tensor_shapes(cfg).items()):
        value = init_value(name, shape, gen, conv1d=False)
        if name == "model.norm.weight":
            value = value * case["final_norm_scale"]
        if name == "lm_head.weight" and "z_loss_weight" in cfg:
            # Rows of different lengths, so that a runtime that skips NormHead fails loudly.
            value = value * (0.5 + torch.rand((shape[0], 1), generator=gen))
        tensors[name] = value.to(DTYPES[case["store_dtype"]]).contiguous()
    save_file(tensors, os.path.join(case_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(case_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    generation = {"_from_model_config": True, "bos_token_id": cfg["bos_token_id"],
                  "eos_token_id": cfg["eos_token_id"], "pad_token_id": cfg["pad_token_id"],
                  "transformers_version": cfg["transformers_version"]}
    with open(os.path.join(case_dir, "generation_config.json"), "w") as f:
        json.dump(generation, f, indent=2, sort_keys=True)
        f.write("\n")


class BaichuanRunner(Runner):
    def __init__(self, model_dir: str, dtype=torch.float32, alibi_form: str = "relative"):
        self.ref = bref.load_baichuan(model_dir, dtype=dtype, alibi_form=alibi_form)

    def full_logits(self, ids):
        return self.ref.forward(ids)[0].to(torch.float64).numpy()

    def greedy(self, ids):
        tokens, steps = self.ref.greedy(ids, NEW_TOKENS)
        return tokens, [s.to(torch.float64).numpy() for s in steps]


def llama_from_baichuan(case_dir: str, cfg: dict):
    """transformers' LlamaForCausalLM holding the Baichuan-7B weights (W_pack split into q/k/v)."""
    import transformers

    h = cfg["hidden_size"]
    config = transformers.LlamaConfig(
        vocab_size=cfg["vocab_size"], hidden_size=h, intermediate_size=cfg["intermediate_size"],
        num_hidden_layers=cfg["num_hidden_layers"], num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_attention_heads"], max_position_embeddings=cfg["max_position_embeddings"],
        rms_norm_eps=cfg["rms_norm_eps"], rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False)
    model = hf_from_config(config).to(torch.float32).eval()
    weights = bref.load_safetensors_dir(case_dir, torch.float32)
    state = {}
    for key, value in weights.items():
        if key.endswith("self_attn.W_pack.weight"):
            base = key[: -len("W_pack.weight")]
            state[base + "q_proj.weight"] = value[:h]
            state[base + "k_proj.weight"] = value[h:2 * h]
            state[base + "v_proj.weight"] = value[2 * h:]
        else:
            state[key] = value
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [k for k in missing if "rotary" not in k]
    if missing or unexpected:
        raise RuntimeError(f"state dict mismatch: missing {missing}, unexpected {unexpected}")
    return model


def baichuan_checks(case: dict, case_dir: str, prompts, logits) -> dict:
    checks: dict = {}
    cfg = case["config"]

    def guarded(key: str, fn: Callable):
        try:
            checks[key] = fn()
        except Exception as e:
            checks[key] = f"ERROR: {type(e).__name__}: {e}"
            traceback.print_exc()

    if "max_position_embeddings" in cfg:
        def llama():
            model = llama_from_baichuan(case_dir, cfg)
            return max(max_abs_diff(hf_logits(model, p), l) for p, l in zip(prompts, logits))
        guarded("llama_crosscheck_max_abs_diff", llama)
    else:
        def key_position_form():
            runner = BaichuanRunner(case_dir, alibi_form="key_position")
            return max(max_abs_diff(runner.full_logits(p), l) for p, l in zip(prompts, logits))
        guarded("alibi_key_position_form_max_abs_diff", key_position_form)

        def slopes_vs_bloom():
            from transformers.models.bloom.modeling_bloom import build_alibi_tensor

            worst = 0.0
            for heads in (cfg["num_attention_heads"], 40):
                alibi = build_alibi_tensor(torch.ones(1, 2, dtype=torch.long), heads, torch.float64)
                theirs = alibi.reshape(heads, 2)[:, 1].numpy()
                worst = max(worst, max_abs_diff(theirs, np.array(bref.alibi_slopes(heads))))
            return worst
        guarded("alibi_slopes_vs_transformers_bloom_max_abs_diff", slopes_vs_bloom)
        checks["alibi_slopes"] = bref.alibi_slopes(cfg["num_attention_heads"])

    def f64_noise():
        runner = BaichuanRunner(case_dir, dtype=torch.float64)
        return max_abs_diff(runner.full_logits(prompts[-1]), logits[-1])
    guarded("float64_vs_float32_max_abs_diff_len45", f64_noise)
    return checks


def make_baichuan_case(case: dict, out_root: str) -> dict:
    name = case["name"]
    case_dir = os.path.join(out_root, name)
    prompts = make_prompts(name, case["config"]["vocab_size"])
    base_seed = case_seed(name)
    search = SeedSearch(name)
    seeds = [base_seed + 1000 * attempt for attempt in range(MAX_ATTEMPTS)]
    for attempt, seed in enumerate(seeds + [None]):
        if seed is None:
            if search.fallback_seed is None:
                raise RuntimeError(f"{name}: no seed in {MAX_ATTEMPTS} attempts reached margin {MIN_MARGIN}")
            seed = search.fallback_seed
        shutil.rmtree(case_dir, ignore_errors=True)
        os.makedirs(case_dir)
        build_baichuan_checkpoint(case, seed, case_dir)
        logits, greedy, margin, margin_re = evaluate(BaichuanRunner(case_dir), prompts)
        if attempt == MAX_ATTEMPTS or search.accept(seed, greedy, margin, margin_re):
            break
    checks = baichuan_checks(case, case_dir, prompts, logits)
    checks["min_top2_margin_full_recompute"] = round(margin_re, 6)
    checks["greedy_paths_with_4_or_more_distinct_tokens"] = diverse_paths(greedy)
    checks["stored_dtypes"] = stored_dtypes(case_dir)
    extra = {
        "vocab_size": case["config"]["vocab_size"],
        "stored_dtype": case["store_dtype"],
        "reference": f"tests/golden/baichuan_reference.py, torch {torch.__version__}, CPU float32; "
                     "greedy = prefill + one token per step with the KV cache",
        "seed": seed,
        "checks": checks,
    }
    write_golden(case_dir, case, prompts, logits, greedy, margin, extra)
    return {"seed": seed, "attempts": attempt + 1, "margin": margin, "checks": checks}


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------

def short(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {short(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list) and len(value) > 6:
        return f"[{len(value)} items]"
    return str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=os.path.join(HERE, "data"), help="output folder")
    parser.add_argument("--cases", default=",".join(ALL_CASE_NAMES), help="comma-separated case names")
    parser.add_argument("--threads", type=int, default=4, help="torch CPU threads")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    wanted = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(wanted) - set(ALL_CASE_NAMES))
    if unknown:
        print(f"unknown cases {unknown}; known: {ALL_CASE_NAMES}")
        return 2
    os.makedirs(args.out, exist_ok=True)
    import transformers

    try:
        transformers.utils.logging.disable_progress_bar()
    except AttributeError:
        pass
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    failed = []
    for case in HF_CASES + BAICHUAN_CASES:
        if case["name"] not in wanted:
            continue
        start = time.time()
        try:
            make = make_hf_case if case in HF_CASES else make_baichuan_case
            result = make(case, args.out)
        except Exception:
            traceback.print_exc()
            failed.append(case["name"])
            print(f"[FAIL] {case['name']}")
            continue
        size = dir_size(os.path.join(args.out, case["name"]))
        print(f"[ok] {case['name']}: seed {result['seed']} (attempt {result['attempts']}), "
              f"min_top2_margin {result['margin']:.4f}, {size / 1e6:.2f} MB, {time.time() - start:.1f} s")
        for key, value in result["checks"].items():
            if key not in ("stored_tensor_names", "config_as_saved_by_transformers"):
                print(f"    {key}: {short(value)}")
    print(f"total size {dir_size(args.out) / 1e6:.2f} MB")
    if failed:
        print(f"FAILED: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
