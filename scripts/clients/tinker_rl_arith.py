#!/usr/bin/env python3
"""A GRPO-style RL loop written against the `tinker` SDK only (the shape of tinker-cookbook's RL
recipe: sample groups from the current weights, reward, group-centred advantages,
`importance_sampling` with the sampler's log-probs, one `optim_step` per batch), on addition
problems, against `reinforge serve --model DIR --tinker`. Prints the mean reward of each step.

  .venv-tinker/bin/python scripts/clients/tinker_rl_arith.py --base-url http://127.0.0.1:8000 \\
      --model SmolLM2-135M-Instruct --tokenizer .cache/models/SmolLM2-135M-Instruct --steps 10

tinker-cookbook itself is not used: its 0.6.1 release needs `tml-renderers>=0.4.1`, which the
package index here does not offer (docs/tinker.md).
"""

import argparse
import json
import random
import re
import time

import tinker
from tinker import types
from tokenizers import Tokenizer


def problem(rng):
    a, b = rng.randint(0, 20), rng.randint(0, 20)
    return f"Compute {a} + {b}. Reply with the number only.\n{a} + {b} =", a + b


def reward(text, answer):
    m = re.search(r"-?\d+", text)
    return 1.0 if m and int(m.group()) == answer else 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True, help="directory holding tokenizer.json")
    ap.add_argument("--api-key", default="tml-reinforge-local")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--problems", type=int, default=4, help="problems per step")
    ap.add_argument("--group", type=int, default=8, help="samples per problem")
    ap.add_argument("--max-tokens", type=int, default=6)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out")
    args = ap.parse_args()
    tok = Tokenizer.from_file(f"{args.tokenizer}/tokenizer.json")
    rng = random.Random(args.seed)

    sc = tinker.ServiceClient(base_url=args.base_url, api_key=args.api_key)
    tc = sc.create_lora_training_client(base_model=args.model, rank=args.rank, seed=args.seed).result()
    adam = types.AdamParams(learning_rate=args.lr)
    history = []
    for step in range(args.steps):
        t0 = time.time()
        sampler = tc.save_weights_and_get_sampling_client().result()
        batch = [problem(rng) for _ in range(args.problems)]
        prompts = [tok.encode(text).ids for text, _ in batch]
        futures = [
            sampler.sample(
                types.ModelInput.from_ints(p),
                num_samples=args.group,
                sampling_params=types.SamplingParams(
                    max_tokens=args.max_tokens, temperature=1.0, seed=args.seed * 100_003 + step * 101 + i
                ),
            )
            for i, p in enumerate(prompts)
        ]
        data, rewards = [], []
        for (_, answer), p, f in zip(batch, prompts, futures):
            seqs = f.result().sequences
            rs = [reward(tok.decode(s.tokens), answer) for s in seqs]
            rewards.extend(rs)
            mean = sum(rs) / len(rs)
            for s, r in zip(seqs, rs):
                adv = r - mean
                if adv == 0.0 or not s.tokens:
                    continue
                full = p + s.tokens
                n_prompt = len(p) - 1
                data.append(
                    types.Datum(
                        model_input=types.ModelInput.from_ints(full[:-1]),
                        loss_fn_inputs={
                            "target_tokens": full[1:],
                            "logprobs": [0.0] * n_prompt + list(s.logprobs),
                            "advantages": [0.0] * n_prompt + [adv] * len(s.tokens),
                        },
                    )
                )
        loss = None
        if data:
            fb = tc.forward_backward(data, "importance_sampling")
            opt = tc.optim_step(adam)
            loss = fb.result().metrics["loss:sum"]
            opt.result()
        row = {
            "step": step,
            "reward_mean": sum(rewards) / len(rewards),
            "trained_sequences": len(data),
            "loss": loss,
            "seconds": round(time.time() - t0, 2),
        }
        history.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        json.dump(history, open(args.out, "w"), indent=1)
    sc.close("success").result()


if __name__ == "__main__":
    main()
