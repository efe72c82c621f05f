"""Python side of scripts/gpu_check.sh (stdlib only, except `model` and `trl`, which need the
target's torch + transformers). Subcommands:

  model SHAPE OUTDIR FIXTURE    random-init model of SHAPE (qwen2.5-0.5b or tiny) with the fixture
                                tokenizer, plus equal-length prompts (data.jsonl) and meta.json
  measure OUTJSON MODE -- CMD   run CMD, poll peak memory (MODE gpu: nvidia-smi memory.used of every
                                GPU; MODE rss: resident set of the process tree), write wall time
  trl ARGS...                   scripts/bench_trl.py's GRPOTrainer run, on CUDA with --device cuda
                                (use_cpu=False) and bf16 autocast with --bf16, CUDA-synchronised steps
  wheels VENV_TRL               names==versions TRL needs beyond torch + transformers (their closure)
  install WHEELDIR SITE         unzip the wheels whose distribution the running Python lacks
  report WORKDIR OUTDIR         every figure from the run's files: results.json + summary.txt
"""

import json
import math
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

# Dense (no sparsity) BF16 tensor-core peak, TFLOP/s, by nvidia-smi name. Source: NVIDIA's
# datasheets, which print the sparse figure (2x): H100 SXM 1,979 -> 989 (PCIe 1,513 -> 756),
# H200 SXM 1,979 -> 989, A100 624 -> 312. Any other name: "unknown" (set PEAK_TFLOPS to supply one).
PEAK_BF16_TFLOPS = [
    (re.compile(r"H100.*PCIe", re.I), 756.0),
    (re.compile(r"H100(?!.*NVL)", re.I), 989.0),
    (re.compile(r"(?<!G)H200(?!.*NVL)", re.I), 989.0),
    (re.compile(r"A100", re.I), 312.0),
]
PEAK_SOURCE = "NVIDIA datasheets (dense BF16 = half the sparse figure): H100 SXM/H200 989, H100 PCIe 756, A100 312"


def peak_for(gpu_name):
    if os.environ.get("PEAK_TFLOPS"):
        return float(os.environ["PEAK_TFLOPS"]), "PEAK_TFLOPS environment variable"
    for pat, tf in PEAK_BF16_TFLOPS:
        if gpu_name and pat.search(gpu_name):
            return tf, PEAK_SOURCE
    return None, f"unknown: no peak known for {gpu_name or 'this device'} (set PEAK_TFLOPS)"


SHAPES = {
    # Qwen2.5-0.5B's config.json (architecture only; weights are random).
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                         rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
    # A dry-run shape; its vocabulary is larger than the fixture tokenizer's 512, as the real one is.
    "tiny": dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                 rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True),
}


def cmd_model(shape, out, fixture):
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    cfg = Qwen2Config(**SHAPES[shape], bos_token_id=1, eos_token_id=2, pad_token_id=0,
                      use_sliding_window=False)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(out)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(fixture) / f).exists():
            shutil.copy(Path(fixture) / f, out / f)
    params = sum(p.numel() for p in model.parameters())  # the tied head counted once
    tok = AutoTokenizer.from_pretrained(out)
    # Distinct prompts of one token length (chat template included), so every step trains
    # the same number of tokens and tokens/s follows from the metrics exactly.
    by_len = {}
    for a in range(10, 99):
        for b in (3, 17, 42, 76):
            p = f"What is {a}+{b}?"
            text = tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                           tokenize=False)
            n = len(tok(text, add_special_tokens=False)["input_ids"])
            by_len.setdefault(n, []).append((p, a + b))
    n, rows = max(by_len.items(), key=lambda kv: len(kv[1]))
    with open(out / "data.jsonl", "w") as f:
        for p, ans in rows:
            f.write(json.dumps({"prompt": p, "answer": str(ans)}) + "\n")
    (out / "meta.json").write_text(json.dumps({"shape": shape, "params": params, "prompt_tokens": n,
                                               "rows": len(rows), "config": SHAPES[shape]}) + "\n")
    print(f"model {shape}: {params / 1e6:.1f}M parameters, prompts of {n} tokens ({len(rows)} rows) in {out}",
          file=sys.stderr)


