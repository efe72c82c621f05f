"""Decoding throughput of `reinforge generate` against transformers' `generate`, and the
per-token time of reinforge's sampler early and late in a long generation (the KV cache's
cost), for scripts/bench_decode.sh. CPU, float32, greedy, no end-of-sequence stop, the same
prompts on both sides.

  bench_decode.py run MODEL_DIR BIN EXAMPLE OUT_JSONL   run the rounds (env below), then report
  bench_decode.py hf MODEL_DIR PROMPT_IDS NEW_TOKENS     one transformers measurement (JSON line)
  bench_decode.py report OUT_JSONL                       the report of a finished run

Env: ROWS (32), NEW_TOKENS (128), LONG_TOKENS (256), ROUNDS (3, alternated), LONG_ROUNDS (1),
COMPARE_SDPA (1: reinforge also with REINFORGE_DECODE_ATTENTION=sdpa, alternated),
THREADS (2).

Decode seconds are the time of a NEW_TOKENS run minus the time of a 1-token run of the same
prompts, on each side (`reinforge generate` is timed as a process, so that subtraction also
removes its start-up and model load; transformers is timed in-process around `generate`).
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def env_int(name, default):
    return int(os.environ.get(name, default))


def prompts(rows):
    """`rows` distinct chat prompts (one user message each)."""
    topics = ["the sea", "a clock", "bread", "mountains", "a library", "rain", "trains", "bees"]
    return [[{"role": "user", "content": f"Write a long story about {topics[i % len(topics)]} and the number {i}."}]
            for i in range(rows)]


def load():
    return round(os.getloadavg()[0], 2)


def timed_cli(bin_path, model, prompts_file, new_tokens, threads, env=None):
    """Wall seconds of one `reinforge generate` process over the prompt file (`env`: more
    environment variables)."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as out:
        cmd = [bin_path, "generate", "--model", model, "--input", prompts_file, "--output", out.name,
               "--max-new-tokens", str(new_tokens), "--temperature", "0", "--ignore-eos",
               "--batch-size", "1024", "--threads", str(threads)]
        start = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})})
        seconds = time.perf_counter() - start
        tokens = sum(json.loads(line)["completion_tokens"] for line in open(out.name))
    return seconds, tokens


