"""Builds the tiny vision-language checkpoints of fixtures/hf/vlm/ and their reference outputs.

Run with the project's venv (transformers, torch, PIL) plus torchvision, which the venv lacks and which
transformers 5.23's Qwen2VLProcessor needs even for images (its constructor type-checks a video processor,
and every Qwen2-VL video processor is torchvision-only). Install it beside the venv, not into it:

    /work/main/.venv/bin/python -m pip install --no-deps --target /tmp/tvlib torchvision==0.26.0
    PYTHONPATH=/tmp/tvlib OMP_NUM_THREADS=1 /work/main/.venv/bin/python scripts/make_vlm_fixtures.py \
        [--out fixtures/hf/vlm]

All references use the PIL image processor (`Qwen2VLImageProcessorPil`, asked for with backend="pil");
the torchvision one (`Qwen2VLImageProcessor`, what AutoProcessor picks when torchvision is installed) is
only compared against it.

Fixtures (each a random-initialised model saved by `save_pretrained`, then reloaded from disk with
`AutoModelForImageTextToText` / `AutoProcessor`, so the reference is what transformers reads from the files):

- `qwen2_vl/`: Qwen2-VL (LayerNorm + QuickGELU vision blocks, full attention per image), config in the
  transformers-5 nested layout (`text_config` / `vision_config`) exactly as `save_pretrained` wrote it;
- `qwen2_vl_flat/`: the same weights and files, config rewritten in the flat layout of the Hub's
  transformers-4 checkpoints (`rope_scaling: {"type": "mrope", "mrope_section": [...]}`, `rope_theta` and
  the text fields at the top level, `in_chans` in `vision_config`); the script checks that transformers
  gives bit-identical outputs from it;
- `qwen2_5_vl/`: Qwen2.5-VL (RMSNorm, SwiGLU MLP with biases in the vision blocks, window attention in
  block 0 with windows that need padding, full attention in block 1 via `fullatt_block_indexes`).

Sizes: text hidden 64, 2 layers, 4 heads / 2 kv heads (head_dim 16, mrope_section [2, 3, 3]), vocab 512
(a 500-token byte-level BPE plus 8 Qwen-style added specials at 500..507, rows 508..511 unused, as the Hub
models pad their vocab); vision depth 2, width 32, 2 heads, patch 14, temporal patch 2, merge 2. Text
rope_theta is 100 (not 1e6) so that all three mrope sections rotate visibly over these short sequences.

Files per model fixture:

- `config.json`, `model.safetensors`, `generation_config.json`;
- `preprocessor_config.json` (small min/max_pixels, naming the processor class; in `qwen2_vl_flat/` in the
  Hub's v4 form, min_pixels / max_pixels at the top level), `tokenizer.json`, `tokenizer_config.json`, and
  a minimal Qwen2-VL-style ChatML template written for these fixtures (`chat_template.jinja`; in
  `qwen2_vl_flat/` the older `chat_template.json`);
- `images/*.png`: the images of the batch;
- `expected.safetensors`: the processor's outputs for a 3-row left-padded batch (row 0: two images of
  different grids, one non-square; row 1: one non-square image; row 2: text only) -- `input_ids`,
  `attention_mask`, `mm_token_type_ids`, `pixel_values`, `image_grid_thw` -- and transformers' results:
  `position_ids` [3, batch, seq] and `rope_deltas` [batch, 1] (`get_rope_index`), the vision tower's
  `vision_position_ids` (h, w per patch), `cu_seqlens`, for Qwen2.5-VL `window_index` and
  `cu_window_seqlens`, `vision_cos` / `vision_sin` (rotary tables in the order the blocks use them),
  `patch_embeds` (after the Conv3d), `vision_hidden` (after the last block, before the merger; for
  Qwen2.5-VL still in window order, as transformers returns it),
  `image_embeds` (after the merger, image order), `logits` [3, seq, 512] in float32, and the right-padded
  completion batch `lp_input_ids` / `lp_attention_mask` / `lp_mm_token_type_ids`;
- `expected.json`: prompts (chat-template text), the chat template renderings, per-token log-probs of
  random completions after the two image prompts, greedy `generate` results (8 new tokens, KV cache) for
  one image prompt alone and for the whole left-padded batch, and the library versions.

Processor goldens (`processor/`): 14 PNG images (10 whose sizes need no resize under smart_resize, 4 that
do: odd sizes, one below min_pixels, one above max_pixels; greyscale and RGBA among them), the
`preprocessor_config.json` they were processed with, and per image `<name>.pixel_values` /
`<name>.image_grid_thw` in `expected.safetensors` from `Qwen2VLImageProcessorPil` (the PIL backend, which
resamples with PIL BICUBIC on uint8), with sizes, settings and the distance of the torchvision backend
from it in `expected.json`.

Weights are drawn with a fixed seed at unit scale (1/sqrt(fan_in) for matrices and the Conv3d patch
embedding, 1 +- 0.1 for every norm weight -- RMSNorm and LayerNorm -- and 0.1 for every bias, LayerNorm
biases included) so outputs are O(1) and a wrong implementation cannot hide in tiny numbers.
"""