def cmd_measure(out, mode, cmd):
    peaks, base = {}, {}
    stop = threading.Event()

    def gpu_poll():
        q = ["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"]
        for line in subprocess.run(q, capture_output=True, text=True).stdout.splitlines():
            i, m = (x.strip() for x in line.split(","))
            base[i] = peaks[i] = float(m)
        p = subprocess.Popen(q + ["-lms", "100"], stdout=subprocess.PIPE, text=True)
        while not stop.is_set():
            line = p.stdout.readline()
            if not line:
                break
            try:
                i, m = (x.strip() for x in line.split(","))
                peaks[i] = max(peaks.get(i, 0.0), float(m))
            except ValueError:
                pass
        p.kill()

    def tree_rss(pid):
        kids = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    st = (d / "stat").read_text().rsplit(")", 1)[1].split()
                    kids.setdefault(int(st[1]), []).append(int(d.name))
                except OSError:
                    pass
        total, todo = 0, [pid]
        while todo:
            q = todo.pop()
            todo += kids.get(q, [])
            try:
                total += int((Path(f"/proc/{q}/statm")).read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            except OSError:
                pass
        return total / 2**20

    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd)
    if mode == "gpu":
        th = threading.Thread(target=gpu_poll, daemon=True)
        th.start()
    while proc.poll() is None:
        if mode == "rss":
            peaks["rss"] = max(peaks.get("rss", 0.0), tree_rss(proc.pid))
        time.sleep(0.1)
    wall = time.perf_counter() - t0
    stop.set()
    res = {"rc": proc.returncode, "wall_s": wall, "mode": mode,
           "peak_mib": peaks, "baseline_mib": base}
    Path(out).write_text(json.dumps(res) + "\n")
    sys.exit(proc.returncode)


def cmd_trl(argv):
    """bench_trl.py's main with device and precision switched, steps synchronised on CUDA."""
    device = "cpu"
    bf16 = False
    if "--device" in argv:
        i = argv.index("--device")
        device = argv[i + 1]
        del argv[i:i + 2]
    if "--bf16" in argv:
        argv.remove("--bf16")
        bf16 = True
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import bench_trl
    import torch
    import trl
    from transformers import TrainerCallback

    real_cfg, real_trainer = trl.GRPOConfig, trl.GRPOTrainer

    def config(**kw):
        kw.update(use_cpu=(device == "cpu"), bf16=bf16)
        return real_cfg(**kw)

    class Sync(TrainerCallback):  # added before bench_trl's StepTimer, so it runs first
        def on_step_begin(self, *a, **k):
            if device != "cpu":
                torch.cuda.synchronize()

        on_step_end = on_step_begin

    class Trainer(real_trainer):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.add_callback(Sync())

    trl.GRPOConfig, trl.GRPOTrainer = config, Trainer
    sys.argv = ["bench_trl.py"] + argv
    bench_trl.main()