def run_json(cmd, env=None):
    """The last stdout line of `cmd`, parsed as JSON (`env`: more environment variables)."""
    done = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(model, bin_path, example, out_path):
    rows, new, long_new = env_int("ROWS", 32), env_int("NEW_TOKENS", 128), env_int("LONG_TOKENS", 256)
    rounds, long_rounds, threads = env_int("ROUNDS", 3), env_int("LONG_ROUNDS", 1), env_int("THREADS", 2)
    work = tempfile.mkdtemp(prefix="bench_decode.")
    from transformers import AutoTokenizer  # only for the prompt ids

    tok = AutoTokenizer.from_pretrained(model)
    chats = prompts(rows)
    prompts_file = os.path.join(work, "prompts.jsonl")
    with open(prompts_file, "w") as f:
        for c in chats:
            f.write(json.dumps({"prompt": c}) + "\n")
    ids = [list(tok.apply_chat_template(c, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"])
           for c in chats]
    ids_file = os.path.join(work, "prompt_ids.json")
    json.dump(ids, open(ids_file, "w"))
    # COMPARE_SDPA=1: reinforge also with libtorch's sdpa for decoding attention (the kernel's
    # before), alternated in the same rounds.
    ours_variants = [("", {})]
    if os.environ.get("COMPARE_SDPA") == "1":
        ours_variants.append((" (sdpa attention)", {"REINFORGE_DECODE_ATTENTION": "sdpa"}))
    me = os.path.abspath(__file__)
    py = sys.executable
    with open(out_path, "w") as out:
        def emit(line):
            line = {**line, "rows": rows, "threads": threads}
            print(json.dumps(line), flush=True)
            out.write(json.dumps(line) + "\n")
            out.flush()

        # Each round: the decode comparison, then (in the first LONG_ROUNDS rounds) the long
        # per-token runs, so that a run cut short still reports every case.
        for r in range(max(rounds, long_rounds)):
            if r < rounds:
                for name, env in ours_variants:
                    l0 = load()
                    s1, _ = timed_cli(bin_path, model, prompts_file, 1, threads, env)
                    sn, tokens = timed_cli(bin_path, model, prompts_file, new, threads, env)
                    emit({"case": "decode", "impl": "reinforge generate" + name, "round": r, "new_tokens": new,
                          "tokens": tokens, "seconds": sn, "seconds_1": s1, "load_before": l0,
                          "load_after": load()})
                l0 = load()
                hf = run_json([py, me, "hf", model, ids_file, str(new)])
                emit({"case": "decode", "impl": "transformers", "round": r, "load_before": l0,
                      "load_after": load(), **hf})
            if r < long_rounds:
                for name, env in ours_variants:
                    l0 = load()
                    ours = run_json([example, model, ids_file, str(long_new)], env)
                    ours["impl"] = ours.get("impl", "reinforge sampler") + name
                    emit({"case": "per-token", "round": r, "load_before": l0, "load_after": load(), **ours})
                l0 = load()
                hf = run_json([py, me, "hf", model, ids_file, str(long_new)])
                emit({"case": "per-token", "round": r, "load_before": l0, "load_after": load(), **hf})
    report(out_path)


def hf(model, ids_file, new_tokens):
    """Times transformers' generate: a 1-token run and a NEW_TOKENS run (after a warm-up),
    with a timestamp per decoding step from a logits processor."""
    import torch
    from transformers import AutoModelForCausalLM, LogitsProcessor, LogitsProcessorList

    threads = env_int("THREADS", 2)
    torch.set_num_threads(threads)
    ids = json.load(open(ids_file))
    width = max(map(len, ids))
    pad = 0
    input_ids = torch.tensor([[pad] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    m = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    m.generation_config.eos_token_id = None

    class Stamps(LogitsProcessor):
        def __init__(self):
            self.t = []

        def __call__(self, input_ids, scores):
            self.t.append(time.perf_counter())
            return scores

    def gen(n):
        stamps = Stamps()
        start = time.perf_counter()
        with torch.no_grad():
            out = m.generate(input_ids=input_ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                             do_sample=False, temperature=None, top_p=None, top_k=None, pad_token_id=pad,
                             logits_processor=LogitsProcessorList([stamps]))
        return time.perf_counter() - start, (out.shape[1] - width) * out.shape[0], stamps.t

    gen(2)
    s1, _, _ = gen(1)
    sn, tokens, t = gen(new_tokens)

    def window(frm):
        frm = max(frm, 1)
        end = frm + 32
        return None if end > len(t) else (t[end - 1] - t[frm - 1]) * 1000 / 32

    print(json.dumps({"impl": "transformers", "new_tokens": new_tokens, "tokens": tokens, "seconds": sn,
                      "seconds_1": s1, "first_ms": window(1), "last_ms": window(len(t) - 32)}))


def report(out_path):
    lines = [json.loads(l) for l in open(out_path)]
    loads = [x for l in lines for x in (l["load_before"], l["load_after"])]
    print(f"\n== bench_decode report ({out_path}); load average (1 min) during the run: "
          f"min {min(loads)}, median {statistics.median(loads)}, max {max(loads)}")
    dec = [l for l in lines if l["case"] == "decode"]
    rates = {}
    for impl in sorted({l["impl"] for l in dec}):
        rs = [l for l in dec if l["impl"] == impl]
        tok_s = [l["rows"] * (l["new_tokens"] - 1) / (l["seconds"] - l["seconds_1"]) for l in rs]
        whole = [l["tokens"] / l["seconds"] for l in rs]
        rates[impl] = statistics.median(tok_s)
        print(f"{impl:>18}: decode {statistics.median(tok_s):7.1f} tok/s (median of {len(rs)}: "
              f"{', '.join(f'{x:.1f}' for x in tok_s)}); whole call {statistics.median(whole):.1f} tok/s "
              f"({rs[0]['rows']} rows x {rs[0]['new_tokens']} tokens, {rs[0]['threads']} threads)")
    for impl in [i for i in rates if i.startswith("reinforge")] if "transformers" in rates else []:
        print(f"decode ratio {impl} / transformers: {rates[impl] / rates['transformers']:.2f}x")
    per = [l for l in lines if l["case"] == "per-token" and l.get("first_ms") and l.get("last_ms")]
    for impl in sorted({l["impl"] for l in per}):
        rs = [l for l in per if l["impl"] == impl]
        first = statistics.median(l["first_ms"] for l in rs)
        last = statistics.median(l["last_ms"] for l in rs)
        ratios = [l["last_ms"] / l["first_ms"] for l in rs]
        print(f"{impl:>18}: {rs[0]['rows']} rows x {rs[0]['new_tokens']} tokens: ms per step, first 32 "
              f"{first:.1f}, last 32 {last:.1f}; last/first {statistics.median(ratios):.3f} (median of "
              f"{len(rs)}: {', '.join(f'{x:.3f}' for x in ratios)})")


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "run":
        run(*args)
    elif mode == "hf":
        hf(args[0], args[1], int(args[2]))
    elif mode == "report":
        report(args[0])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
