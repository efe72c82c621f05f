"""Builds the tiny Hugging Face checkpoints of fixtures/hf/models/ and their reference outputs.

Run with the project's venv (transformers, torch):

    /work/main/.venv/bin/python scripts/make_hf_fixtures.py [--out fixtures/hf/models]

Each fixture is a random-initialised causal LM (vocab 512, hidden 64, 2 layers, GQA 4/2 heads)
saved by `save_pretrained`, then reloaded from disk with `AutoModelForCausalLM` (so the reference
is what transformers reads from the files, including the hand-written v4-style configs), and
run on a fixed batch. Files per fixture:

- `config.json`, `model.safetensors` (or a sharded index + shards), `generation_config.json`;
- `expected.safetensors`: `input_ids`, `attention_mask`, `position_ids` [3, 12] (rows 1 and 2
  left-padded), `logits` [3, 12, 512] in float32 (and `logits_bf16` for the bf16 fixture);
- `expected.json`: prompts, completions and the per-token log-probs of each completion under the
  model (right-padded rows), plus the library versions used.

Weights are drawn with a fixed seed at unit scale (1/sqrt(fan_in) for matrices, 1 +- 0.1 for
norms, 0.1 for biases) so logits are O(1) and a wrong implementation cannot hide in tiny numbers.
"""

import argparse
import json
import shutil
from pathlib import Path

import safetensors.torch
import torch
import transformers
from transformers import (
    AutoModelForCausalLM,
    LlamaConfig,
    MistralConfig,
    Qwen2Config,
    Qwen3Config,
)

ROOT = Path(__file__).resolve().parent.parent
BASE = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
    rms_norm_eps=1e-5,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)
SEQ = 12
PADS = [0, 3, 5]  # left padding per row of the logits batch
PROMPT_LENS = [4, 6, 3]
COMPLETION_LENS = [5, 2, 7]


def fixtures():
    """(name, config, save options, v4-style config rewrite or None)."""
    llama3 = dict(
        rope_type="llama3",
        rope_theta=500000.0,
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=64,
    )
    return [
        ("llama", LlamaConfig(**BASE), {}, None),
        ("llama_tied", LlamaConfig(**BASE, tie_word_embeddings=True), {}, None),
        # Llama-3.x style: rope_scaling of type llama3, config written the way the Hub has it.
        (
            "llama_rope3",
            LlamaConfig(**BASE, tie_word_embeddings=True, rope_parameters=llama3),
            {},
            {"rope_theta": 500000.0, "rope_scaling": {k: v for k, v in llama3.items() if k != "rope_theta"}},
        ),
        ("llama_sharded", LlamaConfig(**BASE), {"max_shard_size": "150KB"}, None),
        ("llama_bf16", LlamaConfig(**BASE), {"dtype": torch.bfloat16}, None),
        # Qwen2.5 style: q/k/v bias, tied head, v4-style config with a disabled sliding window.
        (
            "qwen2",
            Qwen2Config(**BASE, tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1e6}),
            {},
            {"rope_theta": 1000000.0, "rope_scaling": None, "sliding_window": 4096, "use_sliding_window": False,
             "max_window_layers": 2, "drop": ["rope_parameters", "layer_types"]},
        ),
        # Qwen3: per-head q/k RMSNorm, explicit head_dim different from hidden/heads.
        ("qwen3", Qwen3Config(**BASE, head_dim=32, rope_parameters={"rope_type": "default", "rope_theta": 1e6}), {}, None),
        # Mistral: a sliding window shorter than the batch so the window mask matters.
        ("mistral", MistralConfig(**BASE, sliding_window=8), {}, None),
    ]


def randomise(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                # 1/sqrt(hidden) keeps tied-head logits O(1) as well.
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)


def rewrite_config(path, changes):
    cfg = json.loads(path.read_text())
    for key in changes.get("drop", []):
        cfg.pop(key, None)
    cfg.pop("rope_parameters", None)
    for key, value in changes.items():
        if key != "drop":
            cfg[key] = value
    cfg["torch_dtype"] = cfg.pop("dtype")
    path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def positions(mask):
    return (mask.cumsum(-1) - 1).clamp(min=0)