def _norm(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def cmd_wheels(venv_python_unused=None):
    """Run inside .venv-trl: the distributions trl needs that torch and transformers do not."""
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement

    env = default_environment()

    def closure(roots):
        seen, todo = {}, list(roots)
        while todo:
            n = _norm(todo.pop())
            if n in seen:
                continue
            try:
                d = metadata.distribution(n)
            except metadata.PackageNotFoundError:
                continue
            seen[n] = d.version
            for r in d.requires or []:
                req = Requirement(r)
                if req.marker is None or req.marker.evaluate({**env, "extra": ""}):
                    todo.append(req.name)
        return seen

    have = closure(["torch", "transformers"])
    need = closure(["trl"])
    for n, v in sorted(need.items()):
        if n not in have:
            print(f"{n}=={v}")


def cmd_install(wheeldir, site):
    """Unzips each wheel whose distribution is not importable here (no pip needed)."""
    import zipfile
    from importlib import metadata

    site = Path(site)
    site.mkdir(parents=True, exist_ok=True)
    for w in sorted(Path(wheeldir).glob("*.whl")):
        dist = w.name.split("-")[0]
        try:
            metadata.distribution(dist)
            print(f"  {dist}: present, not installed from {w.name}", file=sys.stderr)
            continue
        except metadata.PackageNotFoundError:
            pass
        with zipfile.ZipFile(w) as z:
            z.extractall(site)
        print(f"  {dist}: from {w.name}", file=sys.stderr)


def lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines() if x.strip()]


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def cmd_report(work, out):
    work, out = Path(work), Path(out)
    s = json.loads((work / "settings.json").read_text())
    res = {"settings": s, "stages": {}}
    peak, peak_src = peak_for(s.get("gpu_name"))
    res["peak_bf16_tflops"] = peak if peak is not None else "unknown"
    res["peak_source"] = peak_src

    # Parity: log-probs per fixture, then one GRPO step.
    par = {"logprobs": {}}
    for m in s["parity_models"]:
        ref = [r["token_logprobs"] for r in lines(work / f"parity/{m}-cpu-f32.jsonl")]
        row = {"tokens": sum(len(r) for r in ref)}
        for tag in ("f32", "bf16"):
            dev = [r["token_logprobs"] for r in lines(work / f"parity/{m}-dev-{tag}.jsonl")]
            row[f"max_abs_{tag}"] = max(abs(a - b) for x, y in zip(ref, dev) for a, b in zip(x, y))
        par["logprobs"][m] = row
    par["logprobs_max_abs_f32"] = max(r["max_abs_f32"] for r in par["logprobs"].values())
    par["logprobs_max_abs_bf16"] = max(r["max_abs_bf16"] for r in par["logprobs"].values())
    keys = ["loss", "pg_loss", "grad_norm", "entropy", "reward/mean", "response_length/mean"]
    c, d = lines(work / "parity/grpo-cpu.jsonl")[0], lines(work / "parity/grpo-dev.jsonl")[0]
    par["grpo_step"] = {"cpu": {k: c[k] for k in keys}, "device": {k: d[k] for k in keys},
                        "abs_diff": {k: abs(c[k] - d[k]) for k in keys},
                        "grad_norm_rel_diff": abs(c["grad_norm"] - d["grad_norm"]) / max(abs(c["grad_norm"]), 1e-30),
                        "same_samples": c["reward/mean"] == d["reward/mean"]
                        and c["response_length/mean"] == d["response_length/mean"]}
    res["stages"]["parity"] = {"status": "ok", **par}

    # GRPO steps: reinforge and TRL rounds, medians over post-warm-up steps.
    meta = json.loads((work / "model/meta.json").read_text())
    n_params, completions = meta["params"], s["prompts"] * s["generations"]

    def side(rows, mems):
        gen_tok = [completions * r["len"] for r in rows]
        upd_tok = [completions * (meta["prompt_tokens"] + r["len"]) for r in rows]
        x = {
            "steps": len(rows),
            "median_step_s": statistics.median(r["step_s"] for r in rows),
            "median_gen_s": statistics.median(r["gen_s"] for r in rows),
            "median_update_s": statistics.median(r["update_s"] for r in rows),
            "mean_completion_tokens": statistics.fmean(r["len"] for r in rows),
            "gen_tokens_per_s": statistics.median(t / r["gen_s"] for t, r in zip(gen_tok, rows)),
            "update_tokens_per_s": statistics.median(t / r["update_s"] for t, r in zip(upd_tok, rows)),
            "peak_mem_mib": max(mems),
            "peak_mem_source": "nvidia-smi memory.used minus the value before the run (largest GPU)"
            if s["device"] != "cpu" else "resident set of the process tree (CPU dry run)",
        }
        if peak is not None:
            x["mfu_update"] = statistics.median(6 * n_params * t / r["update_s"] / (peak * 1e12)
                                                for t, r in zip(upd_tok, rows))
            x["mfu_step"] = statistics.median((6 * n_params * u + 2 * n_params * g) / r["step_s"] / (peak * 1e12)
                                              for u, g, r in zip(upd_tok, gen_tok, rows))
        else:
            x["mfu_update"] = x["mfu_step"] = "unknown"
        return x

    def mem(path):
        m = json.loads(Path(path).read_text())
        if m["mode"] == "rss":
            return m["peak_mib"]["rss"]
        return max(m["peak_mib"][i] - m["baseline_mib"].get(i, 0.0) for i in m["peak_mib"])

    rf, rf_mem, trl, trl_mem = [], [], [], []
    for r in range(1, s["rounds"] + 1):
        for m in lines(work / f"grpo/reinforge-r{r}.jsonl"):
            if m["step"] >= s["warmup"]:
                rf.append({"step_s": m["timing/step_s"], "gen_s": m["timing/sample_s"],
                           "update_s": m["timing/update_s"], "len": m["response_length/mean"]})
        rf_mem.append(mem(work / f"grpo/reinforge-r{r}.mem.json"))
        if s["trl_python"]:
            for m in lines(work / f"grpo/trl-r{r}.jsonl"):
                if "summary" not in m and m["step"] >= s["warmup"]:
                    trl.append({"step_s": m["step_s"], "gen_s": m["gen_s"], "update_s": m["update_s"],
                                "len": m["completion_tokens_mean"]})
            trl_mem.append(mem(work / f"grpo/trl-r{r}.mem.json"))
    res["stages"]["grpo"] = {"status": "ok", "model": meta, "reinforge": side(rf, rf_mem)}
    if s["trl_python"]:
        t = side(trl, trl_mem)
        res["stages"]["trl"] = {"status": "ok", "python": s["trl_python"], "datasets": s["trl_datasets"], "trl": t,
                                "ratio_step_reinforge_over_trl":
                                    res["stages"]["grpo"]["reinforge"]["median_step_s"] / t["median_step_s"]}
    else:
        res["stages"]["trl"] = {"status": "skipped", "reason": s["trl_reason"]}

    # Two processes.
    if s["dp"]:
        one, two = lines(work / "dp/one.jsonl"), lines(work / "dp/two.jsonl")
        res["stages"]["dp2"] = {
            "status": "ok", "backend": s["dp_backend"], "note": s["dp_note"], "steps": len(two),
            "max_abs_diff": {k: max(abs(a[k] - b[k]) for a, b in zip(one, two)) for k in ("loss", "grad_norm")},
            "median_step_s_1proc": statistics.median(m["timing/step_s"] for m in one),
            "median_step_s_2proc": statistics.median(m["timing/step_s"] for m in two),
        }
    else:
        res["stages"]["dp2"] = {"status": "skipped", "reason": s["dp_note"]}
    res["stage_wall_s"] = json.loads((work / "stage_wall.json").read_text())
    (out / "results.json").write_text(json.dumps(res, indent=1) + "\n")

    g = res["stages"]["grpo"]["reinforge"]
    L = [f"gpu_check on {s['device']} ({s.get('gpu_name') or 'no GPU'}), shape {s['shape']}"
         f" ({meta['params'] / 1e6:.1f}M params), bf16={s['bf16']}, {s['started_utc']}",
         f"parity (cpu f32 vs {s['device']}): log-prob max abs diff f32 {par['logprobs_max_abs_f32']:.3g}, "
         f"bf16 {par['logprobs_max_abs_bf16']:.3g} over {len(par['logprobs'])} fixtures; one GRPO step: "
         + ", ".join(f"{k} {par['grpo_step']['cpu'][k]:.6g}/{par['grpo_step']['device'][k]:.6g}"
                     for k in ("loss", "grad_norm"))
         + f" (same samples: {par['grpo_step']['same_samples']})",
         f"GRPO steps: {s['prompts']}x{s['generations']} completions, <= {s['max_len']} tokens, prompts of "
         f"{meta['prompt_tokens']} tokens; medians over {s['rounds']} round(s) x {s['steps']} steps after {s['warmup']} warm-up",
         f"{'':12} {'step s':>8} {'gen s':>8} {'upd s':>8} {'gen tok/s':>10} {'upd tok/s':>10} {'MFU upd':>8} {'MFU step':>8} {'peak MiB':>9}"]

    def fmt(v, f):
        return format(v, f) if finite(v) else str(v)

    for name, x in [("reinforge", g)] + ([("TRL", res["stages"]["trl"]["trl"])] if s["trl_python"] else []):
        L.append(f"{name:12} {x['median_step_s']:8.3f} {x['median_gen_s']:8.3f} {x['median_update_s']:8.3f} "
                 f"{x['gen_tokens_per_s']:10.1f} {x['update_tokens_per_s']:10.1f} {fmt(x['mfu_update'], '8.3f'):>8} "
                 f"{fmt(x['mfu_step'], '8.3f'):>8} {x['peak_mem_mib']:9.0f}")
    L.append(f"MFU peak: {res['peak_bf16_tflops']} TFLOP/s ({peak_src})")
    tr = res["stages"]["trl"]
    L.append(f"ratio reinforge / TRL (median step): {tr['ratio_step_reinforge_over_trl']:.3f}"
             if tr["status"] == "ok" else f"TRL: skipped: {tr['reason']}")
    dp = res["stages"]["dp2"]
    L.append(f"2 processes ({dp['backend']}): max |loss| diff {dp['max_abs_diff']['loss']:.3g}, grad_norm "
             f"{dp['max_abs_diff']['grad_norm']:.3g}; median step {dp['median_step_s_1proc']:.3f}s (1) vs "
             f"{dp['median_step_s_2proc']:.3f}s (2). {dp['note']}" if dp["status"] == "ok" else f"2 processes: skipped: {dp['reason']}")
    L.append("stage seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in res["stage_wall_s"].items()))
    (out / "summary.txt").write_text("\n".join(L) + "\n")
    print("\n".join(L))


if __name__ == "__main__":
    a = sys.argv[1:]
    if not a:
        sys.exit(__doc__)
    c, rest = a[0], a[1:]
    if c == "model":
        cmd_model(*rest)
    elif c == "measure":
        i = rest.index("--")
        cmd_measure(rest[0], rest[1], rest[i + 1:])
    elif c == "trl":
        cmd_trl(rest)
    elif c == "wheels":
        cmd_wheels()
    elif c == "install":
        cmd_install(*rest)
    elif c == "report":
        cmd_report(*rest)
    else:
        sys.exit(f"unknown subcommand {c}\n{__doc__}")
