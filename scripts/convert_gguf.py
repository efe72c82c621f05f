"""Converts a GGUF checkpoint to an ordinary Hugging Face checkpoint with transformers, then
checks the result: the saved directory reloads, its logits equal the GGUF-loaded model's, and
its tokenizer renders the chat template. Used by scripts/real_model.sh; never imported by the
product.

Usage: convert_gguf.py GGUF_DIR GGUF_FILE OUT_DIR
"""

import json
import pathlib
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def convert(src: str, gguf: str, out: pathlib.Path) -> None:
    tok = AutoTokenizer.from_pretrained(src, gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=gguf, dtype=torch.float32)
    # transformers dequantizes GGUF tensors to float32 on load but keeps the GGUF quantizer
    # attached, and save_pretrained refuses a "quantized" model; the weights are plain floats.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tok.save_pretrained(out)
    check(model, tok, out)


def check(original, tok, out: pathlib.Path) -> None:
    reloaded = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    reloaded_tok = AutoTokenizer.from_pretrained(out)
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    text = reloaded_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = reloaded_tok(text, return_tensors="pt", add_special_tokens=False).input_ids
    if ids.tolist() != tok(text, return_tensors="pt", add_special_tokens=False).input_ids.tolist():
        sys.exit("check failed: the saved tokenizer encodes differently from the GGUF one")
    with torch.no_grad():
        diff = (original(ids).logits - reloaded(ids).logits).abs().max().item()
        if diff > 1e-5:
            sys.exit(f"check failed: saved logits differ from the GGUF model's by {diff:.3g}")
        greedy = reloaded.generate(ids, max_new_tokens=16, do_sample=False)
    answer = reloaded_tok.decode(greedy[0, ids.shape[1]:], skip_special_tokens=True)
    summary = {
        "parameters": sum(p.numel() for p in reloaded.parameters()),
        "max_logit_diff_vs_gguf": diff,
        "chat_prompt": text,
        "greedy_answer": answer,
    }
    (out / "conversion_check.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    convert(sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3]))
