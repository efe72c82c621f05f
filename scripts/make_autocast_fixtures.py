"""transformers' logits under bfloat16 autocast for the fixture checkpoints (fixtures/hf/models).

Usage: .venv/bin/python scripts/make_autocast_fixtures.py
For each fixture with an expected.safetensors (scripts/make_hf_fixtures.py), loads the model in
float32 and runs the same batch (input_ids, attention_mask, position_ids) under
`torch.autocast("cpu", dtype=torch.bfloat16)`: what transformers' Trainer does with `bf16=True`
(TRL's default precision on GPUs). Writes expected_autocast.safetensors beside it with
`logits_autocast_bf16` (float32 copy of the bf16 logits). The reinforge-torch test `precision`
compares reinforge's `bf16 = true` policy with it. Metadata records the versions used.
"""
import pathlib

import safetensors.torch
import torch
import transformers
from transformers import AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "hf" / "models"


def main():
    for expected in sorted(ROOT.glob("*/expected.safetensors")):
        d = expected.parent
        e = safetensors.torch.load_file(str(expected))
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(
                input_ids=e["input_ids"],
                attention_mask=e["attention_mask"],
                position_ids=e["position_ids"],
            ).logits
        assert logits.dtype == torch.bfloat16, (d.name, logits.dtype)
        safetensors.torch.save_file(
            {"logits_autocast_bf16": logits.float().contiguous()},
            str(d / "expected_autocast.safetensors"),
            metadata={"format": "pt", "torch": torch.__version__, "transformers": transformers.__version__},
        )
        print(d.name, tuple(logits.shape))


if __name__ == "__main__":
    main()
