"""Decoding throughput of `reinforge generate` and of `reinforge serve` (the OpenAI-compatible
policy server) against transformers' `generate`, and the per-token time of reinforge's sampler
early and late in a long generation (the KV cache's cost), for scripts/bench_decode.sh. CPU,
float32, greedy, no end-of-sequence stop, the same prompts on every side (but one form of the
server's, which samples the first prompt n times).

  bench_decode.py run MODEL_DIR BIN EXAMPLE OUT_JSONL   run the rounds (env below), then report
  bench_decode.py hf MODEL_DIR PROMPT_IDS NEW_TOKENS     one transformers measurement (JSON line)
  bench_decode.py report OUT_JSONL                       the report of a finished run

Env: ROWS (32), NEW_TOKENS (128), LONG_TOKENS (256), ROUNDS (3, alternated), LONG_ROUNDS (1),
COMPARE_SDPA (1: `reinforge generate` also with REINFORGE_DECODE_ATTENTION=sdpa, alternated),
SERVE (1; 0 skips the serve cases), THREADS (2).

Each round times `reinforge generate`, then the trainer's sampler in-process (EXAMPLE, its
decoding steps from the first step's stamp to the last), then `reinforge serve` (one server per round, started
on a free port with --threads THREADS, a warm-up request once it is up, stopped with SIGTERM),
then transformers. The server is timed in two forms of /v1/chat/completions requests (greedy,
max_tokens NEW_TOKENS, ignore_eos): "reinforge serve n=ROWS", one request for the first prompt
with n = ROWS; "reinforge serve ROWS clients", ROWS concurrent clients (threads), one request
each for its own prompt, timed from the first send to the last response. usage.completion_tokens
must show NEW_TOKENS tokens for every row (a mismatch is printed, and flagged by the report).

Decode seconds are the time of a NEW_TOKENS run minus the time of a 1-token run of the same
prompts, on each side (`reinforge generate` is timed as a process, so that subtraction also
removes its start-up and model load; the server's forms are timed around their requests, its
start and model load excluded; transformers is timed in-process around `generate`).
"""
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor


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


def start_server(bin_path, model, threads, rows):
    """A `reinforge serve` policy process on a free port, its URL (read from its stderr) and its
    log file, after one small warm-up request."""
    log = tempfile.NamedTemporaryFile(prefix="bench_decode_serve.", suffix=".log")
    cmd = [bin_path, "serve", "--model", model, "--port", "0", "--no-sandbox", "--threads", str(threads),
           "--max-batch-rows", str(max(rows, 64))]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    try:
        url = server_url(proc, log.name)
        warm_up(proc, url)
    except BaseException:
        stop_server(proc, log)
        raise
    return proc, url, log


