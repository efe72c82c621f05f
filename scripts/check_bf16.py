"""Log-prob drift of the bf16 policy on the same inputs, reinforge against transformers.

Usage: check_bf16.py MODEL_DIR PAIRS.jsonl REINFORGE_F32.jsonl REINFORGE_BF16.jsonl
PAIRS holds {"prompt", "completion"} lines; the two REINFORGE files are `reinforge score` outputs
for them without and with `--autocast-bf16`. transformers scores the same pairs (prompt through
the chat template with the generation header, completion tokenized separately, as `reinforge
score` does; the token ids are checked equal) in float32 and under
`torch.autocast("cpu", dtype=torch.bfloat16)` with float32 weights (TRL's `bf16=True`). Prints
one JSON object: per comparison the max and mean |difference| of per-token log-probs, and the
ratio of reinforge's bf16 drift to transformers' (1 = the same drift).
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def transformers_logprobs(model, tok, pairs, expected_ids):
    """Per-token completion log-probs of every pair, float32 and bf16 autocast."""
    f32, bf16 = [], []
    for pair, ids_want in zip(pairs, expected_ids):
        prompt = pair["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        p_ids = tok(text, add_special_tokens=False)["input_ids"]
        c_ids = tok(pair["completion"], add_special_tokens=False)["input_ids"]
        if c_ids != ids_want:
            sys.exit(f"token ids differ from reinforge's for prompt {prompt!r}")
        ids = torch.tensor([p_ids + c_ids])
        targets = ids[0, 1:]
        for out, autocast in ((f32, False), (bf16, True)):
            with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(ids).logits[0, :-1]
            logp = logits.float().log_softmax(-1)
            out.append(logp.gather(-1, targets[:, None])[:, 0][len(p_ids) - 1:])
    return f32, bf16


def diff(a, b):
    d = torch.cat([(x - y).abs() for x, y in zip(a, b)])
    return {"max": float(d.max()), "mean": float(d.mean()), "tokens": int(d.numel())}


def main():
    model_dir, pairs_path, rf_f32_path, rf_bf16_path = sys.argv[1:5]
    pairs = read_jsonl(pairs_path)
    rf_f32 = read_jsonl(rf_f32_path)
    rf_bf16 = read_jsonl(rf_bf16_path)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = [r["token_ids"] for r in rf_f32]
    hf_f32, hf_bf16 = transformers_logprobs(model, tok, pairs, ids)
    ours_f32 = [torch.tensor(r["token_logprobs"]) for r in rf_f32]
    ours_bf16 = [torch.tensor(r["token_logprobs"]) for r in rf_bf16]
    report = {
        "pairs": len(pairs),
        "reinforge_bf16_vs_reinforge_f32": diff(ours_bf16, ours_f32),
        "transformers_bf16_vs_transformers_f32": diff(hf_bf16, hf_f32),
        "reinforge_bf16_vs_transformers_bf16": diff(ours_bf16, hf_bf16),
        "reinforge_f32_vs_transformers_f32": diff(ours_f32, hf_f32),
        "torch": torch.__version__,
    }
    ours, ref = report["reinforge_bf16_vs_reinforge_f32"], report["transformers_bf16_vs_transformers_f32"]
    report["drift_ratio_mean"] = ours["mean"] / ref["mean"] if ref["mean"] > 0 else None
    report["drift_ratio_max"] = ours["max"] / ref["max"] if ref["max"] > 0 else None
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
