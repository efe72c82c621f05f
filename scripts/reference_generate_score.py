"""Reference outputs of `reinforge generate` (greedy) and `reinforge score` from transformers.

Usage: reference_generate_score.py PAIRS.jsonl MAX_NEW_TOKENS MODEL_DIR [MODEL_DIR ...]
Several models share one interpreter (importing torch and transformers takes seconds). Reads {"prompt": text | messages, "completion": text} lines, renders each prompt with the
tokenizer's chat template (add_generation_prompt=True; a text prompt becomes one user message),
tokenizes prompt and completion separately (no special tokens added to the completion), and
prints one JSON line per model and pair, models in the order given: {"model": MODEL_DIR,
"prompt_text": ..., "token_logprobs": [...], "greedy_ids": [...]}, where
greedy_ids are the first MAX_NEW_TOKENS greedy tokens (argmax of full forward passes).
The crates/reinforge test hf_commands compares the Rust commands with this output.
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def greedy_ids(model, prompt, max_new):
    """Greedy decoding by full forward passes (no KV cache): the definition, free of cache
    paths. (transformers 5.23's cached `generate` drifted from its own full forward on the
    llama fixture by ~0.5 in a logit after 5 tokens, so it is not used as the reference.)"""
    ids = list(prompt)
    for _ in range(max_new):
        ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
    return ids[len(prompt):]


def main():
    pairs_path, max_new, model_dirs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    if not model_dirs:
        sys.exit(__doc__)
    for model_dir in model_dirs:
        reference(model_dir, pairs_path, max_new)


def reference(model_dir, pairs_path, max_new):
    """Prints the reference lines of one model."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for line in open(pairs_path):
        pair = json.loads(line)
        prompt = pair["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        p_ids = tok(text, add_special_tokens=False)["input_ids"]
        c_ids = tok(pair["completion"], add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p_ids + c_ids])
        with torch.no_grad():
            logp = model(ids).logits[0, :-1].float().log_softmax(-1)
            targets = ids[0, 1:]
            lp = logp.gather(-1, targets[:, None])[:, 0][len(p_ids) - 1:]
            greedy = greedy_ids(model, p_ids, max_new)
        print(json.dumps({
            "model": model_dir,
            "prompt_text": text,
            "token_logprobs": lp.tolist(),
            "greedy_ids": greedy,
        }))


if __name__ == "__main__":
    main()
