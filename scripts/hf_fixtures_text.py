#!/usr/bin/env python3
"""Build the text-side Hugging Face fixtures for reinforge-hf (tokenizers, chat templates, generation configs).

Run with the project's venv: `.venv/bin/python scripts/hf_fixtures_text.py` (transformers 5.x, tokenizers).

It trains three tiny tokenizers (vocab <= 512, so they fit the fixture models' vocab_size of 512) on a fixed,
deterministic corpus with the `tokenizers` library, attaches chat templates that we wrote ourselves in three common
styles, and saves each with transformers' own `save_pretrained` into fixtures/hf/text/<name>/:

  chatml_bpe     byte-level BPE (Qwen2-like pre-tokenizer), ChatML-style template with a default system message,
                 saved the transformers-5 way (template in chat_template.jinja), eos ids a list.
  llama3_bpe     byte-level BPE (3-digit number split), header-token template with bos and optional tools (tojson),
                 template stored as a string in tokenizer_config.json.
  mistral_uni    Unigram + Metaspace (sentencepiece-like), [INST]-style template that folds the system message into
                 the first user turn and raises on bad roles; templates stored as a list of named templates in
                 tokenizer_config.json, special tokens written as AddedToken dicts (older transformers layout)
                 plus a special_tokens_map.json.

Then it reloads every directory with AutoTokenizer (as a user would) and records, for a fixed set of conversations,
apply_chat_template(tokenize=False) strings and tokenize=True ids for add_generation_prompt true/false, the errors
raised by raise_exception, and encode/decode results of sample texts, into fixtures/hf/text/expected.json together
with the library versions. The Rust tests in crates/reinforge-hf/tests/ compare against that file byte for byte.
"""
import json
import os
import shutil
import sys

# Single-threaded training: the Unigram trainer's result depends on thread scheduling otherwise.
os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

import tokenizers
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, GenerationConfig, PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fixtures", "hf", "text")
VOCAB = 512

# A deterministic corpus: arithmetic in the task's style, short English, chat-ish phrases, some unicode.
def corpus():
    lines = []
    for a in range(0, 100, 7):
        for b in range(3, 100, 11):
            lines.append(f"What is {a} + {b}? {a}+{b}={a + b}. The answer is {a + b}.")
            lines.append(f"Compute {a * 13} - {b}: the result is {a * 13 - b}.")
    english = [
        "The quick brown fox jumps over the lazy dog.",
        "You are a helpful assistant. Answer briefly and show your work.",
        "Hello! How are you today? I am fine, thank you.",
        "Please add the two numbers, then check the result carefully.",
        "Let's think step by step about the question before answering.",
        "She said: \"don't worry, it's only a test\" and they'll see.",
        "Tabs\tand\nnewlines\n\nare whitespace too.",
    ]
    unicode = ["café naïve résumé", "Größe über Straße", "日本語のテキスト", "Ω ≈ π × r²", "emoji 😀 🚀 ok"]
    lines += english * 8 + unicode * 4
    return lines


