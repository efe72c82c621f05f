"""Loads a LoRA adapter written by reinforge with PEFT onto its base model and compares logits.

    /work/main/.venv/bin/python scripts/check_peft_adapter.py [--tol 1e-5] <base_dir> <adapter_dir> <reference.safetensors> [...]

`reference.safetensors` holds `input_ids`, `attention_mask`, `position_ids` and reinforge's
`logits` (float32) for the adapted model. The script loads the base with
`AutoModelForCausalLM.from_pretrained` (float32, sdpa), applies the adapter with
`PeftModel.from_pretrained`, checks that every tensor of `adapter_model.safetensors` landed in
a LoRA parameter of the model unchanged and that no LoRA parameter was left out, runs the batch
and prints one JSON line per triple with the maximum absolute logit difference over real
tokens. Exit status 1 when a difference exceeds --tol or the adapter does not match the model.
"""

import argparse
import json
import sys
from pathlib import Path

import torch
from peft import PeftModel
from safetensors import safe_open
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def check(base, adapter, reference, tol):
    """One JSON-able result for a base model, an adapter directory and its reference file."""
    weights = adapter / "adapter_model.safetensors"
    with safe_open(str(weights), "pt") as st:
        meta = st.metadata() or {}
    if meta.get("format") != "pt":
        return {"adapter": str(adapter), "error": f"metadata {meta} lacks format=pt"}
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32, attn_implementation="sdpa")
    model = PeftModel.from_pretrained(model, adapter).eval()
    # PEFT stores `...q_proj.lora_A.weight`; the live parameter is `...q_proj.lora_A.default.weight`.
    live = {k.replace(".default.", "."): v for k, v in model.state_dict().items() if ".lora_" in k}
    saved = load_file(str(weights))
    if set(saved) != set(live):
        return {"adapter": str(adapter), "error": "keys differ",
                "only_in_file": sorted(set(saved) - set(live))[:5],
                "only_in_model": sorted(set(live) - set(saved))[:5]}
    not_loaded = [k for k, v in saved.items() if not torch.equal(v, live[k].float())]
    if not_loaded:
        return {"adapter": str(adapter), "error": f"tensors not loaded as saved: {not_loaded[:5]}"}
    cfg = model.peft_config["default"]
    ref = load_file(str(reference))
    with torch.no_grad():
        logits = model(
            input_ids=ref["input_ids"], attention_mask=ref["attention_mask"], position_ids=ref["position_ids"]
        ).logits.float()
    real = ref["attention_mask"].bool().unsqueeze(-1)
    diff = ((logits - ref["logits"]).abs() * real).max().item()
    return {"adapter": str(adapter), "max_abs_diff": diff, "ok": diff <= tol, "lora_tensors": len(saved),
            "r": cfg.r, "lora_alpha": cfg.lora_alpha, "target_modules": sorted(cfg.target_modules)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("triples", nargs="+", help="base_dir adapter_dir reference.safetensors, repeated")
    ap.add_argument("--tol", type=float, default=1e-5)
    args = ap.parse_args()
    if len(args.triples) % 3:
        ap.error("expected triples of <base_dir> <adapter_dir> <reference.safetensors>")
    ok = True
    t = args.triples
    for base, adapter, ref in zip(t[::3], t[1::3], t[2::3]):
        result = check(Path(base), Path(adapter), Path(ref), args.tol)
        ok = ok and result.get("ok", False)
        print(json.dumps(result, default=str), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
