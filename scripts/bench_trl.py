"""TRL's side of `scripts/bench_trl.sh`: GRPO steps of TRL's GRPOTrainer on CPU, timed per step.

Runs in the git-ignored venv .venv-trl (pinned trl, torch, transformers; see bench_trl.sh) with
the settings reinforge's side uses: P prompts x G completions per step, at most L completion
tokens, temperature 1, top-p 1, no top-k, one optimizer step per generation batch
(num_iterations=1, one mini-batch), token-mean loss (TRL `loss_type="dapo"`, which on one
process is the token mean over the batch), clip 0.2/0.28, no KL and no reference model
(beta=0), group-std advantage scaling, AdamW with constant learning rate and no weight decay,
gradient clipping at 1, f32, no gradient checkpointing, N intra-op threads. Prompts are chat
messages, so TRL applies the model's chat template with the generation prompt, as reinforge
does for text prompts.

Timing per optimizer step (a TrainerCallback from on_step_begin to on_step_end, which encloses
generation, scoring and the update): `gen_s` is the time spent in GRPOTrainer._generate
(tokenizing, model.generate, decoding) plus _calculate_rewards (the reward function), the
same work reinforge's `timing/sample_s` covers; `update_s` is the rest of the step
(advantages, padding, forward and backward, clipping, the AdamW step). `reward_s` alone is
recorded too. Completion lengths come from TRL's own `completions/mean_length` (EOS included,
as reinforge counts it).

Writes one JSON object per step (jsonl) to --out as the steps finish, then a final
{"summary": ...} line with the process's peak RSS (getrusage).
"""

import argparse
import json
import math
import re
import resource
import sys
import time

import torch

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def last_number_reward(completions, answer, **_):
    """1.0 when the last number in the completion equals the row's answer, else 0.0."""
    out = []
    for c, a in zip(completions, answer):
        text = c[-1]["content"] if isinstance(c, list) else c
        nums = NUMBER.findall(text.replace(",", ""))
        try:
            ok = bool(nums) and math.isclose(float(nums[-1]), float(a), abs_tol=1e-9)
        except ValueError:
            ok = nums[-1].strip() == str(a).strip() if nums else False
        out.append(1.0 if ok else 0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True, help="jsonl with columns prompt, answer")
    ap.add_argument("--steps", type=int, required=True, help="optimizer steps (warm-up included)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--generations", type=int, default=8)
    ap.add_argument("--max-completion-length", type=int, default=48)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--epsilon-low", type=float, default=0.2)
    ap.add_argument("--epsilon-high", type=float, default=0.28)
    ap.add_argument("--max-grad-norm", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", required=True, help="the Trainer's output_dir (nothing is saved)")
    ap.add_argument("--out", required=True, help="per-step jsonl")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda (scripts/gpu_check.sh)")
    ap.add_argument("--bf16", action="store_true", help="TRL's bf16=True (autocast over float32 weights)")
    ap.add_argument("--gradient-checkpointing", action="store_true",
                    help="TRL's gradient checkpointing (transformers 5: activation_checkpointing=True)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    import datasets
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    batch = args.prompts * args.generations
    ds = datasets.load_dataset("json", data_files=args.data, split="train")
    ds = ds.map(lambda r: {"prompt": [{"role": "user", "content": r["prompt"]}]})
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    cfg = GRPOConfig(
        output_dir=args.workdir,
        use_cpu=args.device == "cpu",
        bf16=args.bf16,
        fp16=False,
        activation_checkpointing=args.gradient_checkpointing,  # transformers 5's name for gradient checkpointing
        seed=args.seed,
        max_steps=args.steps,
        # One optimizer step per generation batch of P x G completions, one pass over it.
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        generation_batch_size=batch,
        num_generations=args.generations,
        num_iterations=1,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        top_p=1.0,
        top_k=0,
        repetition_penalty=1.0,
        # reinforge's grpo preset: clip-higher 0.2/0.28, token-mean, group std scaling, no KL.
        epsilon=args.epsilon_low,
        epsilon_high=args.epsilon_high,
        loss_type="dapo",
        scale_rewards="group",
        beta=0.0,
        mask_truncated_completions=False,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        max_grad_norm=args.max_grad_norm,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        log_completions=False,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[last_number_reward],
        args=cfg,
        train_dataset=ds,
        processing_class=tok,
    )

    acc = {"gen": 0.0, "reward": 0.0}

    def timed(name, f):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                acc[name] += time.perf_counter() - t0

        return wrapper

    trainer._generate = timed("gen", trainer._generate)
    trainer._calculate_rewards = timed("reward", trainer._calculate_rewards)

    steps = []
    # Each step's line is written as soon as TRL has logged it, so an interrupted run keeps them.
    log = open(args.out, "w")
    written = [0]

    class StepTimer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):
            acc["gen"] = acc["reward"] = 0.0
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            if torch.cuda.is_available():
                torch.cuda.synchronize()  # queued GPU work belongs to this step
            step_s = time.perf_counter() - self.t0
            gen_s = acc["gen"] + acc["reward"]
            steps.append(
                {
                    "step": state.global_step - 1,
                    "step_s": step_s,
                    "gen_s": gen_s,
                    "generate_only_s": acc["gen"],
                    "reward_s": acc["reward"],
                    "update_s": step_s - gen_s,
                }
            )

        def on_log(self, a, state, control, logs=None, **kw):
            # Logged right after on_step_end of the same step (logging_steps=1).
            if logs and steps and "completions/mean_length" in logs:
                steps[-1]["completion_tokens_mean"] = logs["completions/mean_length"]
                steps[-1]["reward_mean"] = logs.get("reward")
                steps[-1]["trl_step_time"] = logs.get("step_time")
                for x in steps[written[0] :]:
                    log.write(json.dumps(x) + "\n")
                written[0] = len(steps)
                log.flush()

    trainer.add_callback(StepTimer())
    trainer.train()

    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with log as f:
        for x in steps[written[0] :]:  # any step TRL did not log
            f.write(json.dumps(x) + "\n")
        f.write(
            json.dumps(
                {
                    "summary": {
                        "implementation": "trl",
                        "trl": trl.__version__,
                        "transformers": transformers.__version__,
                        "torch": torch.__version__,
                        "threads": torch.get_num_threads(),
                        "optim": str(cfg.optim),
                        "completions_per_step": batch,
                        "peak_rss_self_gb": peak_kb / 1024**2,
                    }
                }
            )
            + "\n"
        )
    print(f"trl: {len(steps)} steps written to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
