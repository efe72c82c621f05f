"""Loads a reward model written by `reinforge train-rm` with transformers'
AutoModelForSequenceClassification and scores the rows `reinforge score-rm --emit-ids` wrote,
on the same token ids, as one right-padded batch (so transformers' own last-non-pad pooling
is exercised). Prints one JSON line: the largest |reinforge - transformers| and the count.

usage: python scripts/check_rm_transformers.py MODEL_DIR SCORED.jsonl
Run in the project's .venv (scripts/setup.sh installs torch and transformers).
"""

import json
import sys

import torch
from transformers import AutoModelForSequenceClassification


def main(model_dir: str, scored: str) -> None:
    rows = [json.loads(line) for line in open(scored) if line.strip()]
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, dtype=torch.float32)
    model.eval()
    pad = model.config.pad_token_id
    width = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r["input_ids"])] = torch.tensor(r["input_ids"])
        mask[i, : len(r["input_ids"])] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    ours = torch.tensor([r["reward"] for r in rows], dtype=torch.float32)
    theirs = logits[:, 0].float()
    print(
        json.dumps(
            {
                "rows": len(rows),
                "num_labels": model.config.num_labels,
                "architecture": type(model).__name__,
                "max_abs_diff": float((ours - theirs).abs().max()),
                "transformers_first": [float(x) for x in theirs[:3]],
                "reinforge_first": [float(x) for x in ours[:3]],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