import argparse
import hashlib
import json
import os
import shutil
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import numpy as np
import PIL

try:
    import torchvision
except ImportError as e:
    raise SystemExit("torchvision is needed (see the module docstring): " + str(e))
import safetensors
import safetensors.torch
import tokenizers
import torch
import transformers
from PIL import Image
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import (
    AutoImageProcessor,
    AutoModelForImageTextToText,
    AutoProcessor,
    GenerationConfig,
    PreTrainedTokenizerFast,
    Qwen2_5_VLConfig,
    Qwen2VLConfig,
)
from transformers.models.qwen2_5_vl.processing_qwen2_5_vl import Qwen2_5_VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil, smart_resize
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids, get_vision_window_index

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parent.parent
PATCH, TEMPORAL, MERGE = 14, 2, 2
FACTOR = PATCH * MERGE  # 28: image sides that need no resize are multiples of this
MIN_PIXELS = 2 * FACTOR * FACTOR  # 1568 = 28x56
MAX_PIXELS = 12 * FACTOR * FACTOR  # 9408 = 84x112

# ---- tokenizer: a 500-token byte-level BPE, then Qwen2-VL's added specials (in Qwen's order) at 500.. ----
BPE_VOCAB = 500
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
            "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
IDS = {tok: BPE_VOCAB + i for i, tok in enumerate(SPECIALS)}
VOCAB = 512  # model vocab (padded, as the Hub models pad theirs)

CHAT_TEMPLATE = """{%- set image_count = namespace(value=0) -%}
{%- for message in messages -%}
{%- if loop.first and message['role'] != 'system' -%}
<|im_start|>system
You are a helpful assistant.<|im_end|>
{% endif -%}
<|im_start|>{{ message['role'] }}
{% if message['content'] is string -%}
{{ message['content'] }}
{%- else -%}
{%- for content in message['content'] -%}
{%- if content['type'] == 'image' or 'image' in content or 'image_url' in content -%}
{%- set image_count.value = image_count.value + 1 -%}
{%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
<|vision_start|><|image_pad|><|vision_end|>
{%- elif 'text' in content -%}
{{ content['text'] }}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}"""


def corpus():
    lines = []
    for a in range(0, 100, 9):
        for b in range(3, 100, 13):
            lines.append(f"What is {a} + {b}? {a}+{b}={a + b}. The answer is {a + b}.")
    english = [
        "You are a helpful assistant.",
        "Describe the image. What is in this picture?",
        "Compare the two images and say what changed between them.",
        "The picture shows a red square, a blue circle and green stripes on a grey background.",
        "There is a small gradient in the top left corner and a checkerboard at the bottom.",
        "Count the objects, then describe their colours and positions carefully.",
        "The quick brown fox jumps over the lazy dog.",
        "Hello! How are you today? I am fine, thank you.",
        "Please look closely at every region of the photograph before answering the question.",
        "A yellow triangle sits beside an orange rectangle; behind them, purple waves cross a white sky.",
        "Which shape is largest? Where is the brightest pixel? Explain your reasoning step by step.",
        "Images are split into patches, merged into tokens, and placed between vision markers.",
        "The system message comes first; then the user asks and the assistant answers.",
    ]
    return lines + english * 8


def build_tokenizer():
    pattern = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
               r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(), trainer=trainer)
    assert tok.get_vocab_size() == BPE_VOCAB, tok.get_vocab_size()
    tok.add_special_tokens(SPECIALS)
    for t, i in IDS.items():
        assert tok.token_to_id(t) == i, (t, tok.token_to_id(t), i)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   padding_side="left")


def image_processor():
    return Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS, patch_size=PATCH,
                                    temporal_patch_size=TEMPORAL, merge_size=MERGE)


# ---- deterministic test images ----

