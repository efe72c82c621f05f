"""Loads a checkpoint directory written by reinforge with transformers and compares logits.

    /work/main/.venv/bin/python scripts/check_hf_checkpoint.py [--tol 1e-5] <checkpoint_dir> <reference.safetensors> [<dir> <ref> ...]

`reference.safetensors` holds `input_ids`, `attention_mask`, `position_ids` and reinforge's
`logits` (float32); for a vision-language checkpoint, `pixel_values` and `image_grid_thw`
instead of `position_ids` (transformers computes the M-RoPE positions itself), loaded with
`AutoModelForImageTextToText`. The script checks that every weight file carries the {"format": "pt"}
metadata, loads the directory with `AutoModelForCausalLM.from_pretrained` in float32 (sharded
or not, tied or not), runs the same batch and prints one JSON line with the maximum absolute
difference over real tokens. Exit status 1 when it exceeds --tol or loading reports
missing/unexpected weights.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoModelForImageTextToText


def check(ckpt, reference, tol):
    """One JSON-able result for a checkpoint directory and its reference file."""
    for f in sorted(ckpt.glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            meta = st.metadata() or {}
        if meta.get("format") != "pt":
            return {"checkpoint": str(ckpt), "error": f"{f.name}: metadata {meta} lacks format=pt"}
    ref = load_file(str(reference))
    vision = "pixel_values" in ref
    auto = AutoModelForImageTextToText if vision else AutoModelForCausalLM
    model, info = auto.from_pretrained(
        ckpt, dtype=torch.float32, attn_implementation="sdpa", output_loading_info=True
    )
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        return {"checkpoint": str(ckpt), "error": f"loading info {problems}"}
    inputs = {"input_ids": ref["input_ids"], "attention_mask": ref["attention_mask"]}
    if vision:
        image = (ref["input_ids"] == model.config.image_token_id).long()
        inputs.update(pixel_values=ref["pixel_values"], image_grid_thw=ref["image_grid_thw"], mm_token_type_ids=image)
    else:
        inputs["position_ids"] = ref["position_ids"]
    with torch.no_grad():
        logits = model.eval()(**inputs).logits.float()
    real = ref["attention_mask"].bool().unsqueeze(-1)
    diff = ((logits - ref["logits"]).abs() * real).max().item()
    return {"checkpoint": str(ckpt), "max_abs_diff": diff, "ok": diff <= tol,
            "architecture": model.config.architectures, "tie": model.config.tie_word_embeddings}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pairs", nargs="+", help="checkpoint_dir reference.safetensors, repeated")
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    if len(args.pairs) % 2:
        ap.error("expected pairs of <checkpoint_dir> <reference.safetensors>")
    ok = True
    for ckpt, ref in zip(args.pairs[::2], args.pairs[1::2]):
        result = check(Path(ckpt), Path(ref), args.tol)
        ok = ok and result.get("ok", False)
        print(json.dumps(result, default=str), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