def byte_level_bpe(specials, digit_group):
    """Byte-level BPE with a Qwen2 / Llama-3 style split regex (digits one at a time or in groups of up to 3)."""
    pattern = (
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|" + digit_group
        + r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    return tok


def unigram_metaspace(specials):
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    tok.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True)
    trainer = trainers.UnigramTrainer(
        vocab_size=VOCAB, special_tokens=specials, unk_token="<unk>", show_progress=False, max_piece_length=8,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    # The trainer sums scores in hash-map order, so the last digits (and the order of near-ties) vary between
    # runs (by up to ~1e-4 for rare pieces). Round the scores to 2 decimals and sort the learnt pieces by
    # (score, piece) so the fixture is reproducible.
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    n = len(specials)
    learnt = sorted(([p, round(sc, 2)] for p, sc in vocab[n:]), key=lambda x: (-x[1], x[0]))
    spec["model"]["vocab"] = vocab[:n] + learnt
    return Tokenizer.from_str(json.dumps(spec))


# ---- chat templates (written for these fixtures; they only imitate the general layout of each family) ----

CHATML = """{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set system_text = messages[0]['content'] | trim -%}
    {%- set turns = messages[1:] -%}
{%- else -%}
    {%- set system_text = 'You are a careful assistant. Show your work.' -%}
    {%- set turns = messages -%}
{%- endif -%}
<|im_start|>system
{{ system_text }}<|im_end|>
{% for m in turns %}
    {%- if m.role not in ['user', 'assistant'] %}
        {{- raise_exception('Unsupported role: ' ~ m.role) }}
    {%- endif %}
<|im_start|>{{ m.role }}
{{ m.content.strip() }}<|im_end|>
{% endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

LLAMA3 = """{{- bos_token }}
{%- set ns = namespace(system='', start=0) %}
{%- if messages[0]['role'] == 'system' %}
    {%- set ns.system = messages[0]['content'] %}
    {%- set ns.start = 1 %}
{%- endif %}
{%- if ns.system or tools is not none %}
<|start_header_id|>system<|end_header_id|>

{{ ns.system | trim }}
{%- if tools is not none %}

Tools ({{ tools | length }}):
{% for t in tools %}
{{ t | tojson(indent=2) }}
{{ t['function'] | tojson }}
{% endfor %}
{%- endif %}<|eot_id|>
{%- endif %}
{%- for m in messages[ns.start:] %}
<|start_header_id|>{{ m['role'] }}<|end_header_id|>

{% if m['role'] == 'assistant' and m.content.startswith('<think>') %}
{{- m.content.split('</think>')[-1].lstrip() }}
{%- else %}
{{- m['content'] | trim }}
{%- endif %}
{%- if loop.last and m['role'] == 'assistant' and not add_generation_prompt %}{{ eos_token }}{% else %}<|eot_id|>{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|start_header_id|>assistant<|end_header_id|>

{% endif %}"""

MISTRAL = """{{- bos_token }}
{%- set ns = namespace(system='', turn=0) %}
{%- for m in messages %}
    {%- if m['role'] == 'system' %}
        {%- if not loop.first %}{{ raise_exception('The system message must come first') }}{% endif %}
        {%- set ns.system = m['content'] %}
    {%- elif m['role'] == 'user' %}
        {%- if ns.turn % 2 != 0 %}{{ raise_exception('Roles must alternate user/assistant') }}{% endif %}
        {{- '[INST] ' }}
        {%- if ns.system and ns.turn == 0 %}{{ ns.system.strip() + '\\n\\n' }}{% endif %}
        {{- m['content'] | trim }} [/INST]
        {%- set ns.turn = ns.turn + 1 %}
    {%- elif m['role'] == 'assistant' %}
        {%- if ns.turn % 2 != 1 %}{{ raise_exception('Roles must alternate user/assistant') }}{% endif %}
        {{- ' ' + m['content'] | trim + eos_token }}
        {%- set ns.turn = ns.turn + 1 %}
    {%- else %}
        {{- raise_exception('Unknown role ' + m['role']) }}
    {%- endif %}
{%- endfor %}"""

# A second named template: plain "Role: text" lines, iterating dict items with pycompat methods.
# Its first line prints Python values (None, True, a list, floats) the way jinja2 prints them.
MISTRAL_TERSE = """# {{ add_generation_prompt }} {{ messages[0].get('name') }} {{ messages[0].keys() | list }} {{ 0.1 + 0.2 }} {{ 3 / 2 }} {{ 7 // 2 }} {{ {'n': 1, 's': "it's"} }}
{% for m in messages %}
{% for k, v in m.items() %}{% if k == 'role' %}{{ v.upper() }}: {% endif %}{% endfor %}{{ m.get('content', '') | replace('\\n', ' ') }}
{% endfor %}
{% if add_generation_prompt %}ASSISTANT:{% endif %}"""


CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "What is 12 + 30?"}],
    "with_system": [
        {"role": "system", "content": "  You add numbers.  "},
        {"role": "user", "content": "Compute 7+8."},
    ],
    "multi_turn": [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": "Hello! How are you today?"},
        {"role": "assistant", "content": "  I am fine, thank you.\n"},
        {"role": "user", "content": "What is 21 + 21? Show your work."},
        {"role": "assistant", "content": "21+21=42. The answer is 42."},
    ],
    "no_system_multi": [
        {"role": "user", "content": "café naïve 😀"},
        {"role": "assistant", "content": "<think>unicode check</think>\n  Größe über Straße"},
        {"role": "user", "content": "日本語 Ω ≈ π\tand tabs\n\nnewlines"},
    ],
    "bad_role": [
        {"role": "user", "content": "hi"},
        {"role": "robot", "content": "beep"},
    ],
    "late_system": [
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "too late"},
    ],
}

TOOLS = [
    {"type": "function", "function": {
        "name": "add", "description": "Add two integers — exactly.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "number", "default": 0.5}},
                       "required": ["a", "b"]}}},
]

SAMPLES = [
    "What is 12 + 30? 12+30=42.",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces  ",
    "café naïve 😀 日本語 Ω ≈ π",
    "Tabs\tand\nnewlines\n\nend",
    "",
]


GEN_FIELDS = ["do_sample", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "max_new_tokens",
              "max_length", "bos_token_id", "eos_token_id", "pad_token_id"]


def save(name, tok, specials_cfg, template, gen_cfg, save_jinja=True):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **specials_cfg)
    fast.chat_template = template
    fast.save_pretrained(path, save_jinja_files=save_jinja)
    GenerationConfig(**gen_cfg).save_pretrained(path)
    return path


def to_added_token_dicts(path, keys):
    """Rewrite the named special tokens of tokenizer_config.json as AddedToken dicts (older layout) and write a
    special_tokens_map.json in the same form, so the loader's dict branch is exercised on a real save."""
    cfg_path = os.path.join(path, "tokenizer_config.json")
    cfg = json.load(open(cfg_path, encoding="utf-8"))
    stm = {}
    for key in keys:
        if isinstance(cfg.get(key), str):
            d = {"__type": "AddedToken", "content": cfg[key], "lstrip": False, "normalized": False,
                 "rstrip": False, "single_word": False, "special": True}
            cfg[key] = d
            stm[key] = {k: v for k, v in d.items() if k not in ("__type", "special")}
    json.dump(cfg, open(cfg_path, "w", encoding="utf-8"), indent=2, ensure_ascii=False)
    json.dump(stm, open(os.path.join(path, "special_tokens_map.json"), "w", encoding="utf-8"), indent=2,
              ensure_ascii=False)


def record(path, template_names, use_tools):
    tok = AutoTokenizer.from_pretrained(path)
    out = {"class": type(tok).__name__, "vocab_size": len(tok), "special_tokens_map": tok.special_tokens_map,
           "bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id,
           "chats": [], "encode": []}
    for template in template_names:
        for conv_name, conv in CONVERSATIONS.items():
            for agp in (False, True):
                for tools in ([None, TOOLS] if use_tools else [None]):
                    case = {"template": template, "conversation": conv_name, "add_generation_prompt": agp,
                            "tools": tools is not None}
                    try:
                        text = tok.apply_chat_template(conv, tools=tools, chat_template=template, tokenize=False,
                                                       add_generation_prompt=agp)
                        ids = tok.apply_chat_template(conv, tools=tools, chat_template=template, tokenize=True,
                                                      add_generation_prompt=agp, return_dict=False)
                        case.update(text=text, ids=list(ids))
                    except Exception as e:  # raise_exception in the template
                        case.update(error=str(e), error_type=type(e).__name__)
                    out["chats"].append(case)
    gen = GenerationConfig.from_pretrained(path)
    out["generation"] = {k: getattr(gen, k) for k in GEN_FIELDS}
    for s in SAMPLES:
        with_sp = tok.encode(s, add_special_tokens=True)
        without = tok.encode(s, add_special_tokens=False)
        out["encode"].append({
            "text": s, "ids": with_sp, "ids_no_special": without,
            "tokens": tok.convert_ids_to_tokens(without),
            "decode": tok.decode(with_sp, skip_special_tokens=False),
            "decode_skip_special": tok.decode(with_sp, skip_special_tokens=True),
        })
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                "conversations": CONVERSATIONS, "tools": TOOLS, "tokenizers_": {},
                "generation_defaults": {k: v for k, v in GenerationConfig._get_default_generation_params().items()
                                        if k in GEN_FIELDS}}

    # 1. ChatML style, transformers-5 layout (chat_template.jinja), list of stop ids.
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = byte_level_bpe(specials, r"\p{N}")
    p = save("chatml_bpe", tok, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, CHATML,
             {"eos_token_id": [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")],
              "pad_token_id": tok.token_to_id("<|endoftext|>"), "do_sample": True, "temperature": 0.7,
              "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "max_new_tokens": 256})
    expected["tokenizers_"]["chatml_bpe"] = record(p, [None], use_tools=False)

    # 2. Llama-3 style: bos added by the post-processor, template a string in tokenizer_config.json, tools.
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    tok = byte_level_bpe(specials, r"\p{N}{1,3}")
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", bos)])
    p = save("llama3_bpe", tok, {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, LLAMA3,
             {"bos_token_id": bos, "eos_token_id": [tok.token_to_id("<|end_of_text|>"), tok.token_to_id("<|eot_id|>")],
              "do_sample": True, "temperature": 0.6, "top_p": 0.9}, save_jinja=False)
    expected["tokenizers_"]["llama3_bpe"] = record(p, [None], use_tools=True)

    # 3. Mistral style: Unigram + Metaspace, named templates in tokenizer_config.json, AddedToken dicts.
    specials = ["<unk>", "<s>", "</s>"]
    tok = unigram_metaspace(specials)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    p = save("mistral_uni", tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
             {"default": MISTRAL, "terse": MISTRAL_TERSE},
             {"bos_token_id": bos, "eos_token_id": tok.token_to_id("</s>")}, save_jinja=False)
    to_added_token_dicts(p, ["bos_token", "eos_token", "unk_token"])
    expected["tokenizers_"]["mistral_uni"] = record(p, [None, "terse"], use_tools=False)

    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
        f.write("\n")
    for name, rec in expected["tokenizers_"].items():
        errs = sum(1 for c in rec["chats"] if "error" in c)
        print(f"{name}: vocab {rec['vocab_size']}, {len(rec['chats'])} chats ({errs} errors), class {rec['class']}")
    if any(rec["vocab_size"] > VOCAB for rec in expected["tokenizers_"].values()):
        sys.exit("a tokenizer exceeds the fixture models' vocab_size")


if __name__ == "__main__":
    main()