def pattern(h, w, seed, mode="RGB"):
    """A mix of gradients, stripes, a disc and seeded noise: every patch differs from its neighbours."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    cy, cx, r = h * rng.uniform(0.3, 0.7), w * rng.uniform(0.3, 0.7), min(h, w) * rng.uniform(0.2, 0.4)
    disc = ((y - cy) ** 2 + (x - cx) ** 2 < r * r).astype(np.float64)
    period = rng.randint(3, 9)
    red = 255 * x / max(w - 1, 1)
    green = 255 * (((x + 2 * y) // period) % 2)
    blue = 255 * y / max(h - 1, 1) * (1 - disc) + 255 * disc * rng.uniform(0.2, 1.0)
    img = np.stack([red, green, blue], -1) + rng.normal(0, 20, (h, w, 3))
    img = np.clip(np.round(img), 0, 255).astype(np.uint8)
    if mode == "L":
        return Image.fromarray(img[..., 1] // 2 + img[..., 0] // 2, mode="L")
    if mode == "RGBA":
        alpha = np.clip(255 * (0.25 + 0.75 * x / max(w - 1, 1)) * (1 - 0.5 * disc), 0, 255).astype(np.uint8)
        return Image.fromarray(np.concatenate([img, alpha[..., None]], -1), mode="RGBA")
    return Image.fromarray(img, mode="RGB")


def save_png(img, path):
    path.parent.mkdir(parents=True, exist_ok=True)
    img.save(path, format="PNG", optimize=False, compress_level=9)
    return Image.open(path)  # what a user would pass: the decoded file


# (name, height, width, mode); the first 10 are multiples of 28 within [MIN_PIXELS, MAX_PIXELS]
PROCESSOR_IMAGES = [
    ("rgb_28x56", 28, 56, "RGB"),
    ("rgb_56x28", 56, 28, "RGB"),
    ("rgb_56x56", 56, 56, "RGB"),
    ("rgb_28x84", 28, 84, "RGB"),
    ("rgb_84x28", 84, 28, "RGB"),
    ("rgb_56x84", 56, 84, "RGB"),
    ("grey_84x56", 84, 56, "L"),
    ("rgba_84x84", 84, 84, "RGBA"),
    ("rgb_28x112", 28, 112, "RGB"),
    ("rgb_112x84", 112, 84, "RGB"),  # exactly MAX_PIXELS
    ("odd_45x61", 45, 61, "RGB"),  # rounds to 56x56
    ("odd_33x97", 33, 97, "RGB"),  # rounds to 28x84
    ("small_20x20", 20, 20, "RGB"),  # below MIN_PIXELS: scaled up to 56x56
    ("big_130x150", 130, 150, "RGB"),  # above MAX_PIXELS: scaled down to 84x84
]


def processor_goldens(out, versions):
    dst = out / "processor"
    shutil.rmtree(dst / "images", ignore_errors=True)
    dst.mkdir(parents=True, exist_ok=True)
    ip = image_processor()
    ip.save_pretrained(dst)
    ip = AutoImageProcessor.from_pretrained(dst, backend="pil")
    assert type(ip).__name__ == "Qwen2VLImageProcessorPil", type(ip)
    tensors, records, images = {}, [], {}
    for index, (name, h, w, mode) in enumerate(PROCESSOR_IMAGES):
        img = save_png(pattern(h, w, 2000 + index, mode), dst / "images" / f"{name}.png")
        images[name] = img
        res = ip(images=img, return_tensors="pt")
        rh, rw = smart_resize(h, w, factor=FACTOR, min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
        grid = res["image_grid_thw"]
        assert grid.tolist() == [[1, rh // PATCH, rw // PATCH]], (name, grid, rh, rw)
        tensors[f"{name}.pixel_values"] = res["pixel_values"].contiguous()
        tensors[f"{name}.image_grid_thw"] = grid
        records.append({"name": name, "file": f"images/{name}.png", "mode": mode, "height": h, "width": w,
                        "resized_height": rh, "resized_width": rw, "needs_resize": (rh, rw) != (h, w),
                        "image_grid_thw": grid[0].tolist(), "pixel_values_shape": list(res["pixel_values"].shape)})
    assert sum(not r["needs_resize"] for r in records) == 10
    safetensors.torch.save_file(tensors, str(dst / "expected.safetensors"), metadata={"format": "pt"})
    resample = PIL.Image.Resampling(ip.resample)
    expected = {
        "generated_by": "scripts/make_vlm_fixtures.py",
        "versions": versions,
        "image_processor_class": type(ip).__name__,
        "backend": ip.backend,
        "resample": {"name": resample.name, "pil_value": int(resample),
                     "note": "PIL Image.resize on the uint8 RGB image (after convert_to_rgb), then rescale"},
        "min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "factor": FACTOR,
        "patch_size": ip.patch_size, "temporal_patch_size": ip.temporal_patch_size, "merge_size": ip.merge_size,
        "rescale_factor": ip.rescale_factor, "image_mean": list(ip.image_mean), "image_std": list(ip.image_std),
        "pipeline": [
            "convert_to_rgb: RGB as is; L -> RGB by PIL convert; images with alpha are alpha-composited over "
            "opaque white (PIL alpha_composite) and then converted to RGB",
            "smart_resize(h, w, factor=28, min_pixels, max_pixels); PIL resize with BICUBIC to (rh, rw) on uint8 "
            "(PIL returns a copy when the size is unchanged)",
            "rescale: float32(float64(u8) * rescale_factor)",
            "normalize: (x - float32(mean)) / float32(std) in float32, per channel",
            "patchify: [C, rh, rw] -> [gh/m, gw/m, m, m, C, T, p, p] (the frame repeated T=2 times) -> "
            "[gh*gw, C*T*p*p]; rows are in merge-block order (2x2 blocks, row-major within and across blocks)",
        ],
        "images": records,
        "torchvision_backend": fast_comparison(dst, images, tensors),
    }
    (dst / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    return dst


def fast_comparison(dst, images, reference):
    """How far transformers' torchvision image processor is from the PIL one on the same files."""
    fast = AutoImageProcessor.from_pretrained(dst, backend="torchvision")
    rows = []
    for name, img in images.items():
        res = fast(images=img, return_tensors="pt")
        ref = reference[f"{name}.pixel_values"]
        same_grid = res["image_grid_thw"].tolist() == reference[f"{name}.image_grid_thw"].tolist()
        diff = (res["pixel_values"] - ref).abs() if same_grid else None
        # one uint8 step in normalised units is 1/255/std (std ~0.26..0.28)
        rows.append({"name": name, "same_grid": same_grid,
                     "max_abs_diff": None if diff is None else float(diff.max()),
                     "mean_abs_diff": None if diff is None else float(diff.mean()),
                     "fraction_differing": None if diff is None else float((diff > 0).float().mean()),
                     "fraction_differing_over_1e-3": None if diff is None else float((diff > 1e-3).float().mean())})
    return {"class": type(fast).__name__, "resample": str(fast.resample),
            "note": "max/mean abs difference of pixel_values from the PIL reference (one uint8 step is "
                    "1/255/std ~ 0.0146 in normalised units)", "images": rows}


