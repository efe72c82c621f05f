"""Helpers of scripts/gpu_check.sh (run with the GPU machine's own Python: torch, transformers).

  make-model OUT SHAPE TOKENIZER_DIR   random-init Qwen2 of SHAPE (qwen2.5-0.5b | tiny), float32,
                                       with the tokenizer files of TOKENIZER_DIR; prints params
  logprob-diff A.jsonl B.jsonl         max |difference| of `reinforge score` token log-probs
  step-diff A/metrics.jsonl B/...      |difference| of the first step's loss and grad_norm
  grpo-figures METRICS PARAMS ROWS PEAK_TFLOPS WARMUP   medians: generation/update tokens/s, MFU
  trl-figures STEPS.jsonl WARMUP       medians of TRL's step time (scripts/bench_trl.py output)
Prints one JSON object.
"""
import json
import shutil
import statistics
import sys
from pathlib import Path

SHAPES = {
    # Qwen2.5-0.5B's config.json (hidden 896, 24 layers, 14 heads, 2 KV heads, tied embeddings).
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936,
                         max_position_embeddings=32768, rope_theta=1000000.0,
                         tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=512,
                 max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=True),
}
TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"]


def make_model(out, shape, tok_dir):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    cfg = Qwen2Config(rms_norm_eps=1e-6, **SHAPES[shape])
    model = Qwen2ForCausalLM(cfg).to(torch.float32)
    out = Path(out)
    model.save_pretrained(out)
    for f in TOKENIZER_FILES:
        if (Path(tok_dir) / f).exists():
            shutil.copy(Path(tok_dir) / f, out / f)
    return {"shape": shape, "params": sum(p.numel() for p in model.parameters())}


def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]


def logprob_diff(a, b):
    d = [abs(x - y) for ra, rb in zip(rows(a), rows(b))
         for x, y in zip(ra["token_logprobs"], rb["token_logprobs"])]
    return {"max_abs": max(d), "tokens": len(d)}


def step_diff(a, b):
    ra, rb = rows(a)[0], rows(b)[0]
    return {k: {"a": ra[k], "b": rb[k], "abs": abs(ra[k] - rb[k])} for k in ("loss", "grad_norm")}


def grpo_figures(metrics, params, rows_per_step, peak_tflops, warmup):
    steps = rows(metrics)[int(warmup):]
    if not steps:
        sys.exit(f"{metrics}: no steps after {warmup} warm-up")
    med = lambda k: statistics.median(s[k] for s in steps)
    tokens = statistics.median(s["response_length/mean"] * int(rows_per_step) for s in steps)
    out = {
        "steps": len(steps),
        "step_s": med("timing/step_s"),
        "generation_s": med("timing/sample_s"),
        "update_s": med("timing/update_s"),
        "completion_tokens_per_step": tokens,
    }
    out["generation_tokens_per_s"] = tokens / out["generation_s"]
    out["update_tokens_per_s"] = tokens / out["update_s"]
    peak = float(peak_tflops)
    # 6 FLOPs per parameter per trained token (forward + backward); the update trains on the
    # completion tokens (prompts add forward work, left out: this is a lower bound).
    out["update_mfu"] = (6 * int(params) * out["update_tokens_per_s"] / (peak * 1e12)) if peak > 0 else None
    return out


def trl_figures(path, warmup):
    steps = [r for r in rows(path) if "summary" not in r][int(warmup):]
    med = lambda k: statistics.median(s[k] for s in steps)
    return {"steps": len(steps), "step_s": med("step_s"), "generation_s": med("gen_s"), "update_s": med("update_s")}


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    fn = {"make-model": make_model, "logprob-diff": logprob_diff, "step-diff": step_diff,
          "grpo-figures": grpo_figures, "trl-figures": trl_figures}[cmd]
    print(json.dumps(fn(*args)))


if __name__ == "__main__":
    main()
