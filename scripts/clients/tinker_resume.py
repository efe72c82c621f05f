#!/usr/bin/env python3
"""Resuming from `save_state` with the optimizer, through the Tinker SDK against
`reinforge serve --model DIR --tinker`: trains a LoRA model one step, saves its state, trains
two more steps (the reference), then replays those two steps after `load_state_with_optimizer`,
after `load_state` (weights only: the optimizer restarts) and on a new client from
`create_training_client_from_state_with_optimizer`. Writes every loss to --out for
crates/reinforge/tests/tinker.rs, which checks that resuming with the optimizer continues
identically and without it does not.

  .venv-tinker/bin/python scripts/clients/tinker_resume.py --base-url http://127.0.0.1:8000 \\
      --model llama --out resume.json
"""

import argparse
import json

import tinker
from tinker import types

# Token ids every model's vocabulary has (the fixture's has 512).
TOKENS = [1, 17, 42, 99, 7, 250, 33, 64, 128, 5, 77, 300, 12]


def datum():
    weights = [0.0] * 4 + [1.0] * (len(TOKENS) - 5)
    return types.Datum(
        model_input=types.ModelInput.from_ints(TOKENS[:-1]),
        loss_fn_inputs={"target_tokens": TOKENS[1:], "weights": weights},
    )


def step(tc, adam):
    """One forward_backward + optim_step; the loss before the step."""
    fb = tc.forward_backward([datum()], "cross_entropy")
    tc.optim_step(adam).result()
    return fb.result().metrics["loss:sum"]


def forward(tc):
    return tc.forward([datum()], "cross_entropy").result().metrics["loss:sum"]


def two_steps(tc, adam):
    return [step(tc, adam), step(tc, adam), forward(tc)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", default="tml-local")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    sc = tinker.ServiceClient(base_url=args.base_url, api_key=args.api_key)
    adam = types.AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8)
    tc = sc.create_lora_training_client(base_model=args.model, rank=4, seed=0)
    out = {"first": step(tc, adam)}
    path = tc.save_state("resume").result().path
    out["path"] = path
    out["reference"] = two_steps(tc, adam)
    tc.load_state_with_optimizer(path).result()
    out["with_optimizer"] = two_steps(tc, adam)
    tc.load_state(path).result()
    out["weights_only"] = two_steps(tc, adam)
    fresh = sc.create_training_client_from_state_with_optimizer(path)
    out["new_client_with_optimizer"] = two_steps(fresh, adam)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