# ---- models ----

TEXT = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-6, bos_token_id=IDS["<|endoftext|>"],
            eos_token_id=IDS["<|im_end|>"], pad_token_id=IDS["<|endoftext|>"],
            rope_parameters={"rope_type": "default", "rope_theta": 100.0, "mrope_section": [2, 3, 3]})
TOKEN_IDS = dict(image_token_id=IDS["<|image_pad|>"], video_token_id=IDS["<|video_pad|>"],
                 vision_start_token_id=IDS["<|vision_start|>"], vision_end_token_id=IDS["<|vision_end|>"])


def qwen2_vl_config():
    vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=4, patch_size=PATCH,
                  temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE)
    return Qwen2VLConfig(text_config=TEXT, vision_config=vision, **TOKEN_IDS)


def qwen2_5_vl_config():
    # window_size 56 -> 56 // 2 // 14 = 2 merged tokens per window side: llm grids of 2x3 and 3x2 need padding.
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, out_hidden_size=64, num_heads=2,
                  hidden_act="silu", patch_size=PATCH, temporal_patch_size=TEMPORAL, spatial_merge_size=MERGE,
                  window_size=56, fullatt_block_indexes=[1], tokens_per_second=2)
    return Qwen2_5_VLConfig(text_config=TEXT, vision_config=vision, **TOKEN_IDS)