def batch(gen):
    ids = torch.randint(3, 512, (len(PADS), SEQ), generator=gen)
    mask = torch.ones_like(ids)
    for row, pad in enumerate(PADS):
        ids[row, :pad] = 0
        mask[row, :pad] = 0
    return ids, mask


def completion_logprobs(model, gen):
    """Right-padded prompt ++ completion rows and the log-prob of each completion token."""
    prompts = [torch.randint(3, 512, (n,), generator=gen).tolist() for n in PROMPT_LENS]
    completions = [torch.randint(3, 512, (n,), generator=gen).tolist() for n in COMPLETION_LENS]
    width = max(len(p) + len(c) for p, c in zip(prompts, completions))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        mask[i, : len(p) + len(c)] = 1
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions(mask)).logits.float()
    logp = logits.log_softmax(-1)
    out = []
    for i, (p, c) in enumerate(zip(prompts, completions)):
        out.append([logp[i, len(p) + j - 1, tok].item() for j, tok in enumerate(c)])
    return prompts, completions, out


TOKENIZER_FOR = {"llama": "llama3_bpe", "qwen": "chatml_bpe", "mistral": "mistral_uni"}


def copy_tokenizer(dst, name):
    """Copies the family's tokenizer of fixtures/hf/text/ (the tokenizer fixtures) if present."""
    text = ROOT / "fixtures" / "hf" / "text"
    if not text.is_dir():
        return None
    prefer = [v for k, v in TOKENIZER_FOR.items() if name.startswith(k)]
    for cand in [text / p for p in prefer] + sorted(text.iterdir()):
        if (cand / "tokenizer.json").exists():
            for f in cand.iterdir():
                if f.name.startswith("tokenizer") or f.name in ("special_tokens_map.json", "chat_template.jinja"):
                    shutil.copy(f, dst / f.name)
            return cand.name
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "fixtures" / "hf" / "models"))
    args = ap.parse_args()
    out = Path(args.out)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "safetensors": safetensors.__version__}
    for index, (name, config, save_opts, rewrite) in enumerate(fixtures()):
        gen = torch.Generator().manual_seed(1000 + index)
        dst = out / name
        shutil.rmtree(dst, ignore_errors=True)
        dst.mkdir(parents=True)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
        randomise(model, gen)
        if "dtype" in save_opts:
            model = model.to(save_opts["dtype"])
        model.save_pretrained(dst, max_shard_size=save_opts.get("max_shard_size", "50GB"))
        if rewrite is not None:
            rewrite_config(dst / "config.json", rewrite)
        tokenizer = copy_tokenizer(dst, name)

        ref = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.float32, attn_implementation="sdpa").eval()
        ids, mask = batch(gen)
        pos = positions(mask)
        with torch.no_grad():
            logits = ref(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
        tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": pos, "logits": logits.contiguous()}
        if save_opts.get("dtype") == torch.bfloat16:
            ref16 = AutoModelForCausalLM.from_pretrained(dst, dtype=torch.bfloat16, attn_implementation="sdpa").eval()
            with torch.no_grad():
                tensors["logits_bf16"] = ref16(input_ids=ids, attention_mask=mask, position_ids=pos).logits.float()
        safetensors.torch.save_file(tensors, str(dst / "expected.safetensors"), metadata={"format": "pt"})
        prompts, completions, logprobs = completion_logprobs(ref, gen)
        expected = {
            "generated_by": "scripts/make_hf_fixtures.py",
            "versions": versions,
            "tokenizer_from": tokenizer,
            "prompts": prompts,
            "completions": completions,
            "completion_logprobs": logprobs,
        }
        (dst / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        size = sum(f.stat().st_size for f in dst.iterdir())
        print(f"{name:14s} {size / 1024:7.1f} KiB  logits |max| {logits.abs().max():.3f}")


if __name__ == "__main__":
    main()
