"""Side by side of `reinforge train-sft` and TRL 1.16's `SFTTrainer` on one model.

1. Tokenisation: TRL prepares the rows itself (conversational prompt-completion rows by
   default: prompt rendered with the generation prompt, prompt + completion rendered, the
   completion from the common prefix on, `completion_only_loss=True`); its `input_ids` and
   trained positions (`labels != -100`) are compared with reinforge's (`--write-tokens`).
2. Training on the same ids: TRL gets reinforge's rows as a processed dataset (`input_ids`,
   `completion_mask`, `completion_only_loss=True`), one batch of all N rows every step, the same
   settings (AdamW, linear schedule without warm-up, max_grad_norm 1, no weight decay, float32,
   CPU, gradient checkpointing off); the first two optimizer steps' `loss` and `grad_norm` are
   compared (step 0 on the starting weights, step 1 after one AdamW update at the scheduled rate).
3. Speed: seconds per optimizer step, the two run alternately for ROUNDS rounds of STEPS steps;
   per round the median step after the first, the median over rounds; ratio reinforge / TRL.
   reinforge's steps are timed by polling its metrics.jsonl, TRL's by `on_step_end` callbacks
   (the same loop iteration on both sides), as scripts/compare_trl_preference.py does.

usage: .venv-trl/bin/python scripts/compare_trl_sft.py --bin target/release/reinforge
         --model .cache/models/SmolLM2-135M-Instruct [--rows 8] [--lr 1e-4] [--threads 2]
Prints one JSON summary (also WORK/summary.json). Run it through scripts/compare_trl_sft.sh.
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from compare_trl_preference import (  # noqa: E402
    compare, read_jsonl, record_f64_grad_norm, reinforge_train_polled, step_timer, write_jsonl)


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--bin", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--data", default="fixtures/data/sft/chat_prompt_completion.jsonl")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--lr", default="1e-4")
    p.add_argument("--steps", type=int, default=6, help="steps per timing round")
    p.add_argument("--rounds", type=int, default=2, help="timing rounds (0: no timing)")
    p.add_argument("--threads", default="2")
    p.add_argument("--work", default="runs/compare_trl_sft")
    return p.parse_args()


def sft_config(out_dir, n, lr, steps, **more):
    from trl import SFTConfig

    return SFTConfig(
        output_dir=str(out_dir), per_device_train_batch_size=n, gradient_accumulation_steps=1,
        learning_rate=float(lr), lr_scheduler_type="linear", warmup_steps=0, weight_decay=0.0,
        max_grad_norm=1.0, max_steps=steps, logging_steps=1, save_strategy="no", report_to="none",
        bf16=False, fp16=False, use_cpu=True, gradient_checkpointing=False, dataloader_num_workers=0,
        max_length=1024, seed=0, **more)


def load_model(model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def trl_tokenised(model_dir, rows, work):
    """TRL's own preparation of the raw rows: (input_ids, trained positions) per row."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    trainer = SFTTrainer(model=load_model(model_dir), args=sft_config(work / "trl-tok", len(rows), 1e-4, 1),
                         train_dataset=Dataset.from_list(rows), processing_class=tok)
    return [(r["input_ids"], [int(l != -100) for l in r["labels"]]) for r in trainer.train_dataset]


def trl_train(model_dir, ids_rows, lr, steps, work, f64_norm=False):
    """TRL's SFTTrainer on reinforge's ids; returns (logs by global step, step seconds, the
    pre-clip gradient norms computed in float64 when `f64_norm`)."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTTrainer

    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    data = Dataset.from_list([{"input_ids": r["input_ids"], "completion_mask": r["completion_mask"]} for r in ids_rows])
    rec = step_timer()
    trainer = SFTTrainer(model=load_model(model_dir), args=sft_config(work, len(ids_rows), lr, steps,
                                                                      completion_only_loss=True),
                         train_dataset=data, processing_class=tok, callbacks=[rec])
    if f64_norm:
        record_f64_grad_norm(trainer, rec)
    trainer.train()
    return rec.logs, rec.step_seconds(), getattr(rec, "grad_norm_f64", None)


def main():
    args = parse_args()
    import torch

    torch.set_num_threads(int(args.threads))
    work = pathlib.Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = read_jsonl(pathlib.Path(args.data))[: args.rows]
    data = work / "data.jsonl"
    write_jsonl(data, rows)
    env = dict(os.environ)
    flags = ["--batch-size", str(len(rows)), "--lr", args.lr, "--lr-scheduler-type", "linear",
             "--threads", args.threads]

    def ours(name, steps, extra=()):
        cmd = [args.bin, "train-sft", "--model", args.model, "--data", str(data), "--steps", str(steps),
               *flags, *extra]
        return reinforge_train_polled(cmd, work / name, env)

    # 1. the ids both sides train on
    tokens = work / "tokens.jsonl"
    first, _ = ours("reinforge-first", 2, ["--write-tokens", str(tokens)])
    ids_rows = read_jsonl(tokens)
    theirs = trl_tokenised(args.model, rows, work)
    same_ids = [r["input_ids"] == t[0] for r, t in zip(ids_rows, theirs)]
    same_mask = [r["completion_mask"] == t[1] for r, t in zip(ids_rows, theirs)]
    # 2. the first two steps on the same ids
    logs, _, norms64 = trl_train(args.model, ids_rows, args.lr, 2, work / "trl-first", f64_norm=True)
    metrics = compare(first, logs, ["loss", "grad_norm"])
    # TRL logs the norm torch computes in float32 (clip_grad_norm_); its float64 value on the
    # same gradients says which side's rounding a grad_norm difference is.
    metrics["grad_norm_trl_float64"] = [
        {"trl_float64": n, "abs_diff_reinforge": abs(n - first[s]["grad_norm"]),
         "abs_diff_trl_logged": abs(n - logs[s + 1]["grad_norm"])} for s, n in enumerate(norms64)]
    # 3. step time, alternating
    rounds = []
    for r in range(args.rounds):
        _, our_s = ours(f"reinforge-time{r}", args.steps)
        _, trl_s, _ = trl_train(args.model, ids_rows, args.lr, args.steps, work / f"trl-time{r}")
        rounds.append({"reinforge_s": statistics.median(our_s[1:]), "trl_s": statistics.median(trl_s[1:])})
    ours_s = statistics.median(x["reinforge_s"] for x in rounds) if rounds else None
    trl_s = statistics.median(x["trl_s"] for x in rounds) if rounds else None
    summary = {
        "model": args.model, "rows": len(rows), "threads": args.threads, "lr": args.lr,
        "tokens_per_row": [len(r["input_ids"]) for r in ids_rows],
        "input_ids_equal": f"{sum(same_ids)}/{len(same_ids)}",
        "trained_positions_equal": f"{sum(same_mask)}/{len(same_mask)}",
        "first_two_steps": metrics,
        "step_seconds": {"rounds": rounds, "reinforge": ours_s, "trl": trl_s, "ratio": ours_s / trl_s if rounds else None},
    }
    (work / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