def flat_v4_config(nested):
    """The nested config rewritten the way the Hub's transformers-4 Qwen2-VL checkpoints have it."""
    text, vision = nested["text_config"], nested["vision_config"]
    rope = text["rope_parameters"]
    return {
        "architectures": nested["architectures"],
        "attention_dropout": text["attention_dropout"],
        "bos_token_id": text["bos_token_id"],
        "eos_token_id": text["eos_token_id"],
        "vision_start_token_id": nested["vision_start_token_id"],
        "vision_end_token_id": nested["vision_end_token_id"],
        "vision_token_id": IDS["<|vision_pad|>"],
        "image_token_id": nested["image_token_id"],
        "video_token_id": nested["video_token_id"],
        "hidden_act": text["hidden_act"],
        "hidden_size": text["hidden_size"],
        "initializer_range": text["initializer_range"],
        "intermediate_size": text["intermediate_size"],
        "max_position_embeddings": text["max_position_embeddings"],
        "max_window_layers": text["num_hidden_layers"],
        "model_type": "qwen2_vl",
        "num_attention_heads": text["num_attention_heads"],
        "num_hidden_layers": text["num_hidden_layers"],
        "num_key_value_heads": text["num_key_value_heads"],
        "rms_norm_eps": text["rms_norm_eps"],
        "rope_theta": rope["rope_theta"],
        "sliding_window": 32768,
        "tie_word_embeddings": nested["tie_word_embeddings"],
        "torch_dtype": "float32",
        "transformers_version": "4.41.2",
        "use_cache": True,
        "use_sliding_window": False,
        "vision_config": {
            "depth": vision["depth"],
            "embed_dim": vision["embed_dim"],
            "mlp_ratio": vision["mlp_ratio"],
            "num_heads": vision["num_heads"],
            "in_chans": vision["in_channels"],
            "hidden_size": vision["hidden_size"],
            "patch_size": vision["patch_size"],
            "spatial_merge_size": vision["spatial_merge_size"],
            "spatial_patch_size": vision["patch_size"],
            "temporal_patch_size": vision["temporal_patch_size"],
        },
        "rope_scaling": {"type": "mrope", "mrope_section": rope["mrope_section"]},
        "vocab_size": text["vocab_size"],
    }


def randomise(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif p.ndim == 1:  # RMSNorm and LayerNorm weights
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen) / p.shape[1] ** 0.5)
            else:  # Linear [out, in] and the Conv3d [out, C, T, p, p]: 1/sqrt(fan_in)
                p.copy_(torch.randn(p.shape, generator=gen) / p[0].numel() ** 0.5)


