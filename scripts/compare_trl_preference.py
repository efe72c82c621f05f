"""Side by side of reinforge and TRL 1.16 for DPO, reward-model, ORPO and KTO training.

On one model and one batch (all N pairs, or all N KTO rows, every step), this script runs
  * `reinforge train-dpo` and TRL's `DPOTrainer` (sigmoid loss, precomputed reference
    log-probs),
  * `reinforge train-rm` and TRL's `RewardTrainer`, both starting from the same
    `*ForSequenceClassification` model written once here,
  * `reinforge train-orpo` and `trl.experimental.orpo.ORPOTrainer`, and
  * `reinforge train-kto` and TRL's `KTOTrainer` (loss_type "kto", precomputed reference
    log-probs, sequential sampling; one unpaired row per pair, labels mixed, the whole file one
    block, so row i's KL completion is row i-1's on both sides),
(`--methods` picks a subset) with the same settings (AdamW, constant lr, max_grad_norm 1, no
weight decay, float32, CPU), and compares each logged metric of the first two optimizer steps.
Step 0 is taken with the starting weights, step 1 after one AdamW update, so it also checks the
update.

Inputs are made identical and checked, not assumed:
  * DPO: TRL tokenises the text pairs itself (non-conversational path: `tok(prompt)`,
    `tok(prompt + completion + eos_token)`, completion = the part after the common prefix). Its
    prompt/chosen/rejected ids are compared with reinforge's, read from `reinforge score-rm
    --emit-ids --raw` (the same tokenizer and the same `--raw` rule: prompt with special tokens,
    completion without, then EOS).
  * RM: TRL gets reinforge's ids as the pre-tokenised `chosen_ids`/`rejected_ids` columns
    (RewardTrainer skips its own tokenisation then). The starting scores of reinforge
    (`score-rm`) are checked against transformers on the same ids.
  * ORPO: `ORPOTrainer.tokenize_row` encodes the prompt without special tokens and prepends
    `bos_token_id` unless it is there; where the tokenizer does not add BOS itself (SmolLM2),
    the prompts get the BOS text in front, so both sides read it as their first id. Its
    prompt, prompt+chosen and prompt+rejected ids (and the -100 prompt labels) are compared
    with reinforge's, and the summary says which ids the prompts without that text would get.
  * KTO: KTOTrainer tokenises like DPOTrainer (`tok(prompt)`, `tok(prompt + completion +
    eos_token)`, split at the common prefix); its prompt, completion and KL completion ids are
    compared with reinforge's, and its precomputed reference log-probs with reinforge's
    `reference_logps.json`.

Speed: seconds per optimizer step on the same model, batch and thread count, the two run
alternately (reinforge DPO, TRL DPO, reinforge RM, TRL RM, then ORPO and KTO likewise) for
ROUNDS rounds of WARMUP+STEPS steps each. reinforge: the time between consecutive lines of its metrics.jsonl (one per step,
watched every millisecond); TRL: the time between consecutive `on_step_end` callbacks of
`trainer.train()`. Both are the whole loop iteration (batch, forward, backward, clip, AdamW,
logging). Per round the median of the steps after WARMUP, then the median over rounds; the
ratio is reinforge / TRL. As a cross-check, reinforge's own phase time
(checkpoints/final/trainer_state.json `dpo_seconds`/`rm_seconds`; ORPO and KTO run in the
`dpo` phase) divided by its steps.

usage: .venv-trl/bin/python scripts/compare_trl_preference.py --bin target/release/reinforge
         [--model fixtures/hf/models/llama] [--pairs 8] [--threads 2] [--work DIR]
         [--methods dpo,rm,orpo,kto] ...
Prints one JSON summary (also written to WORK/summary.json). Run it through
scripts/compare_trl_preference.sh.
"""

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import time

DPO_METRICS = [
    "loss",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/accuracies",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
    "grad_norm",
]
RM_METRICS = ["loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward", "grad_norm"]
ORPO_METRICS = DPO_METRICS[:-1] + ["nll_loss", "log_odds_ratio", "log_odds_chosen", "grad_norm"]
KTO_METRICS = [
    "loss",
    "kl",
    "rewards/chosen",
    "rewards/rejected",
    "rewards/margins",
    "logps/chosen",
    "logps/rejected",
    "grad_norm",
]
METRICS = {"dpo": DPO_METRICS, "rm": RM_METRICS, "orpo": ORPO_METRICS, "kto": KTO_METRICS}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="the reinforge binary")
    p.add_argument("--model", default="fixtures/hf/models/llama", help="causal HF checkpoint directory")
    p.add_argument("--work", default="runs/compare_trl_preference", help="scratch directory (recreated)")
    p.add_argument("--pairs", type=int, default=8, help="pairs; every step trains on all of them")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--dpo-lr", type=float, default=1e-3)
    p.add_argument("--rm-lr", type=float, default=1e-3)
    p.add_argument("--orpo-lr", type=float, default=1e-3)
    p.add_argument("--kto-lr", type=float, default=1e-3)
    p.add_argument("--methods", default="dpo,rm,orpo,kto",
                   help="comma-separated subset of dpo,rm,orpo,kto to compare")
    p.add_argument("--beta", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0, help="torch seed of the new score head")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the timings (>= 1)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per run")
    p.add_argument("--rounds", type=int, default=2, help="timing rounds (reinforge and TRL alternate)")
    p.add_argument("--no-diagnose", dest="diagnose", action="store_false",
                   help="skip the TRL runs with non-fused AdamW (float32 noise floor) and float64 grad norms")
    p.add_argument("--tol", type=float, default=1e-5, help="the acceptance bound on |reinforge - TRL|")
    a = p.parse_args()
    if a.warmup < 1 or a.steps < 2 or a.rounds < 1 or a.pairs < 1:
        p.error("need --warmup >= 1 (the first step includes loading), --steps >= 2, --rounds >= 1, --pairs >= 1")
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    unknown = sorted(set(a.methods) - set(METRICS))
    if unknown or not a.methods:
        p.error(f"--methods: unknown {unknown} (choose from {','.join(METRICS)})")
    if "kto" in a.methods and a.pairs < 2:
        p.error("kto needs --pairs >= 2 (its KL completion is another row's)")
    return a


