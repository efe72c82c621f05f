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

Independence from the earlier sets: blind sets 1-5 all used the old default seed 1234 and the
same batch layout, so row i of every set drew from the same random stream and later sets
repeated earlier responses (50 of blind 5's 320 began with the 40 characters of blind 4's at the
same index). Now `--seed` is required and must differ from every seed recorded in the earlier
sets' `source` fields (--earlier), the rows are shuffled by that seed before batching (so no row
sits where an earlier set's row sat), and a response that nearly copies an earlier set's (the
same first 40 characters, or a difflib ratio of 0.7 or more for 80 characters or more) is drawn
again, up to 5 times, then left out with a message.

Usage (from the repository root):
  nice -n 10 /work/main/.venv/bin/python scripts/sample_smollm2_blind.py --seed NEW_SEED \
      --model /work/main/.cache/models/SmolLM2-135M-Instruct \
      --out fixtures/data/verify/smollm2-blind.raw.jsonl
"""
import argparse
import difflib
import glob
import json
import random
import re

import sys

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


def earlier_sets(pattern):
    """(seeds recorded in the `source` fields, responses) of the earlier sets' files."""
    seeds, responses = set(), []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            for line in f:
                row = json.loads(line)
                m = re.search(r"--seed (\d+)", row.get("source", ""))
                # The sets before --seed existed record no seed: they used 1234.
                seeds.add(int(m.group(1)) if m else 1234)
                responses.append(row["pred"])
    return seeds, responses


def near_copy(resp, earlier):
    """The earlier response `resp` nearly copies, or None."""
    for old in earlier:
        if len(resp) >= 40 and resp[:40] == old[:40]:
            return old
        if len(resp) >= 80:
            m = difflib.SequenceMatcher(None, resp, old, autojunk=False)
            if m.real_quick_ratio() >= 0.7 and m.quick_ratio() >= 0.7 and m.ratio() >= 0.7:
                return old
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, required=True,
                    help="torch sampling seed: one no earlier set used (see --earlier)")
    ap.add_argument("--earlier", default="fixtures/data/verify/smollm2-blind*.jsonl",
                    help="glob of the earlier sets, whose seeds and responses this one avoids")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--seed-base", type=int, default=SEED_BASE, help="reasoning-gym seed of the first task")
    ap.add_argument("--sizes", help="rows per task, comma-separated (default 110,110,100)")
    ap.add_argument("--id-prefix", default="blind")
    ap.add_argument("--tasks", help="comma-separated tasks from TASKS and EXTRA_TASKS "
                    "(default: TASKS, as blind sets 1 and 2 used)")
    args = ap.parse_args()
    used, earlier = earlier_sets(args.earlier)
    if args.seed in used:
        raise SystemExit(f"--seed {args.seed} was used by an earlier set ({sorted(used)}): "
                         "a new set draws from its own seed")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    tok.padding_side = "left"
    rows = prompts(args.seed_base, [int(x) for x in args.sizes.split(",")] if args.sizes else None,
                   args.tasks)
    random.Random(args.seed).shuffle(rows)
    source = f"smollm2-135m-instruct:scripts/sample_smollm2_blind.py --seed {args.seed}"
    if args.seed_base != SEED_BASE:
        source += f" --seed-base {args.seed_base}"
    if args.tasks:
        source += f" --tasks {args.tasks}"
    def draw(batch):
        texts = [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                         add_generation_prompt=True) for _, _, _, q, _ in batch]
        ids = tok(texts, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**ids, do_sample=True, temperature=1.0, top_p=1.0, top_k=0,
                                 max_new_tokens=args.max_new_tokens,
                                 pad_token_id=tok.pad_token_id or tok.eos_token_id)
        return [tok.decode(out[k, ids["input_ids"].shape[1]:], skip_special_tokens=True)
                for k in range(len(batch))]

    written = 0
    with open(args.out, "w", encoding="utf-8") as f:
        for start in range(0, len(rows), args.batch):
            batch = rows[start:start + args.batch]
            for k, ((task, seed, j, q, gold), resp) in enumerate(zip(batch, draw(batch))):
                tries = 0
                while (old := near_copy(resp, earlier)) is not None and tries < 5:
                    resp, tries = draw([batch[k]])[0], tries + 1
                if old is not None:
                    print(f"left out {task} #{j}: still a near-copy after 5 draws of {old[:60]!r}",
                          file=sys.stderr)
                    continue
                written += 1
                f.write(json.dumps({"id": f"{args.id_prefix}-{start + k:03d}", "source": source,
                                    "task": task, "rg_seed": seed, "rg_index": j, "prompt": q,
                                    "gold": gold, "pred": resp}, ensure_ascii=False) + "\n")
            f.flush()
    print(f"{written} of {len(rows)} rows written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
