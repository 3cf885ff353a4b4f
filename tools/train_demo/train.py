#!/usr/bin/env python3
"""Trains the bundled demo model: a small LlamaForCausalLM on public-domain English.

Reads the cleaned books (prepare_data.py) and the tokenizer (train_tokenizer.py), trains with
bf16 autocast, AdamW, linear warm-up then cosine decay, residual dropout and weight decay, keeps
the weights with the lowest held-out loss, and writes a Hugging Face checkpoint into --out-dir:
  config.json, model.safetensors (bf16, tied embeddings), generation_config.json,
  tokenizer.json, tokenizer_config.json, training_log.json, loss_curve.png

Every training window is <s> followed by 511 tokens cut at a random offset from the token stream
(books joined with </s>), so the model sees exactly what inference sees: <s> then text. The
held-out loss is measured the same way on heldout.txt: the whole file tokenized, cut into
consecutive chunks of 511 tokens, each chunk scored after its own <s>. After saving, the
checkpoint is reloaded with transformers in float32, its held-out perplexity is measured again
and a few greedy and sampled continuations are written into training_log.json.

Needs torch, transformers (5.x), tokenizers, safetensors, matplotlib and a CUDA GPU.
"""
import argparse
import glob
import inspect
import json
import math
import os
import shutil
import time

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

PROMPTS = ["It is a truth universally", "In the beginning", "The old man", "Sherlock Holmes took"]


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train-dir", required=True, help="folder of training .txt files")
    ap.add_argument("--heldout", required=True, help="held-out text file (models/demo/heldout.txt)")
    ap.add_argument("--tokenizer-dir", required=True, help="folder with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--hidden", type=int, default=384)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--seq", type=int, default=512, help="window length in tokens, <s> included")
    ap.add_argument("--batch", type=int, default=64, help="windows per step")
    ap.add_argument("--epochs", type=float, default=20.0, help="training tokens / training-set tokens")
    ap.add_argument("--max-seconds", type=float, default=330.0, help="time limit; the schedule follows whichever limit is nearer")
    ap.add_argument("--max-steps", type=int, default=0, help="if > 0, caps the step count (smoke tests)")
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--dropout", type=float, default=0.1, help="dropout on each attention and MLP output")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--gen-tokens", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1234)
    return ap.parse_args()


def load_tokens(tok, train_dir, heldout_path, eos_id):
    files = sorted(glob.glob(os.path.join(train_dir, "*.txt")))
    texts = [open(f, encoding="utf-8").read() for f in files]
    stream = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        stream.extend(enc.ids)
        stream.append(eos_id)
    heldout_text = open(heldout_path, encoding="utf-8").read()
    heldout = tok.encode(heldout_text, add_special_tokens=False).ids
    chars = sum(len(t) for t in texts)
    return (torch.tensor(stream, dtype=torch.int32), torch.tensor(heldout, dtype=torch.int32),
            {"train_files": [os.path.basename(f) for f in files], "train_chars": chars,
             "train_tokens": len(stream), "heldout_chars": len(heldout_text), "heldout_tokens": len(heldout),
             "chars_per_token": round(chars / len(stream), 3)})


def heldout_windows(heldout, bos_id, seq):
    """[n, seq] windows (<s> + seq-1 tokens) and a [n, seq-1] mask of real tokens (the last is partial)."""
    body = seq - 1
    n = math.ceil(len(heldout) / body)
    x = torch.full((n, seq), bos_id, dtype=torch.long)
    mask = torch.zeros((n, seq - 1), dtype=torch.bool)
    for i in range(n):
        part = heldout[i * body:(i + 1) * body].long()
        x[i, 1:1 + len(part)] = part
        mask[i, :len(part)] = True
    return x, mask