def make_pairs(n):
    """N text pairs: the prompt ends on a word or a colon, each completion starts with a space
    (token boundaries the same whether tokenised alone or after the prompt)."""
    subjects = [
        ("the capital of France", " Paris.", " Rome, I think."),
        ("the largest planet", " Jupiter.", " The moon, probably, or maybe Mars."),
        ("the colour of the sky on a clear day", " Blue.", " Green."),
        ("the boiling point of water at sea level", " 100 degrees Celsius.", " 50 degrees."),
        ("the author of Hamlet", " William Shakespeare.", " Charles Dickens wrote it in 1990."),
        ("the chemical symbol of gold", " Au.", " Gd."),
        ("the number of days in a week", " Seven.", " Ten, or sometimes twelve."),
        ("the opposite of hot", " Cold.", " Warm."),
    ]
    rows = []
    for i in range(n):
        if i % 2 == 0:
            a, b = 3 + i, 11 + 2 * i
            rows.append(
                {
                    "prompt": f"Question: what is {a} plus {b}? Answer:",
                    "chosen": f" {a + b}.",
                    "rejected": f" {a + b + 5}, I believe.",
                }
            )
        else:
            s, c, r = subjects[(i // 2) % len(subjects)]
            rows.append({"prompt": f"Question: what is {s}? Answer:", "chosen": c, "rejected": r})
    return rows


def make_unpaired(pairs):
    """KTO rows from the pairs, one per pair, labels mixed (desirable unless i % 3 == 1): the
    chosen completion when desirable, the rejected one when not. Both sides read this order."""
    rows = []
    for i, p in enumerate(pairs):
        label = i % 3 != 1
        rows.append({"prompt": p["prompt"], "completion": p["chosen" if label else "rejected"], "label": label})
    return rows


def orpo_prompt_prefix(tok, pairs):
    """The text ORPO's prompts start with so that both sides read the same ids: the BOS token
    where the tokenizer has one but does not add it itself (SmolLM2), else "".

    ORPOTrainer.tokenize_row encodes the prompt without special tokens and then prepends
    `bos_token_id` unless the prompt already starts with it (`add_bos_token_if_needed`);
    reinforge `--raw` encodes the prompt with the tokenizer's own special tokens. A prompt that
    starts with the BOS text gets it as its first id on both sides."""
    if tok.bos_token_id is None:
        return ""
    adds_bos = all(tok(p["prompt"])["input_ids"][:1] == [tok.bos_token_id] for p in pairs)
    return "" if adds_bos else tok.bos_token


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(cmd, env):
    """Runs a reinforge command; on failure prints its output and stops with an error."""
    r = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"error: {' '.join(map(str, cmd))} failed ({r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
    return r.stdout


# ---------------------------------------------------------------------------------------------
# The shared starting reward model and reinforge's token ids


def effective_pad_id(tok):
    """The pad id TRL pads with: the tokenizer's pad token, else its EOS."""
    return tok.pad_token_id if tok.pad_token is not None else tok.eos_token_id


def write_aligned_policy(model_dir, out_dir, pad_id):
    """MODEL with `config.pad_token_id` set to `pad_id` (the other files linked, unchanged).

    transformers builds the input embedding as `nn.Embedding(..., padding_idx=config.pad_token_id)`,
    so the embedding row of `pad_token_id` never gets a gradient there; reinforge trains every row.
    When `pad_token_id` is a token the pairs contain (the fixture Llama: 0, its BOS), the two
    trainers differ by that row's gradient. With the id TRL pads with, both train the same rows.
    """
    out_dir.mkdir(parents=True)
    for f in model_dir.iterdir():
        if f.name != "config.json":
            (out_dir / f.name).symlink_to(f.resolve())
    cfg = json.loads((model_dir / "config.json").read_text())
    cfg["pad_token_id"] = pad_id
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return cfg


def write_start_rm(model_dir, out_dir, seed):
    """A one-label *ForSequenceClassification model from MODEL with a seeded score head,
    `pad_token_id` set to the tokenizer's pad (else EOS) in both config and tokenizer."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    torch.manual_seed(seed)
    rm = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=1, dtype=torch.float32)
    rm.config.pad_token_id = tok.pad_token_id
    rm.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return tok


def reinforge_ids(bin_, rm_dir, pairs, work, env):
    """reinforge's ids for every prompt (response "": prompt ids + EOS), prompt + chosen and
    prompt + rejected, and its scores of the latter two, from `score-rm --emit-ids --raw`."""
    rows = []
    for p in pairs:
        for kind in ("prompt", "chosen", "rejected"):
            rows.append({"prompt": p["prompt"], "response": "" if kind == "prompt" else p[kind], "kind": kind})
    write_jsonl(work / "score_rows.jsonl", rows)
    run(
        [bin_, "score-rm", "--model", rm_dir, "--data", work / "score_rows.jsonl", "--emit-ids", "--raw",
         "--output", work / "scored.jsonl"],
        env,
    )
    scored = read_jsonl(work / "scored.jsonl")
    if len(scored) != len(rows):
        sys.exit(f"error: score-rm wrote {len(scored)} rows for {len(rows)}")
    out = []
    for i in range(len(pairs)):
        pr, ch, rj = scored[3 * i : 3 * i + 3]
        out.append(
            {
                "prompt_ids": pr["input_ids"][:-1],  # the empty response is just EOS
                "chosen_full": ch["input_ids"],
                "rejected_full": rj["input_ids"],
                "reward_chosen": ch["reward"],
                "reward_rejected": rj["reward"],
            }
        )
    return out


def transformers_scores(rm_dir, seqs):
    """transformers' scores of `seqs` as one right-padded batch (its last-non-pad pooling)."""
    import torch
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype=torch.float32).eval()
    pad = model.config.pad_token_id
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits[:, 0].tolist()


# ---------------------------------------------------------------------------------------------
# TRL runs


def step_timer():
    """A TrainerCallback that records each log and the time of each step end."""
    from transformers import TrainerCallback

    class Recorder(TrainerCallback):
        def __init__(self):
            self.logs, self.ends, self.begin = {}, [], None

        def on_train_begin(self, args, state, control, **kw):
            self.begin = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.ends.append(time.perf_counter())

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                self.logs[state.global_step] = dict(logs)

        def step_seconds(self):
            marks = [self.begin] + self.ends
            return [b - a for a, b in zip(marks, marks[1:])]

    return Recorder()


def common_args(n, lr, steps, out_dir, optim=None):
    """TrainingArguments fields both TRL trainers get: one batch of all N pairs, constant lr, no
    warm-up, AdamW (TRL's default optimiser), no weight decay, clip at 1, float32 on CPU."""
    return dict(
        output_dir=str(out_dir),
        per_device_train_batch_size=n,
        gradient_accumulation_steps=1,
        learning_rate=lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        max_steps=steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=False,
        fp16=False,
        use_cpu=True,
        gradient_checkpointing=False,
        disable_dropout=True,
        dataloader_num_workers=0,
        max_length=None,
        seed=0,
        **({"optim": optim} if optim else {}),
    )


def optimizer_name(trainer):
    """The torch optimizer under accelerate's wrapper, with its `fused` setting."""
    opt = getattr(trainer.optimizer, "optimizer", trainer.optimizer)
    return f"{type(opt).__name__}(fused={opt.defaults.get('fused')})"


def record_f64_grad_norm(trainer, rec):
    """Wraps the trainer's `_clip_grad_norm` to record the pre-clip gradient norm computed in
    float64 (into `rec.grad_norm_f64`), then clips as before. Used in the diagnostic runs only:
    TRL logs the norm `torch.nn.utils.clip_grad_norm_` computes in float32 with
    `torch.linalg.vector_norm`, whose CPU reduction loses ~1e-5 relative on tensors of ~1M
    elements (SmolLM2's)."""
    import torch

    clip = trainer._clip_grad_norm
    rec.grad_norm_f64 = []

    def wrapped(model):
        with torch.no_grad():
            sq = sum(p.grad.double().square().sum() for p in model.parameters() if p.grad is not None)
        rec.grad_norm_f64.append(float(sq.sqrt()))
        return clip(model)

    trainer._clip_grad_norm = wrapped


def trl_dpo(model_dir, pairs, args, steps, out_dir, diagnose=False):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = DPOConfig(
        **common_args(len(pairs), args.dpo_lr, steps, out_dir, "adamw_torch" if diagnose else None),
        beta=args.beta,
        loss_type=["sigmoid"],
        precompute_ref_log_probs=True,
        precompute_ref_batch_size=len(pairs),
    )
    rec = step_timer()
    trainer = DPOTrainer(
        model=model, args=cfg, train_dataset=Dataset.from_list(pairs), processing_class=tok, callbacks=[rec]
    )
    data = trainer.train_dataset
    if diagnose:
        record_f64_grad_norm(trainer, rec)
    trainer.train()
    return rec, data, optimizer_name(trainer)


def trl_rm(rm_dir, id_rows, args, steps, out_dir, diagnose=False):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from trl import RewardConfig, RewardTrainer

    tok = AutoTokenizer.from_pretrained(rm_dir)
    model = AutoModelForSequenceClassification.from_pretrained(rm_dir, dtype=torch.float32)
    cfg = RewardConfig(
        **common_args(len(id_rows), args.rm_lr, steps, out_dir, "adamw_torch" if diagnose else None),
        pad_token=tok.pad_token,
    )
    rec = step_timer()
    trainer = RewardTrainer(
        model=model,
        args=cfg,
        train_dataset=Dataset.from_list(
            [{"chosen_ids": r["chosen_full"], "rejected_ids": r["rejected_full"]} for r in id_rows]
        ),
        processing_class=tok,
        callbacks=[rec],
    )
    if diagnose:
        record_f64_grad_norm(trainer, rec)
    trainer.train()
    return rec, optimizer_name(trainer)


def tokenizer_with_pad(model_dir):
    """The model's tokenizer with a pad token (its EOS where it has none), as KTOTrainer sets it
    itself; ORPOTrainer needs one for its collator."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def trl_orpo(model_dir, pairs, args, steps, out_dir, diagnose=False, dtype="float32"):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    tok = tokenizer_with_pad(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    cfg = ORPOConfig(
        **common_args(len(pairs), args.orpo_lr, steps, out_dir, "adamw_torch" if diagnose else None),
        beta=args.beta,
    )
    rec = step_timer()
    trainer = ORPOTrainer(
        model=model, args=cfg, train_dataset=Dataset.from_list(pairs), processing_class=tok, callbacks=[rec]
    )
    data = trainer.train_dataset
    if diagnose:
        record_f64_grad_norm(trainer, rec)
    trainer.train()
    return rec, data, optimizer_name(trainer)


def trl_orpo_tokenize(model_dir, pairs):
    """ORPOTrainer.tokenize_row on `pairs` without building a trainer (its method on a stand-in
    holding what it reads), to report the ids of prompts without the BOS prefix."""
    from types import SimpleNamespace

    from trl.experimental.orpo import ORPOTrainer

    stub = SimpleNamespace(processing_class=tokenizer_with_pad(model_dir), is_encoder_decoder=False, max_length=512)
    stub.build_tokenized_answer = lambda prompt, answer: ORPOTrainer.build_tokenized_answer(stub, prompt, answer)
    return [ORPOTrainer.tokenize_row(stub, p) for p in pairs]


def trl_kto(model_dir, rows, args, steps, out_dir, diagnose=False, dtype="float32"):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype))
    cfg = KTOConfig(
        **common_args(len(rows), args.kto_lr, steps, out_dir, "adamw_torch" if diagnose else None),
        beta=args.beta,
        loss_type="kto",
        precompute_ref_log_probs=True,
        precompute_ref_batch_size=len(rows),
        train_sampling_strategy="sequential",
    )
    rec = step_timer()
    trainer = KTOTrainer(
        model=model, args=cfg, train_dataset=Dataset.from_list(rows), processing_class=tok, callbacks=[rec]
    )
    data = trainer.train_dataset
    if diagnose:
        record_f64_grad_norm(trainer, rec)
    trainer.train()
    return rec, data, optimizer_name(trainer)


# ---------------------------------------------------------------------------------------------
# reinforge runs


def reinforge_train(bin_, kind, model, data, out, n, lr, steps, args, env):
    """Runs `reinforge train-dpo|train-rm|train-orpo|train-kto`; returns its metrics lines, the
    seconds of each step and the phase seconds of checkpoints/final/trainer_state.json (ORPO and
    KTO run in the trainer's `dpo` phase)."""
    cmd = [bin_, f"train-{kind}", "--model", model, "--data", data, "--steps", steps,
           "--batch-size", n, "--lr", lr, "--raw", "--threads", args.threads]
    if kind != "rm":
        cmd += ["--beta", args.beta]
    lines, seconds = reinforge_train_polled(cmd, out, env)
    state = json.loads((out / "checkpoints/final/trainer_state.json").read_text())
    return lines, seconds, state[f"{state['phase']}_seconds"]


def reinforge_train_polled(cmd, out, env):
    """Runs a reinforge training command `cmd` with `--output out` (emptied first); returns its
    metrics lines and the seconds of each step.

    Step times: reinforge appends one metrics.jsonl line per optimizer step, so a poll of the
    file (every millisecond) timestamps each step's end; step i lasts from line i-1 to line i
    (step 0 from the start of the process, which includes loading: the warm-up drops it).
    """
    shutil.rmtree(out, ignore_errors=True)
    cmd = [*cmd, "--output", out]
    metrics = out / "metrics.jsonl"
    marks = [time.perf_counter()]
    proc = subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    seen = 0
    while proc.poll() is None:
        try:
            lines = metrics.read_bytes().count(b"\n")
        except FileNotFoundError:
            lines = 0
        marks += [time.perf_counter()] * (lines - seen)
        seen = max(seen, lines)
        time.sleep(0.001)
    log = proc.stdout.read()
    if proc.returncode != 0:
        sys.exit(f"error: {' '.join(map(str, cmd))} failed ({proc.returncode}):\n{log[-3000:]}")
    lines = read_jsonl(metrics)
    if len(marks) != len(lines) + 1:
        sys.exit(f"error: saw {len(marks) - 1} of the {len(lines)} lines of {metrics} appear")
    return lines, [b - a for a, b in zip(marks, marks[1:])]


# ---------------------------------------------------------------------------------------------
# Comparison


def compare(ours_lines, trl_logs, names):
    """Per metric, per step (0 and 1): reinforge, TRL and |diff|; TRL's global_step s+1 is
    reinforge's step s (the logs are written after the update)."""
    steps, worst, worst_rel = [], {m: 0.0 for m in names}, {m: 0.0 for m in names}
    for s in (0, 1):
        if isinstance(ours_lines, dict):  # another TRL run's logs
            ours = ours_lines[s + 1]
        else:
            ours = next(l for l in ours_lines if l["step"] == s)
        theirs = trl_logs[s + 1]
        row = {}
        for m in names:
            d = abs(ours[m] - theirs[m])
            row[m] = {"reinforge": ours[m], "trl": theirs[m], "abs_diff": d}
            worst[m] = max(worst[m], d)
            # relative to the value where it exceeds 1 (summed log-probs of ~100 are at float32's
            # resolution, 7.6e-6, so their absolute diffs say little below that)
            worst_rel[m] = max(worst_rel[m], d / max(abs(theirs[m]), 1.0))
        steps.append(row)
    return {
        "steps": steps,
        "max_abs_diff": worst,
        "max_abs_diff_all": max(worst.values()),
        "max_diff_relative_above_1": worst_rel,
        "max_diff_relative_above_1_all": max(worst_rel.values()),
    }


def check_dpo_ids(trl_data, ids):
    """TRL's tokenisation of each pair against reinforge's: prompt, prompt+chosen, prompt+rejected."""
    bad = []
    for i, (t, r) in enumerate(zip(trl_data, ids)):
        same = (
            t["prompt_ids"] == r["prompt_ids"]
            and t["prompt_ids"] + t["chosen_ids"] == r["chosen_full"]
            and t["prompt_ids"] + t["rejected_ids"] == r["rejected_full"]
        )
        if not same:
            bad.append({"pair": i, "trl": [t["prompt_ids"], t["chosen_ids"], t["rejected_ids"]],
                        "reinforge": [r["prompt_ids"], r["chosen_full"], r["rejected_full"]]})
    return bad


def check_orpo_ids(trl_rows, ids):
    """ORPOTrainer.tokenize_row's ids of each pair against reinforge's: the prompt (also the
    prompt part of each answer, from its -100 labels), prompt+chosen and prompt+rejected."""
    bad = []
    for i, (t, r) in enumerate(zip(trl_rows, ids)):
        n = len(r["prompt_ids"])
        same = (
            t["prompt_input_ids"] == r["prompt_ids"]
            and t["chosen_input_ids"] == r["chosen_full"]
            and t["rejected_input_ids"] == r["rejected_full"]
            and t["chosen_labels"][:n] == [-100] * n and -100 not in t["chosen_labels"][n:]
            and t["rejected_labels"][:n] == [-100] * n and -100 not in t["rejected_labels"][n:]
        )
        if not same:
            bad.append({"pair": i, "trl": [t["prompt_input_ids"], t["chosen_input_ids"], t["rejected_input_ids"]],
                        "reinforge": [r["prompt_ids"], r["chosen_full"], r["rejected_full"]]})
    return bad


def kto_reinforge_ids(rows, ids):
    """reinforge's prompt and completion ids of each KTO row (the pair's prompt and its chosen or
    rejected sequence, as `score-rm` read them)."""
    out = []
    for row, r in zip(rows, ids):
        full = r["chosen_full"] if row["label"] else r["rejected_full"]
        out.append({"prompt_ids": r["prompt_ids"], "completion_ids": full[len(r["prompt_ids"]):]})
    return out


def check_kto_ids(trl_data, ours):
    """KTOTrainer's prompt, completion and KL completion ids of each row against reinforge's;
    row i's KL completion is row i-1's completion (row 0: the last row's), the whole data being
    one block."""
    bad = []
    n = len(ours)
    for i, t in enumerate(trl_data):
        kl = ours[(i - 1) % n]["completion_ids"]
        if (t["prompt_ids"], t["completion_ids"], t["KL_completion_ids"]) != (
            ours[i]["prompt_ids"], ours[i]["completion_ids"], kl
        ):
            bad.append({"row": i, "trl": [t["prompt_ids"], t["completion_ids"], t["KL_completion_ids"]],
                        "reinforge": [ours[i]["prompt_ids"], ours[i]["completion_ids"], kl]})
    return bad


def trl_own_rm_ids(tok, pairs):
    """What RewardTrainer's own non-conversational tokenisation would give (prompt + completion
    + eos_token as one string), to report whether it equals reinforge's ids here."""
    return [
        (tok(p["prompt"] + p["chosen"] + tok.eos_token)["input_ids"],
         tok(p["prompt"] + p["rejected"] + tok.eos_token)["input_ids"])
        for p in pairs
    ]


def timing_stats(ours_rounds, trl_rounds, phase_per_step):
    """Seconds per step after the warm-up: per round the median (and mean) of the steps, then
    the median over rounds; the ratio is of the medians."""
    med = lambda rounds, f: statistics.median(f(r) for r in rounds)
    ours, trl = med(ours_rounds, statistics.median), med(trl_rounds, statistics.median)
    return {
        "reinforge_s_per_step_median": ours,
        "reinforge_s_per_step_mean": med(ours_rounds, statistics.fmean),
        "reinforge_phase_seconds_per_step": statistics.median(phase_per_step),
        "trl_s_per_step_median": trl,
        "trl_s_per_step_mean": med(trl_rounds, statistics.fmean),
        "ratio_reinforge_over_trl": ours / trl,
        "reinforge_step_seconds_rounds": ours_rounds,
        "trl_step_seconds_rounds": trl_rounds,
    }


def main():
    args = parse_args()
    import torch
    import transformers
    import trl

    torch.set_num_threads(args.threads)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               TOKENIZERS_PARALLELISM="false")
    work = pathlib.Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    bin_ = pathlib.Path(args.bin).resolve()
    model = pathlib.Path(args.model).resolve()
    n = args.pairs
    total = args.warmup + args.steps

    pairs = make_pairs(n)
    write_jsonl(work / "pairs.jsonl", pairs)
    from transformers import AutoTokenizer

    pad_id = effective_pad_id(AutoTokenizer.from_pretrained(model))
    config_pad = json.loads((model / "config.json").read_text()).get("pad_token_id")
    policy = work / "start_policy"
    write_aligned_policy(model, policy, pad_id)
    rm_dir = work / "start_rm"
    tok = write_start_rm(policy, rm_dir, args.seed)
    ids = reinforge_ids(bin_, rm_dir, pairs, work, env)
    methods = args.methods

    # The starting reward model: reinforge's scores against transformers' on the same ids.
    start_score_diff = rm_trl_own_tokenisation_same = None
    if "rm" in methods:
        seqs = [r["chosen_full"] for r in ids] + [r["rejected_full"] for r in ids]
        ours0 = [r["reward_chosen"] for r in ids] + [r["reward_rejected"] for r in ids]
        theirs0 = transformers_scores(rm_dir, seqs)
        start_score_diff = max(abs(a - b) for a, b in zip(ours0, theirs0))
        own = trl_own_rm_ids(tok, pairs)
        rm_trl_own_tokenisation_same = all(
            c == r["chosen_full"] and j == r["rejected_full"] for (c, j), r in zip(own, ids)
        )

    # ORPO: the same pairs, with the BOS text in front of each prompt where the tokenizer does not
    # add BOS itself (see orpo_prompt_prefix); reinforge's ids of those prompts read again.
    orpo_prefix, orpo_unprefixed_bad = "", []
    if "orpo" in methods:
        orpo_prefix = orpo_prompt_prefix(tok, pairs)
        orpo_pairs = [dict(p, prompt=orpo_prefix + p["prompt"]) for p in pairs]
        write_jsonl(work / "orpo_pairs.jsonl", orpo_pairs)
        orpo_ids = reinforge_ids(bin_, rm_dir, orpo_pairs, work, env) if orpo_prefix else ids
        if orpo_prefix:
            orpo_unprefixed_bad = check_orpo_ids(trl_orpo_tokenize(policy, pairs), ids)
    # KTO: one unpaired row per pair, labels mixed; the whole file is one block.
    if "kto" in methods:
        kto_rows = make_unpaired(pairs)
        write_jsonl(work / "kto_rows.jsonl", kto_rows)
        kto_ids = kto_reinforge_ids(kto_rows, ids)

    loads = [os.getloadavg()[0]]  # 1-minute load average before each round and at the end
    times = {m: {"ours": [], "trl": [], "phase": []} for m in methods}
    cmp_, trl_logs, bad, optimizers = {}, {}, {}, {}
    ref_diff = kto_ref_diff = None

    def record(name, secs, phase, rec):
        times[name]["ours"].append(secs[args.warmup:])
        times[name]["phase"].append(phase / total)
        times[name]["trl"].append(rec.step_seconds()[args.warmup:])

    for rnd in range(args.rounds):
        # Per method: reinforge, then TRL, WARMUP+STEPS steps each; the first round's runs also
        # give the metrics compared.
        if "dpo" in methods:
            lines, secs, phase = reinforge_train(bin_, "dpo", policy, work / "pairs.jsonl", work / "rf_dpo", n,
                                                 args.dpo_lr, total, args, env)
            rec, data, optimizers["dpo"] = trl_dpo(policy, pairs, args, total, work / "trl_dpo")
            record("dpo", secs, phase, rec)
            if rnd == 0:
                cmp_["dpo"], trl_logs["dpo"] = compare(lines, rec.logs, DPO_METRICS), rec.logs
                bad["dpo"] = check_dpo_ids(data, ids)
                t0 = data[0]
                print(f"pair 0 ids, TRL:       prompt {t0['prompt_ids']} chosen {t0['chosen_ids']} "
                      f"rejected {t0['rejected_ids']}\n"
                      f"pair 0 ids, reinforge: prompt {ids[0]['prompt_ids']} prompt+chosen {ids[0]['chosen_full']} "
                      f"prompt+rejected {ids[0]['rejected_full']}", file=sys.stderr)
                refs = json.loads((work / "rf_dpo/reference_logps.json").read_text())
                ref_diff = max(
                    max(abs(a - b) for a, b in zip(refs[0], data["ref_chosen_logps"])),
                    max(abs(a - b) for a, b in zip(refs[1], data["ref_rejected_logps"])),
                )
        # Reward model: both from start_rm.
        if "rm" in methods:
            lines, secs, phase = reinforge_train(bin_, "rm", rm_dir, work / "pairs.jsonl", work / "rf_rm", n,
                                                 args.rm_lr, total, args, env)
            rec, optimizers["rm"] = trl_rm(rm_dir, ids, args, total, work / "trl_rm")
            record("rm", secs, phase, rec)
            if rnd == 0:
                cmp_["rm"], trl_logs["rm"] = compare(lines, rec.logs, RM_METRICS), rec.logs
        if "orpo" in methods:
            lines, secs, phase = reinforge_train(bin_, "orpo", policy, work / "orpo_pairs.jsonl", work / "rf_orpo",
                                                 n, args.orpo_lr, total, args, env)
            rec, data, optimizers["orpo"] = trl_orpo(policy, orpo_pairs, args, total, work / "trl_orpo")
            record("orpo", secs, phase, rec)
            if rnd == 0:
                cmp_["orpo"], trl_logs["orpo"] = compare(lines, rec.logs, ORPO_METRICS), rec.logs
                bad["orpo"] = check_orpo_ids(data, orpo_ids)
        if "kto" in methods:
            lines, secs, phase = reinforge_train(bin_, "kto", policy, work / "kto_rows.jsonl", work / "rf_kto", n,
                                                 args.kto_lr, total, args, env)
            rec, data, optimizers["kto"] = trl_kto(policy, kto_rows, args, total, work / "trl_kto")
            record("kto", secs, phase, rec)
            if rnd == 0:
                cmp_["kto"], trl_logs["kto"] = compare(lines, rec.logs, KTO_METRICS), rec.logs
                bad["kto"] = check_kto_ids(data, kto_ids)
                refs = json.loads((work / "rf_kto/reference_logps.json").read_text())
                kto_ref_diff = {
                    "ref_logps": max(abs(a - b) for a, b in zip(refs["logps"], data["ref_logps"])),
                    "ref_KL_logps": max(abs(a - b) for a, b in zip(refs["kl_logps"], data["ref_KL_logps"])),
                }
        loads.append(os.getloadavg()[0])
    for name, b in bad.items():
        if b:
            print(f"warning: TRL's {name} token ids differ from reinforge's in {len(b)} rows: the metrics are "
                  f"not comparable (see {name}.token_id_mismatches)", file=sys.stderr)

    # The model as given, when its config's pad_token_id is not the id TRL pads with: the
    # embedding row of that id is frozen in transformers (padding_idx) and trained by reinforge.
    as_is = None
    if "dpo" in methods and config_pad != pad_id:
        lines, _, _ = reinforge_train(bin_, "dpo", model, work / "pairs.jsonl", work / "rf_dpo_as_is", n,
                                   args.dpo_lr, 2, args, env)
        rec, _, _ = trl_dpo(model, pairs, args, 2, work / "trl_dpo_as_is")
        as_is = {
            "config_pad_token_id": config_pad,
            "config_pad_token": tok.convert_ids_to_tokens(config_pad) if config_pad is not None else None,
            "trl_pad_token_id": pad_id,
            **compare(lines, rec.logs, DPO_METRICS),
            "cause": "transformers' nn.Embedding(padding_idx=config.pad_token_id) gives that embedding row "
                     "no gradient; reinforge trains it",
        }

    # Diagnostics: TRL again with torch's non-fused AdamW (optim="adamw_torch", foreach) instead of
    # its default fused one: the float32 noise floor of step 1 (TRL against itself with another
    # correct AdamW kernel); and the float64 norm of its gradients before clipping. For ORPO and
    # KTO also TRL's step 0 with the model in float64, a reference for which side's float32
    # value is off where they differ.
    diag = {}
    f64_runs = {
        "orpo": lambda: trl_orpo(policy, orpo_pairs, args, 1, work / "trl_orpo_f64", dtype="float64")[0],
        "kto": lambda: trl_kto(policy, kto_rows, args, 1, work / "trl_kto_f64", dtype="float64")[0],
    }
    if args.diagnose:
        diag_runs = {
            "dpo": lambda: trl_dpo(policy, pairs, args, 2, work / "trl_dpo_diag", diagnose=True)[0],
            "rm": lambda: trl_rm(rm_dir, ids, args, 2, work / "trl_rm_diag", diagnose=True)[0],
            "orpo": lambda: trl_orpo(policy, orpo_pairs, args, 2, work / "trl_orpo_diag", diagnose=True)[0],
            "kto": lambda: trl_kto(policy, kto_rows, args, 2, work / "trl_kto_diag", diagnose=True)[0],
        }
        for name in methods:
            rec1 = diag_runs[name]()
            floor = compare(rec1.logs, trl_logs[name], METRICS[name])
            diag[name] = {
                "trl_adamw_foreach_vs_fused_max_abs_diff": floor["max_abs_diff"],
                "trl_grad_norm_f64": rec1.grad_norm_f64,
                "reinforge_grad_norm": [st["grad_norm"]["reinforge"] for st in cmp_[name]["steps"]],
                "trl_logged_grad_norm": [st["grad_norm"]["trl"] for st in cmp_[name]["steps"]],
            }
            if name in f64_runs:
                ref64, step0 = f64_runs[name]().logs[1], cmp_[name]["steps"][0]
                diag[name]["trl_float64_step0"] = {
                    m: {"trl_float64": ref64[m], "reinforge_abs_diff": abs(step0[m]["reinforge"] - ref64[m]),
                        "trl_abs_diff": abs(step0[m]["trl"] - ref64[m])}
                    for m in METRICS[name]
                }

    def result(name, **extra):
        return {**extra, **cmp_[name], "within_tolerance": cmp_[name]["max_abs_diff_all"] <= args.tol}

    summary = {
        "model": str(model),
        "config_pad_token_id": config_pad,
        "pad_token_id_used": pad_id,
        "pairs": n,
        "threads": args.threads,
        "methods": methods,
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__,
                     "reinforge": run([bin_, "--version"], env).strip()},
        "settings": {"dpo_lr": args.dpo_lr, "rm_lr": args.rm_lr, "orpo_lr": args.orpo_lr, "kto_lr": args.kto_lr,
                     "beta": args.beta, "dpo_loss_type": "sigmoid", "kto_loss_type": "kto",
                     "max_grad_norm": 1.0, "weight_decay": 0.0, "lr_scheduler": "constant",
                     "trl_optimizer": optimizers, "warmup": args.warmup, "timed_steps": args.steps,
                     "rounds": args.rounds, "tolerance": args.tol},
    }
    if "dpo" in methods:
        summary["dpo"] = result("dpo", token_ids_identical=not bad["dpo"], token_id_mismatches=bad["dpo"],
                                reference_logps_max_abs_diff=ref_diff)
        summary["dpo_model_as_is"] = as_is
    if "rm" in methods:
        summary["rm"] = result("rm", start_scores_reinforge_vs_transformers_max_abs_diff=start_score_diff,
                               trl_own_tokenisation_equals_reinforge_ids=rm_trl_own_tokenisation_same)
    if "orpo" in methods:
        summary["orpo"] = result(
            "orpo", token_ids_identical=not bad["orpo"], token_id_mismatches=bad["orpo"],
            prompt_prefix=orpo_prefix,
            # what tokenize_row gives the prompts without that prefix (BOS added by TRL only)
            unprefixed_pairs_with_other_ids=len(orpo_unprefixed_bad),
            unprefixed_first_mismatch=orpo_unprefixed_bad[0] if orpo_unprefixed_bad else None,
        )
    if "kto" in methods:
        summary["kto"] = result("kto", token_ids_identical=not bad["kto"], token_id_mismatches=bad["kto"],
                                labels=[r["label"] for r in kto_rows], reference_logps_max_abs_diff=kto_ref_diff)
    summary["diagnostics"] = diag
    summary["timing"] = {
        "method": "seconds between consecutive step ends (reinforge: metrics.jsonl lines, TRL: "
                  "on_step_end), steps after the warm-up; median per round, median over rounds; "
                  "ratio = reinforge / TRL of those medians",
        "load_average_1min": loads,
        **{m: timing_stats(t["ours"], t["trl"], t["phase"]) for m, t in times.items()},
    }
    for name in methods:
        d = summary[name]
        print(f"{name}: max |reinforge - TRL| over steps 0-1 = {d['max_abs_diff_all']:.2e} "
              f"({'within' if d['within_tolerance'] else 'above'} {args.tol:g}); ratio of step times "
              f"reinforge/TRL = {summary['timing'][name]['ratio_reinforge_over_trl']:.2f}", file=sys.stderr)
    text = json.dumps(summary, indent=1)
    (work / "summary.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
