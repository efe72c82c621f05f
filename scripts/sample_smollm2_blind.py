#!/usr/bin/env python3
"""Sample SmolLM2-135M-Instruct's answers to reasoning-gym arithmetic prompts for a blind
verifier test set (fixtures/data/verify/smollm2-blind.jsonl; README.md there says how it was
labelled). Never imported by the product.

Why a new set: the verifier's stated-answer rules were set on smollm2-arith-real.jsonl; recall and
false-positive rate must be measured on answers nobody looked at while writing rules.

Prompts: reasoning-gym tasks and seeds not used by scripts/reasoning_gym_data.py (which draws
seeds 0-2 and 100-102 per task) nor by the earlier fixture (a Python generator, not reasoning-gym):
seed 27000 + task index. Every task has a single integer gold answer.

Sampling: the set-up of crates/reinforge-verify/scripts/sample_smollm2.py, unchanged: chat template
with the generation prompt (no system message), temperature 1.0, top_p 1.0, top_k 0 (off), at
most 64 new tokens, torch.manual_seed(SEED) once before the first batch, batches of 10
left-padded prompts, one CPU thread, float32, responses decoded with skip_special_tokens=True.

Usage (from the repository root):
  nice -n 10 /work/main/.venv/bin/python scripts/sample_smollm2_blind.py \
      --model /work/main/.cache/models/SmolLM2-135M-Instruct \
      --out fixtures/data/verify/smollm2-blind.raw.jsonl
"""
import argparse
import json

import reasoning_gym
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

# (task, rows, reasoning-gym keyword arguments): small arithmetic with one integer answer.
TASKS = [
    ("basic_arithmetic", 110, dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1)),
    ("chain_sum", 110, dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)),
    ("products", 100, dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1)),
]
# Numeric tasks that are not plain arithmetic, for --tasks (blind set 3): the answer is one
# integer, but the question is not an expression the model can restate.
EXTRA_TASKS = [
    ("gcd", 60, dict(min_numbers=2, max_numbers=2, min_value=2, max_value=30)),
    ("letter_counting", 60, dict(min_words=3, max_words=6)),
]
SEED_BASE = 27000


def chosen_tasks(names=None):
    """The (task, rows, kwargs) entries named in `names` (comma-separated, in that order), or
    TASKS when `names` is None; the seed of the i-th task is the seed base + i."""
    if names is None:
        return TASKS
    table = {t[0]: t for t in TASKS + EXTRA_TASKS}
    unknown = [n for n in names.split(",") if n not in table]
    if unknown:
        raise SystemExit(f"unknown tasks {unknown}; known: {sorted(table)}")
    return [table[n] for n in names.split(",")]


def prompts(seed_base=SEED_BASE, sizes=None, tasks=None):
    """(task, seed, index, question, gold) for every row of every task, in a fixed order;
    `sizes` overrides the rows per task, `tasks` the task list (see chosen_tasks)."""
    out = []
    for i, (task, size, kwargs) in enumerate(chosen_tasks(tasks)):
        seed = seed_base + i
        size = sizes[i] if sizes else size
        ds = reasoning_gym.create_dataset(task, size=size, seed=seed, **kwargs)
        for j, row in enumerate(ds):
            out.append((task, seed, j, row["question"], str(row["answer"])))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234, help="torch sampling seed")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--seed-base", type=int, default=SEED_BASE, help="reasoning-gym seed of the first task")
    ap.add_argument("--sizes", help="rows per task, comma-separated (default 110,110,100)")
    ap.add_argument("--id-prefix", default="blind")
    ap.add_argument("--tasks", help="comma-separated tasks from TASKS and EXTRA_TASKS "
                    "(default: TASKS, as blind sets 1 and 2 used)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tok.padding_side = "left"
    rows = prompts(args.seed_base, [int(x) for x in args.sizes.split(",")] if args.sizes else None,
                   args.tasks)
    source = f"smollm2-135m-instruct:scripts/sample_smollm2_blind.py --seed {args.seed}"
    if args.seed_base != SEED_BASE:
        source += f" --seed-base {args.seed_base}"
    if args.tasks:
        source += f" --tasks {args.tasks}"
    with open(args.out, "w", encoding="utf-8") as f:
        for start in range(0, len(rows), args.batch):
            batch = rows[start:start + args.batch]
            texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                             add_generation_prompt=True) for _, _, _, q, _ in batch]
            ids = tok(texts, return_tensors="pt", padding=True)
            with torch.no_grad():
                out = model.generate(**ids, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                     max_new_tokens=args.max_new_tokens,
                                     pad_token_id=tok.pad_token_id or tok.eos_token_id)
            for k, (task, seed, j, q, gold) in enumerate(batch):
                resp = tok.decode(out[k, ids["input_ids"].shape[1]:], skip_special_tokens=True)
                f.write(json.dumps({"id": f"{args.id_prefix}-{start + k:03d}", "source": source,
                                    "task": task, "rg_seed": seed, "rg_index": j, "prompt": q,
                                    "gold": gold, "pred": resp}, ensure_ascii=False) + "\n")
            f.flush()


if __name__ == "__main__":
    main()