def server_url(proc, log_path, timeout_s=600):
    """The http://HOST:PORT the server prints on stderr once it listens."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"http://[0-9.:]+", open(log_path).read())
        if found:
            return found.group(0)
        if proc.poll() is not None:
            sys.exit(f"reinforge serve exited ({proc.returncode}):\n{open(log_path).read()}")
        time.sleep(0.2)
    sys.exit(f"reinforge serve printed no URL in {timeout_s} s:\n{open(log_path).read()}")


def warm_up(proc, url, timeout_s=600):
    """One 2-token request, retried until the policy answers (it may still be loading)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return chat(url, chat_body(prompts(1)[0], 2))
        except (urllib.error.URLError, ConnectionError) as e:
            busy = not isinstance(e, urllib.error.HTTPError) or e.code == 503
            if not busy or proc.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def stop_server(proc, log):
    """SIGTERM, then wait (SIGKILL after 60 s); the log goes with it."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log.close()


def chat_body(messages, new_tokens, n=1):
    """A greedy chat-completions request of `n` rows x exactly `new_tokens` tokens."""
    return {"messages": messages, "n": n, "max_tokens": new_tokens, "temperature": 0, "ignore_eos": True}


def chat(url, body):
    """POST /v1/chat/completions; the parsed response."""
    req = urllib.request.Request(url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.loads(r.read())


def timed_serve_n(url, messages, rows, new_tokens):
    """Wall seconds of one request with n = `rows`, its completion tokens, and whether every
    row made `new_tokens` (its choices' count and the usage's total; no row exceeds max_tokens)."""
    start = time.perf_counter()
    resp = chat(url, chat_body(messages, new_tokens, rows))
    seconds = time.perf_counter() - start
    tokens = resp["usage"]["completion_tokens"]
    return seconds, tokens, len(resp["choices"]) == rows and tokens == rows * new_tokens


def timed_serve_clients(url, chats, new_tokens):
    """Wall seconds from the first send to the last response of one request per chat, each
    from its own client thread, their completion tokens, and whether each made `new_tokens`."""
    with ThreadPoolExecutor(len(chats)) as pool:
        start = time.perf_counter()
        resps = list(pool.map(lambda m: chat(url, chat_body(m, new_tokens)), chats))
        seconds = time.perf_counter() - start
    counts = [r["usage"]["completion_tokens"] for r in resps]
    return seconds, sum(counts), all(c == new_tokens for c in counts)


def serve_round(bin_path, model, chats, new, threads):
    """One server: the n=ROWS form, then the ROWS-clients form, each a 1-token and a
    `new`-token run; a decode line per form (load before and after each form)."""
    rows = len(chats)
    proc, url, log = start_server(bin_path, model, threads, rows)
    forms = [(f"reinforge serve n={rows}", lambda n: timed_serve_n(url, chats[0], rows, n)),
             (f"reinforge serve {rows} clients", lambda n: timed_serve_clients(url, chats, n))]
    lines = []
    try:
        for impl, timed in forms:
            l0 = load()
            s1, tokens_1, ok_1 = timed(1)
            sn, tokens, ok = timed(new)
            if not (ok and ok_1):
                print(f"warning: {impl}: completion tokens {tokens_1} (1-token run) and {tokens}, expected "
                      f"{rows} and {rows * new}", file=sys.stderr, flush=True)
            lines.append({"case": "decode", "impl": impl, "new_tokens": new, "tokens": tokens, "seconds": sn,
                          "seconds_1": s1, "tokens_1": tokens_1, "tokens_ok": ok and ok_1, "load_before": l0,
                          "load_after": load()})
    finally:
        stop_server(proc, log)
    return lines


def run(model, bin_path, example, out_path):
    rows, new, long_new = env_int("ROWS", 32), env_int("NEW_TOKENS", 128), env_int("LONG_TOKENS", 256)
    rounds, long_rounds, threads = env_int("ROUNDS", 3), env_int("LONG_ROUNDS", 1), env_int("THREADS", 2)
    serve = os.environ.get("SERVE", "1") != "0"
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

        # Each round: the decode comparison (generate, serve, transformers), then (in the first
        # LONG_ROUNDS rounds) the long per-token runs, so that a run cut short still reports
        # every case.
        for r in range(max(rounds, long_rounds)):
            if r < rounds:
                for name, env in ours_variants:
                    l0 = load()
                    s1, _ = timed_cli(bin_path, model, prompts_file, 1, threads, env)
                    sn, tokens = timed_cli(bin_path, model, prompts_file, new, threads, env)
                    emit({"case": "decode", "impl": "reinforge generate" + name, "round": r, "new_tokens": new,
                          "tokens": tokens, "seconds": sn, "seconds_1": s1, "load_before": l0,
                          "load_after": load()})
                # The trainer's sampler in-process: its decoding steps' seconds (first step's
                # stamp to the last, new - 1 steps), as the 1-token subtraction leaves elsewhere.
                for name, env in ours_variants:
                    l0 = load()
                    ours = run_json([example, model, ids_file, str(new)], env)
                    emit({"case": "decode", "impl": "reinforge sampler" + name, "round": r, "new_tokens": new,
                          "tokens": ours["tokens"], "seconds": ours["decode_seconds"], "seconds_1": 0.0,
                          "load_before": l0, "load_after": load()})
                if serve:
                    for line in serve_round(bin_path, model, chats, new, threads):
                        emit({**line, "round": r})
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
    width = max([18] + [len(l["impl"]) for l in lines])
    for l in dec:
        if not l.get("tokens_ok", l["tokens"] == l["rows"] * l["new_tokens"]):
            one = f" ({l['tokens_1']} in the 1-token run)" if "tokens_1" in l else ""
            print(f"token count mismatch: {l['impl']} round {l['round']}: {l['tokens']} tokens{one}, "
                  f"expected {l['rows']} x {l['new_tokens']}")
    rates = {}
    for impl in sorted({l["impl"] for l in dec}):
        rs = [l for l in dec if l["impl"] == impl]
        tok_s = [l["rows"] * (l["new_tokens"] - 1) / (l["seconds"] - l["seconds_1"]) for l in rs]
        whole = [l["tokens"] / l["seconds"] for l in rs]
        rates[impl] = statistics.median(tok_s)
        print(f"{impl:>{width}}: decode {statistics.median(tok_s):7.1f} tok/s (median of {len(rs)}: "
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
        print(f"{impl:>{width}}: {rs[0]['rows']} rows x {rs[0]['new_tokens']} tokens: ms per step, first 32 "
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
