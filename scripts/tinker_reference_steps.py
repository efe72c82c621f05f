"""The Tinker basic loop's training steps recomputed with transformers, PEFT and PyTorch's
AdamW, as the reference for `reinforge serve --tinker` (crates/reinforge/tests/tinker.rs).

    .venv/bin/python scripts/tinker_reference_steps.py BASE_DIR ADAPTER_DIR TOKENS_JSON \\
        --steps 2 --lr 1e-2 --beta1 0.9 --beta2 0.95 --eps 1e-8

Loads BASE_DIR with `AutoModelForCausalLM` (float32) and the LoRA adapter the server saved
before training (`save_state("init")`: its `A` drawn by the server, `B` zero) with
`PeftModel` (ADAPTER_DIR `-`: no adapter, every weight trained, full fine-tuning), then runs STEPS rounds of Tinker's `forward_backward(cross_entropy)` +
`optim_step(AdamParams)`: the loss is `-sum(weights * logp(target_tokens))` over the datum
`full[:-1] -> full[1:]` with weights 1 on the completion, and the step is
`torch.optim.AdamW(lr, betas, eps, weight_decay=0)` over the trained parameters. Prints one JSON
object: the loss before each step and the loss after the last.
"""

import argparse
import json

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("adapter")
    ap.add_argument("tokens")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    toks = json.load(open(args.tokens))
    full = toks["prompt"] + toks["completion"]
    p = len(toks["prompt"])
    ids = torch.tensor([full[:-1]])
    targets = torch.tensor(full[1:])
    weights = torch.tensor([0.0] * (p - 1) + [1.0] * len(toks["completion"]))

    model = AutoModelForCausalLM.from_pretrained(
        args.base, dtype=torch.float32, attn_implementation="sdpa"
    )
    if args.adapter != "-":
        model = PeftModel.from_pretrained(model, args.adapter, is_trainable=True)
        trained = [n for n, q in model.named_parameters() if q.requires_grad]
        assert trained and all(".lora_" in n for n in trained)
    params = [q for q in model.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(
        params, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps, weight_decay=0.0
    )

    def loss_fn():
        logits = model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
        return -(weights * logp).sum()

    losses = []
    for _ in range(args.steps):
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with torch.no_grad():
        after = loss_fn().item()
    print(json.dumps({"losses": losses, "after": after}))


if __name__ == "__main__":
    main()
