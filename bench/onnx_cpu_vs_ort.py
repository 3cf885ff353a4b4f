# Kiln against ONNX Runtime on this machine's CPU, same inputs and thread counts: a random-weight
# BERT-base (transformers.BertModel(BertConfig()), exported here by torch.onnx.export at opset 17
# with dynamic batch and sequence axes) at batch 1 and 8, sequence 128, and PaddleOCR v4
# recognition (REC, a path to ch_PP-OCRv4_rec_infer.onnx) at batch 1 and 8, each at 1, 2 and 8
# threads. Needs torch, transformers, onnxruntime and numpy (the GPU machine has them).
#   KILN=build/release/kiln REC=path/to/ch_PP-OCRv4_rec_infer.onnx OUT=dir [WORK=dir] [KILN_BASE=other/kiln] python3 bench/onnx_cpu_vs_ort.py
# writes OUT/onnx_cpu_vs_ort.json: per model, batch and thread count, both runtimes' mean and
# best milliseconds and the largest difference between their outputs; with KILN_BASE, a second
# kiln (an earlier build, say) is timed in the same loop, side by side (kiln_base_* fields);
# THREADS=1,8 picks the thread counts (default 1,2,8); REPS the timed runs a case (default 20).
import json, os, re, subprocess, time, platform
import numpy as np, torch, transformers, onnxruntime as ort
THREADS = [int(t) for t in os.environ.get("THREADS", "1,2,8").split(",")]
OUT = os.environ["OUT"]; KILN = os.environ["KILN"]; BASE = os.environ.get("KILN_BASE"); WORK = os.environ.get("WORK", "build/kb"); os.makedirs(WORK, exist_ok=True)
torch.manual_seed(0)
cfg = transformers.BertConfig(attn_implementation="eager")
class Bert(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.m = transformers.BertModel(cfg, add_pooling_layer=False).eval()
    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
rng = np.random.default_rng(0)
ids = rng.integers(0, cfg.vocab_size, (8, 128)).astype(np.int64); mask = np.ones((8, 128), np.int64)
bert = f"{WORK}/bert_base.onnx"
t0 = time.time()
with torch.no_grad():
    torch.onnx.export(Bert().eval(), (torch.from_numpy(ids[:1]), torch.from_numpy(mask[:1])), bert, dynamo=False, opset_version=17,
                      input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"},
                                    "last_hidden_state": {0: "batch", 1: "sequence"}})
print("exported", time.time() - t0, flush=True)
rec = os.environ.get("REC")  # without it, BERT alone
x = rng.uniform(-1, 1, (8, 3, 48, 320)).astype(np.float32)
cases = {"bert": (bert, lambda b: {"input_ids": ids[:b], "attention_mask": mask[:b]}, "input_ids:1x1,1x128,8x512 --profile attention_mask:1x1,1x128,8x512"),
         "rec": (rec, lambda b: {"x": x[:b]}, "x:1x3x48x32,1x3x48x320,8x3x48x1280")}
res = {"cpu": platform.processor(), "ort": ort.__version__, "torch": torch.__version__}
with open("/proc/cpuinfo") as f:
    res["cpu_model"] = next(l.split(":")[1].strip() for l in f if l.startswith("model name"))
if not rec: del cases["rec"]
for name, (path, feed, profile) in cases.items():
    eng = f"{WORK}/{name}.kiln"; base_eng = f"{WORK}/{name}_base.kiln"
    t0 = time.time(); b = subprocess.run(f"{KILN} build {path} -o {eng} --profile {profile}", shell=True, capture_output=True, text=True)
    res[f"{name}_kiln_build_s"] = time.time() - t0; print(b.stderr[-500:], flush=True)
    if BASE: subprocess.run(f"{BASE} build {path} -o {base_eng} --profile {profile}", shell=True, capture_output=True, text=True)
    def kiln_eval(binary, engine, args, od, reps, T):
        r = subprocess.run([binary, "eval", engine, *args, "--outputs-dir", od, "--repeat", str(reps), "--threads", str(T)], capture_output=True, text=True)
        m = re.search(r"mean ([\d.]+) ms, best ([\d.]+) ms", r.stdout + r.stderr)
        if not m: print(r.stdout[-800:], r.stderr[-800:], flush=True)
        return (float(m.group(1)), float(m.group(2))) if m else (None, None)
    for B in (1, 8):
        args = []
        for k, v in feed(B).items():
            np.save(f"{WORK}/{name}_{k}_{B}.npy", v); args += ["--input", f"{k}={WORK}/{name}_{k}_{B}.npy"]
        for T in THREADS:
            so = ort.SessionOptions(); so.intra_op_num_threads = T; so.inter_op_num_threads = 1
            s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
            for _ in range(2): ref = s.run(None, feed(B))[0]
            ts = []; reps = int(os.environ.get("REPS", "20"))
            for _ in range(reps):
                t0 = time.perf_counter(); s.run(None, feed(B)); ts.append((time.perf_counter() - t0) * 1e3)
            key = f"{name}_b{B}_t{T}"; od = f"{WORK}/o_{key}"
            mean, best = kiln_eval(KILN, eng, args, od, reps, T)
            got = np.load(sorted(os.path.join(od, f) for f in os.listdir(od))[0])
            res[key] = {"ort_mean_ms": float(np.mean(ts)), "ort_best_ms": float(np.min(ts)), "ort_median_ms": float(np.median(ts)),
                        "kiln_mean_ms": mean, "kiln_best_ms": best, "max_abs_diff": float(np.abs(got - ref).max())}
            if BASE:
                res[key]["kiln_base_mean_ms"], res[key]["kiln_base_best_ms"] = kiln_eval(BASE, base_eng, args, od + "_base", reps, T)
            print(key, res[key], flush=True)
json.dump(res, open(f"{OUT}/onnx_cpu_vs_ort.json", "w"), indent=1)
