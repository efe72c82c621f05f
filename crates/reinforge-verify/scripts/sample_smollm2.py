#!/usr/bin/env python3
"""Sample SmolLM2-135M-Instruct's own answers to one-digit arithmetic questions.

Why: the math reward must be judged on what a small policy really writes (free text, not boxed
answers). This writes one JSON line per sample with the prompt, the gold answer and the response,
for hand labelling (see fixtures/data/verify/README.md, "smollm2-arith-real.jsonl").

Usage (from the repository root):
  /work/main/.venv/bin/python crates/reinforge-verify/scripts/sample_smollm2.py \
      --model .cache/models/SmolLM2-135M-Instruct --out /tmp/smollm2_samples.jsonl

Settings: chat template with the generation prompt, temperature 1.0, top_p 1.0, top_k 0 (off),
max 64 new tokens, torch seed 1234 (set once, before the first batch), questions drawn by
random.Random(1234), batches of 10 prompts (left-padded), one CPU thread.
"""
import argparse, json, random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
TEMPLATES = ["What is {a} {op} {b}?", "Calculate {a} {op} {b}."]


def questions(n, rng):
    """`n` one-digit questions: (prompt, gold) with both template styles and all three operators."""
    out = []
    for i in range(n):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        op = rng.choice(sorted(OPS))
        out.append((TEMPLATES[i % 2].format(a=a, op=op, b=b), str(OPS[op](a, b))))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tok.padding_side = "left"
    rng = random.Random(args.seed)
    qs = questions(args.n, rng)
    with open(args.out, "w") as f:
        for start in range(0, len(qs), args.batch):
            batch = qs[start:start + args.batch]
            texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True) for q, _ in batch]
            ids = tok(texts, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**ids, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                     max_new_tokens=args.max_new_tokens,
                                     pad_token_id=tok.pad_token_id or tok.eos_token_id)
            for k, (q, gold) in enumerate(batch):
                resp = tok.decode(out[k, ids["input_ids"].shape[1]:], skip_special_tokens=True)
                f.write(json.dumps({"id": f"smol-{start + k:03d}", "prompt": q, "gold": gold,
                                    "pred": resp}) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