@torch.no_grad()
def mean_nll(model, x, mask, batch, device, autocast):
    """Mean next-token negative log-likelihood over the masked target positions."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, x.shape[0], batch):
        xb, mb = x[i:i + batch].to(device), mask[i:i + batch].to(device)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=xb, use_cache=False).logits[:, :-1]
        nll = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), xb[:, 1:].reshape(-1), reduction="none")
        total += (nll * mb.reshape(-1)).sum().item()
        count += mb.sum().item()
    model.train(was_training)
    return total / count


def add_residual_dropout(model, p):
    """Dropout on every attention and MLP output before it joins the residual stream (training only)."""
    def hook(module, _inputs, output):
        if not module.training or p == 0.0:
            return output
        if isinstance(output, tuple):
            return (F.dropout(output[0], p, True),) + tuple(output[1:])
        return F.dropout(output, p, True)
    handles = []
    for layer in model.model.layers:
        handles.append(layer.self_attn.register_forward_hook(hook))
        handles.append(layer.mlp.register_forward_hook(hook))
    return handles


def make_config(args, bos_id, eos_id, vocab):
    from transformers import LlamaConfig
    kw = dict(vocab_size=vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
              num_hidden_layers=args.layers, num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
              head_dim=args.hidden // args.heads, max_position_embeddings=args.seq, rms_norm_eps=1e-5,
              tie_word_embeddings=True, bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=None,
              attention_dropout=0.0, attention_bias=False, mlp_bias=False, hidden_act="silu",
              initializer_range=0.02)
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    else:
        kw["rope_theta"] = 10000.0
    return LlamaConfig(**kw)


def plot_curve(history, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 5), dpi=110)
    tokens = [h["tokens"] / 1e6 for h in history]
    ax.plot(tokens, [h["train_loss_running"] for h in history], label="train (running mean, dropout on)", alpha=0.6)
    ax.plot(tokens, [h["train_loss"] for h in history], label="train (eval mode, 64 fixed windows)")
    ax.plot(tokens, [h["val_loss"] for h in history], label="held-out")
    best = min(history, key=lambda h: h["val_loss"])
    ax.axvline(best["tokens"] / 1e6, color="gray", linestyle=":", label=f"kept: {best['val_loss']:.3f} at step {best['step']}")
    ax.set_xlabel("tokens seen (millions)")
    ax.set_ylabel("cross-entropy (nats / token)")
    bottom = min(min(h["train_loss"] for h in history), best["val_loss"]) - 0.2
    ax.set_ylim(bottom, max(bottom + 1.0, min(bottom + 4.0, max(h["val_loss"] for h in history) + 0.2)))
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def post_check(out_dir, tok, heldout, bos_id, seq, device, gen_tokens):
    """Reloads the saved checkpoint with transformers and measures / samples it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32).to(device)
    model.eval()
    x, mask = heldout_windows(heldout, bos_id, seq)
    nll = mean_nll(model, x, mask, 32, device, autocast=False)
    result = {"heldout_nll_fp32_reloaded": nll, "heldout_ppl_fp32_reloaded": math.exp(nll),
              "heldout_eval": f"heldout.txt tokenized whole without special tokens, {x.shape[0]} chunks of <= {seq - 1} "
                              "tokens, each scored after its own <s> (no context carried between chunks)"}
    try:
        hf_tok = AutoTokenizer.from_pretrained(out_dir)
        text = "It is a truth universally acknowledged."
        result["auto_tokenizer"] = {"class": type(hf_tok).__name__, "ids": hf_tok(text)["input_ids"],
                                    "matches_tokenizers_with_bos": hf_tok(text)["input_ids"] == tok.encode(text).ids}
    except Exception as e:  # recorded, not fatal: the checkpoint itself is already saved
        result["auto_tokenizer"] = {"error": repr(e)}
    samples = []
    for prompt in PROMPTS:
        ids = torch.tensor([tok.encode(prompt).ids], device=device)
        entry = {"prompt": prompt, "prompt_ids": ids[0].tolist()}
        with torch.no_grad():
            greedy = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=gen_tokens,
                                    do_sample=False, pad_token_id=tok.token_to_id("</s>"))
            entry["greedy"] = tok.decode(greedy[0, ids.shape[1]:].tolist())
            torch.manual_seed(0)
            sampled = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=gen_tokens,
                                     do_sample=True, temperature=0.8, top_k=40, top_p=0.95,
                                     pad_token_id=tok.token_to_id("</s>"))
            entry["sampled_t0.8_k40_p0.95_seed0"] = tok.decode(sampled[0, ids.shape[1]:].tolist())
        samples.append(entry)
    result["samples"] = samples
    return result


