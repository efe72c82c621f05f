"""Writes train and held-out jsonl sets from reasoning-gym's procedural task generators with
fixed seeds, for the real-model experiment and tests. Each row: `prompt` (the task's question),
`answer` (its reference answer), `task` (the generator's name). Reproducible: the same
arguments write the same bytes. Never imported by the product.

Usage: reasoning_gym_data.py OUT_DIR [--train N] [--held-out N] [--tasks a,b] [--seed S]
"""

import argparse
import json
import pathlib

import reasoning_gym

# Tasks a 135M instruct model solves sometimes but not always (pass@1 between 0 and 1 before
# training), so RL has signal; configurations are reasoning-gym's own keyword arguments.
TASKS = {
    "basic_arithmetic": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=1),
    "chain_sum": dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2),
    "leg_counting": dict(min_animals=1, max_animals=1, max_instances=3),
}


def rows(task: str, size: int, seed: int) -> list[dict]:
    ds = reasoning_gym.create_dataset(task, size=size, seed=seed, **TASKS[task])
    return [{"prompt": x["question"], "answer": str(x["answer"]), "task": task} for x in ds]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=pathlib.Path)
    ap.add_argument("--train", type=int, default=256, help="training rows per task")
    ap.add_argument("--held-out", type=int, default=64, help="held-out rows per task")
    ap.add_argument("--tasks", default=",".join(TASKS), help="comma-separated task names")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tasks = args.tasks.split(",")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        ap.error(f"unknown task(s) {unknown}; known: {list(TASKS)}")
    # Distinct seeds per split and task: held-out questions come from another stream.
    splits = {"train": (args.train, 0), "heldout": (args.held_out, 1)}
    for split, (size, offset) in splits.items():
        out = []
        for i, task in enumerate(tasks):
            out += rows(task, size, seed=args.seed * 1000 + offset * 100 + i)
        path = args.out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in out))
        print(f"{path}: {len(out)} rows ({', '.join(tasks)})")


if __name__ == "__main__":
    main()