def save_processor_files(dst, proc_cls, tokenizer, hub_v4):
    """The Hub layout: preprocessor_config.json (naming the processor class), tokenizer files, chat template.

    transformers 5's `processor.save_pretrained` would instead write one processor_config.json with the image
    and video processors nested in it; the Hub checkpoints have the separate files. `hub_v4` writes the
    preprocessor config the way the Hub's Qwen2-VL repos have it (min_pixels / max_pixels at the top level,
    no size, no resample) and the template as chat_template.json."""
    ip = image_processor()
    ip.save_pretrained(dst)
    cfg = json.loads((dst / "preprocessor_config.json").read_text())
    if hub_v4:
        cfg = {"min_pixels": MIN_PIXELS, "max_pixels": MAX_PIXELS, "patch_size": PATCH,
               "temporal_patch_size": TEMPORAL, "merge_size": MERGE, "image_mean": cfg["image_mean"],
               "image_std": cfg["image_std"], "image_processor_type": cfg["image_processor_type"]}
    cfg["processor_class"] = proc_cls.__name__
    (dst / "preprocessor_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if hub_v4:
        tokenizer.save_pretrained(dst)
        (dst / "chat_template.json").write_text(json.dumps({"chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    else:
        tokenizer.chat_template = CHAT_TEMPLATE
        tokenizer.save_pretrained(dst)


def messages():
    """Row 0: two images of different grids (one non-square); row 1: one non-square image; row 2: text only."""
    return [
        [{"role": "user", "content": [
            {"type": "image"}, {"type": "text", "text": "Compare the two images."},
            {"type": "image"}, {"type": "text", "text": "What changed?"}]}],
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe the image."}]}],
        [{"role": "user", "content": "What is 12 + 30?"}],
    ]


BATCH_IMAGES = [("a_56x84", 56, 84), ("b_56x56", 56, 56), ("c_84x56", 84, 56)]  # row 0: a, b; row 1: c
ROW_IMAGES = [[0, 1], [2], []]
COMPLETION_LENS = [5, 7]
NEW_TOKENS = 8


def completion_logprobs(model, processor, prompts_text, images, gen):
    """Right-padded prompt ++ completion rows (the two image rows) and the log-prob of each completion token."""
    enc = processor(text=prompts_text, images=images, padding=True, padding_side="right", return_tensors="pt")
    prompt_ids = [enc["input_ids"][i][enc["attention_mask"][i].bool()].tolist() for i in range(len(prompts_text))]
    completions = [torch.randint(0, BPE_VOCAB, (n,), generator=gen).tolist() for n in COMPLETION_LENS]
    width = max(len(p) + len(c) for p, c in zip(prompt_ids, completions))
    ids = torch.full((len(prompt_ids), width), IDS["<|endoftext|>"], dtype=torch.long)
    mask = torch.zeros_like(ids)
    types = torch.zeros_like(ids, dtype=enc["mm_token_type_ids"].dtype)
    for i, (p, c) in enumerate(zip(prompt_ids, completions)):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        mask[i, : len(p) + len(c)] = 1
        types[i, : len(p)] = torch.tensor([1 if t == IDS["<|image_pad|>"] else 0 for t in p])
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, mm_token_type_ids=types, pixel_values=enc["pixel_values"],
                       image_grid_thw=enc["image_grid_thw"]).logits.float()
    logp = logits.log_softmax(-1)
    out = [[logp[i, len(p) + j - 1, tok].item() for j, tok in enumerate(c)]
           for i, (p, c) in enumerate(zip(prompt_ids, completions))]
    return prompt_ids, completions, out, {"lp_input_ids": ids, "lp_attention_mask": mask, "lp_mm_token_type_ids": types}


def greedy(model, enc, use_cache=True):
    model.model.rope_deltas = None
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=NEW_TOKENS, do_sample=False, use_cache=use_cache,
                             temperature=None, top_p=None, top_k=None)
    return out[:, enc["input_ids"].shape[1]:].tolist()


def argmax_loop(model, enc):
    """Greedy decoding by hand: a full forward pass per token (no cache), argmax of the last logits."""
    ids, types = enc["input_ids"], enc["mm_token_type_ids"]
    new = []
    for _ in range(NEW_TOKENS):
        model.model.rope_deltas = None
        with torch.no_grad():
            logits = model(input_ids=ids, attention_mask=torch.ones_like(ids), mm_token_type_ids=types,
                           pixel_values=enc["pixel_values"], image_grid_thw=enc["image_grid_thw"]).logits
        tok = int(logits[0, -1].argmax())
        new.append(tok)
        ids = torch.cat([ids, torch.tensor([[tok]])], 1)
        types = torch.cat([types, torch.zeros((1, 1), dtype=types.dtype)], 1)
    return new


def vision_reference(model, pixel_values, grid, is_2_5):
    visual = model.model.visual
    cfg = visual.config
    t = {}
    pos = get_vision_position_ids(grid, cfg.spatial_merge_size)
    t["vision_position_ids"] = pos
    t["cu_seqlens"] = get_vision_cu_seqlens(grid)
    with torch.no_grad():
        patches = visual.patch_embed(pixel_values)
        t["patch_embeds"] = patches
        cos, sin = visual.rotary_pos_emb(patches, pos)
        if is_2_5:
            window_index, cu_window = get_vision_window_index(grid, cfg.spatial_merge_size, cfg.window_size,
                                                              cfg.patch_size)
            t["window_index"], t["cu_window_seqlens"] = window_index, cu_window
            n = patches.shape[0]
            cos = visual.permute_input_for_window_attn(cos, window_index, n)
            sin = visual.permute_input_for_window_attn(sin, window_index, n)
        t["vision_cos"], t["vision_sin"] = cos, sin
        out = visual(pixel_values, grid_thw=grid)
        t["vision_hidden"] = out.last_hidden_state
        t["image_embeds"] = out.pooler_output
        feats = model.model.get_image_features(pixel_values, grid).pooler_output
        assert torch.equal(torch.cat(feats), out.pooler_output)
    return t


def key_examples(path):
    with safetensors.safe_open(str(path), "pt") as f:
        keys = sorted(f.keys())
    kinds = {"patch_embed": "patch_embed", "vision_qkv": "attn.qkv.weight", "vision_norm": "blocks.0.norm1",
             "vision_mlp": "blocks.0.mlp", "merger": "merger", "embed_tokens": "embed_tokens",
             "language_layers": "layers.0.self_attn.q_proj.weight", "final_norm": "model.norm", "lm_head": "lm_head"}
    return {kind: [k for k in keys if pat in k] for kind, pat in kinds.items()}, len(keys)


def build_model_fixture(out, name, seed, config, proc_cls, versions, source=None):
    dst = out / name
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    gen = torch.Generator().manual_seed(seed)
    tokenizer = build_tokenizer()
    if source is None:
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
        randomise(model, gen)
        model.save_pretrained(dst)
        GenerationConfig(bos_token_id=IDS["<|endoftext|>"], pad_token_id=IDS["<|endoftext|>"],
                         eos_token_id=[IDS["<|im_end|>"], IDS["<|endoftext|>"]], do_sample=True,
                         temperature=0.7, top_p=0.8, top_k=20).save_pretrained(dst)
    else:  # the same weights, the config rewritten in the flat v4 layout
        for f in ("model.safetensors", "generation_config.json"):
            shutil.copy(out / source / f, dst / f)
        nested = json.loads((out / source / "config.json").read_text())
        (dst / "config.json").write_text(json.dumps(flat_v4_config(nested), indent=2) + "\n")
        randomise(AutoModelForImageTextToText.from_config(qwen2_vl_config()), gen)  # same draws as the source
    save_processor_files(dst, proc_cls, tokenizer, hub_v4=source is not None)

    ref = AutoModelForImageTextToText.from_pretrained(dst, dtype=torch.float32, attn_implementation="sdpa").eval()
    proc = AutoProcessor.from_pretrained(dst)
    default_image_processor = type(proc.image_processor).__name__
    assert type(proc).__name__ == proc_cls.__name__, type(proc)
    # AutoProcessor(backend="pil") would ask the video processor for a PIL backend too, which it has not
    proc.image_processor = AutoImageProcessor.from_pretrained(dst, backend="pil")
    assert type(proc.image_processor).__name__ == "Qwen2VLImageProcessorPil", type(proc.image_processor)
    assert proc.chat_template == CHAT_TEMPLATE
    assert proc.tokenizer.convert_tokens_to_ids(SPECIALS) == [IDS[t] for t in SPECIALS]
    is_2_5 = ref.config.model_type == "qwen2_5_vl"

    images = [save_png(pattern(h, w, 4000 + i), dst / "images" / f"{n}.png")
              for i, (n, h, w) in enumerate(BATCH_IMAGES)]
    msgs = messages()
    prompts = [proc.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in msgs]
    enc = proc(text=prompts, images=images, padding=True, padding_side="left", return_tensors="pt")
    # the chat template's tokenize=True path with the images inline gives the same ids and pixels (row 1)
    inline = [{"role": "user", "content": [{"type": "image", "image": images[2]},
                                           {"type": "text", "text": "Describe the image."}]}]
    direct = proc.apply_chat_template(inline, tokenize=True, add_generation_prompt=True, return_dict=True,
                                      return_tensors="pt")
    row1 = proc(text=prompts[1:2], images=images[2:3], return_tensors="pt")
    assert torch.equal(direct["input_ids"], row1["input_ids"]), (direct["input_ids"], row1["input_ids"])
    assert torch.equal(direct["pixel_values"], row1["pixel_values"])

    with torch.no_grad():
        position_ids, rope_deltas = ref.model.get_rope_index(
            enc["input_ids"], mm_token_type_ids=enc["mm_token_type_ids"], image_grid_thw=enc["image_grid_thw"],
            attention_mask=enc["attention_mask"])
        ref.model.rope_deltas = None
        logits = ref(**enc).logits.float()
        ref.model.rope_deltas = None
        explicit = ref(**enc, position_ids=position_ids).logits.float()
    assert torch.equal(logits, explicit)
    tensors = {
        "input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
        "mm_token_type_ids": enc["mm_token_type_ids"], "pixel_values": enc["pixel_values"],
        "image_grid_thw": enc["image_grid_thw"], "position_ids": position_ids, "rope_deltas": rope_deltas,
        **vision_reference(ref, enc["pixel_values"], enc["image_grid_thw"], is_2_5),
        "logits": logits,
    }
    # completion log-probs after the two image prompts
    image_rows = [i for i, r in enumerate(ROW_IMAGES) if r]
    lp_images = [images[j] for i in image_rows for j in ROW_IMAGES[i]]
    ref.model.rope_deltas = None
    lp_prompts, completions, logprobs, lp_tensors = completion_logprobs(
        ref, proc, [prompts[i] for i in image_rows], lp_images, gen)
    tensors.update(lp_tensors)
    # greedy generation: row 1 alone (no padding), then the whole left-padded batch
    single = greedy(ref, row1)
    single_no_cache = greedy(ref, row1, use_cache=False)
    single_by_hand = argmax_loop(ref, row1)
    assert single[0] == single_no_cache[0] == single_by_hand, (single, single_no_cache, single_by_hand)
    batch = greedy(ref, enc)
    alone = []
    for i, m in enumerate(msgs):
        imgs = [images[j] for j in ROW_IMAGES[i]]
        e = proc(text=prompts[i:i + 1], images=imgs or None, return_tensors="pt")
        alone.append(greedy(ref, e)[0])
    tensors = {k: v.contiguous() for k, v in tensors.items()}
    safetensors.torch.save_file(tensors, str(dst / "expected.safetensors"), metadata={"format": "pt"})

    keys, n_keys = key_examples(dst / "model.safetensors")
    expected = {
        "generated_by": "scripts/make_vlm_fixtures.py",
        "versions": versions,
        "model_class": type(ref).__name__,
        "processor_class": type(proc).__name__,
        "image_processor_class": type(proc.image_processor).__name__,
        "autoprocessor_default_image_processor": default_image_processor,
        "special_token_ids": IDS,
        "messages": msgs,
        "prompts": prompts,
        "chat_template_renderings": {
            "row1_add_generation_prompt": prompts[1],
            "row1_no_generation_prompt": proc.apply_chat_template(msgs[1], tokenize=False),
            "row0_add_vision_id": proc.apply_chat_template(msgs[0], tokenize=False, add_generation_prompt=True,
                                                           add_vision_id=True),
            "with_system": proc.apply_chat_template(
                [{"role": "system", "content": "Be brief."}] + msgs[1], tokenize=False, add_generation_prompt=True),
        },
        "batch": {"padding_side": "left", "images": [{"file": f"images/{n}.png", "height": h, "width": w}
                                                     for n, h, w in BATCH_IMAGES],
                  "row_images": ROW_IMAGES, "image_grid_thw": enc["image_grid_thw"].tolist(),
                  "seq_len": enc["input_ids"].shape[1]},
        "completion_logprobs_rows": image_rows,
        "completion_prompt_ids": lp_prompts,
        "completions": completions,
        "completion_logprobs": logprobs,
        "generate": {"max_new_tokens": NEW_TOKENS, "do_sample": False, "use_cache": True,
                     "single": {"row": 1, "input_ids": row1["input_ids"][0].tolist(), "new_tokens": single[0],
                                "equals_no_cache_and_argmax_loop": True},
                     "batch_left_padded": batch, "each_row_alone": alone,
                     "batch_equals_rows_alone": batch == alone},
        "weight_keys": {"count": n_keys, **keys},
    }
    if source is not None:
        expected["same_weights_as"] = source
        expected["config_layout"] = "flat transformers-4 Hub layout (hand-written from the nested config)"
    if is_2_5:
        expected["vision_window"] = {"window_size": ref.config.vision_config.window_size,
                                     "fullatt_block_indexes": list(ref.config.vision_config.fullatt_block_indexes),
                                     "merged_tokens_per_window_side": ref.config.vision_config.window_size // MERGE // PATCH}
    (dst / "expected.json").write_text(json.dumps(expected, indent=1, ensure_ascii=False) + "\n")
    size = sum(f.stat().st_size for f in dst.rglob("*") if f.is_file())
    print(f"{name:14s} {size / 1024:7.1f} KiB  seq {enc['input_ids'].shape[1]}  logits |max| "
          f"{logits.abs().max():.3f}  image_embeds |max| {tensors['image_embeds'].abs().max():.3f}  "
          f"batch==alone {batch == alone}")
    return tensors, expected


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(ROOT / "fixtures" / "hf" / "vlm"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    versions = {"torch": torch.__version__.split("+")[0], "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__, "safetensors": safetensors.__version__,
                "pillow": PIL.__version__, "numpy": np.__version__,
                "torchvision": torchvision.__version__.split("+")[0]}
    processor_goldens(out, versions)
    nested, nested_json = build_model_fixture(out, "qwen2_vl", 3000, qwen2_vl_config(), Qwen2VLProcessor, versions)
    # the flat-config fixture must give bit-identical results (same seed, so the same completions too)
    flat, flat_json = build_model_fixture(out, "qwen2_vl_flat", 3000, None, Qwen2VLProcessor, versions,
                                          source="qwen2_vl")
    same = {k: torch.equal(nested[k], flat[k]) for k in nested}
    assert nested.keys() == flat.keys() and all(same.values()), {k: v for k, v in same.items() if not v}
    for k in ("same_weights_as", "config_layout"):
        flat_json.pop(k)
    assert nested_json == flat_json
    build_model_fixture(out, "qwen2_5_vl", 3002, qwen2_5_vl_config(), Qwen2_5_VLProcessor, versions)
    digest = hashlib.sha256()
    for f in sorted(p for p in out.rglob("*") if p.is_file()):
        digest.update(f.relative_to(out).as_posix().encode() + b"\0" + f.read_bytes())
    print("sha256 of all files:", digest.hexdigest())


if __name__ == "__main__":
    main()