def main():
    args = parse_args()
    t_start = time.time()
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    import transformers
    from transformers import GenerationConfig, LlamaForCausalLM

    tok = Tokenizer.from_file(os.path.join(args.tokenizer_dir, "tokenizer.json"))
    bos_id, eos_id, vocab = tok.token_to_id("<s>"), tok.token_to_id("</s>"), tok.get_vocab_size()
    stream, heldout, data_stats = load_tokens(tok, args.train_dir, args.heldout, eos_id)
    stream_gpu = stream.to(device).long()
    val_x, val_mask = heldout_windows(heldout, bos_id, args.seq)
    gen = torch.Generator().manual_seed(args.seed + 1)
    offs = torch.randint(0, len(stream) - args.seq, (64,), generator=gen)
    tr_x = torch.stack([torch.cat([torch.tensor([bos_id]), stream[o:o + args.seq - 1].long()]) for o in offs.tolist()])
    tr_mask = torch.ones((64, args.seq - 1), dtype=torch.bool)

    config = make_config(args, bos_id, eos_id, vocab)
    model = LlamaForCausalLM(config).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    handles = add_residual_dropout(model, args.dropout)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    tokens_per_step = args.batch * (args.seq - 1)
    total_steps = max(1, int(args.epochs * len(stream) / tokens_per_step))
    if args.max_steps > 0:
        total_steps = min(total_steps, args.max_steps)
    print(f"[{os.path.basename(args.out_dir)}] params {n_params / 1e6:.2f}M, train tokens {len(stream)}, "
          f"held-out tokens {len(heldout)}, planned steps {total_steps}", flush=True)

    arange = torch.arange(args.seq - 1, device=device)
    bos_col = torch.full((args.batch, 1), bos_id, dtype=torch.long, device=device)
    history, best = [], {"val_loss": float("inf")}
    running, running_n, step, tokens_seen = 0.0, 0, 0, 0
    model.train()
    t_train = time.time()
    stop_reason = "steps"
    while True:
        elapsed = time.time() - t_train
        progress = max(step / total_steps, elapsed / args.max_seconds)
        done = progress >= 1.0
        if done and elapsed / args.max_seconds > step / total_steps:
            stop_reason = "time"
        if step > 0 and (step % args.eval_every == 0 or done):
            val = mean_nll(model, val_x, val_mask, 64, device, autocast=True)
            trn = mean_nll(model, tr_x, tr_mask, 64, device, autocast=True)
            h = {"step": step, "tokens": tokens_seen, "seconds": round(time.time() - t_train, 1),
                 "lr": opt.param_groups[0]["lr"], "train_loss_running": running / max(running_n, 1),
                 "train_loss": trn, "val_loss": val}
            history.append(h)
            running, running_n = 0.0, 0
            if val < best["val_loss"]:
                best = {"val_loss": val, "step": step, "tokens": tokens_seen,
                        "state": {k: v.detach().clone() for k, v in model.state_dict().items()}}
            print(f"[{os.path.basename(args.out_dir)}] step {step} tok {tokens_seen / 1e6:.1f}M "
                  f"lr {h['lr']:.2e} train {h['train_loss_running']:.3f}/{trn:.3f} val {val:.3f} "
                  f"{tokens_seen / max(h['seconds'], 1e-9) / 1e3:.0f}k tok/s", flush=True)
        if done:
            break
        lr = args.lr * min(1.0, (step + 1) / args.warmup) * (
            args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        offs = torch.randint(0, len(stream) - args.seq, (args.batch, 1), device=device)
        x = torch.cat([bos_col, stream_gpu[offs + arange]], dim=1)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x, use_cache=False).logits[:, :-1]
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        running += loss.item() if step % 10 == 0 else 0.0
        running_n += 1 if step % 10 == 0 else 0
        step += 1
        tokens_seen += tokens_per_step
    train_seconds = time.time() - t_train
    final_val = history[-1]["val_loss"]

    for hnd in handles:
        hnd.remove()
    model.load_state_dict(best["state"])
    model.to(torch.bfloat16)
    os.makedirs(args.out_dir, exist_ok=True)
    model.save_pretrained(args.out_dir)
    GenerationConfig(bos_token_id=bos_id, eos_token_id=eos_id, do_sample=True, temperature=0.8, top_k=40,
                     top_p=0.95, max_length=args.seq).save_pretrained(args.out_dir)
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        shutil.copy(os.path.join(args.tokenizer_dir, name), os.path.join(args.out_dir, name))

    post = post_check(args.out_dir, tok, heldout, bos_id, args.seq, device, args.gen_tokens)
    log = {
        "model": {"architecture": "LlamaForCausalLM", "parameters": n_params, "vocab_size": vocab,
                  "hidden_size": args.hidden, "intermediate_size": args.intermediate, "layers": args.layers,
                  "heads": args.heads, "kv_heads": args.kv_heads, "head_dim": args.hidden // args.heads,
                  "max_position_embeddings": args.seq, "rope_theta": 10000.0, "tied_embeddings": True,
                  "saved_dtype": "bfloat16"},
        "hyperparameters": {k: v for k, v in vars(args).items() if k not in ("train_dir", "heldout", "tokenizer_dir", "out_dir")},
        "data": data_stats,
        "schedule": {"tokens_per_step": tokens_per_step, "planned_steps": total_steps, "steps": step,
                     "tokens_seen": tokens_seen, "epochs_seen": tokens_seen / len(stream), "stopped_by": stop_reason,
                     "optimizer": "AdamW(betas=(0.9, 0.95), eps=1e-8, fused), weight decay on matrices only, grad clip 1.0",
                     "lr": f"linear warm-up over {args.warmup} steps, cosine from {args.lr} to {args.lr * args.min_lr_ratio}"},
        "kept_checkpoint": {"step": best["step"], "tokens": best["tokens"], "val_loss": best["val_loss"],
                            "final_step_val_loss": final_val},
        "final": {"train_loss_eval_mode": history[-1]["train_loss"], "val_loss_at_kept_step": best["val_loss"],
                  **{k: v for k, v in post.items() if k != "samples"}},
        "samples": post["samples"],
        "device": torch.cuda.get_device_name(0),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "tokenizers": __import__("tokenizers").__version__},
        "train_seconds": round(train_seconds, 1),
        "tokens_per_second": round(tokens_seen / train_seconds),
        "total_seconds": round(time.time() - t_start, 1),
        "history": history,
    }
    with open(os.path.join(args.out_dir, "training_log.json"), "w") as f:
        json.dump(log, f, indent=1)
    plot_curve(history, os.path.join(args.out_dir, "loss_curve.png"),
               f"Kiln demo Llama, {n_params / 1e6:.1f}M params, {tokens_seen / 1e6:.0f}M tokens "
               f"({tokens_seen / len(stream):.1f} epochs)")
    print(f"[{os.path.basename(args.out_dir)}] done: kept step {best['step']} val {best['val_loss']:.4f} "
          f"(final {final_val:.4f}), reloaded fp32 held-out ppl {post['heldout_ppl_fp32_reloaded']:.2f}, "
          f"{train_seconds:.0f}s training", flush=True)
    for s in post["samples"][:3]:
        print(f"  {s['prompt']!r} -> greedy: {s['greedy'][:160]!r}", flush=True)


if __name__ == "__main__":
    main()
