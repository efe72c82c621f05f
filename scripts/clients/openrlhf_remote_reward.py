#!/usr/bin/env python3
"""Client for `reinforge serve`'s POST /get_reward, speaking exactly OpenRLHF's remote reward
protocol, with the standard library only (urllib).

OpenRLHF (openrlhf/utils/remote_rm_utils.py, `remote_rm_fn` -> `request_api_wrapper`) posts
`{"query": queries, "prompts": prompts, "labels": labels}` as JSON with
`Content-Type: application/json`, where each query is the decoded prompt + response (special
tokens kept), and reads `rewards` (and, in newer versions, `scores` and `extra_logs`) from the
JSON answer. Train with OpenRLHF against the server with
`--remote_rm_url http://HOST:PORT/get_reward` (plus `--label_key` naming the answer column).

Usage:
  openrlhf_remote_reward.py --url http://127.0.0.1:8000/get_reward --input samples.jsonl
      samples.jsonl: one {"prompt", "response", "label"} per line; prints one result per line
  openrlhf_remote_reward.py --url http://127.0.0.1:8000/get_reward --self-test
      sends a fixed OpenRLHF-style batch to a server running the default (math) reward and
      checks the rewards; exit status 0 when all are right
"""

import argparse
import json
import sys
import urllib.error
import urllib.request

# A Qwen2-style chat template, as OpenRLHF's prompts look after `apply_chat_template`.
TEMPLATE = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"


def request_api_wrapper(url, data, timeout=180):
    """POST `data` as OpenRLHF's request_api_wrapper does; returns the decoded JSON answer."""
    body = json.dumps(data, allow_nan=False).encode("utf-8")
    req = urllib.request.Request(
        url, data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8"))


def remote_rm_fn(url, queries, prompts, labels):
    """OpenRLHF's remote_rm_fn: the whole answer (rewards, scores, extra_logs)."""
    return request_api_wrapper(url, {"query": queries, "prompts": prompts, "labels": labels})


def self_test(url):
    eos = "<|im_end|>"
    pad = "<|endoftext|>"
    cases = [
        # (question, response, label, expected reward under the default math spec)
        ("What is 6*7?", "6*7 = 42, so the answer is $\\boxed{42}$.", "42", 1.0),
        ("What is 6*7?", "The answer is $\\boxed{41}$.", "42", 0.0),
        ("Simplify 2/4.", "We get \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("Add 1 and 1.", "The answer is 2.", "2", 1.0),
        ("Give the interval.", "\\boxed{[0, 1)}", "[0,1)", 1.0),
        ("What is 1+1?", "I don't know.", "2", 0.0),
        # the query echoes the prompt's text in the response: only the prefix is stripped
        ("What is 2+3?", "What is 2+3? It is \\boxed{5}", "5", 1.0),
    ]
    prompts = [TEMPLATE.format(q) for q, _, _, _ in cases]
    queries = [p + r + eos for p, (_, r, _, _) in zip(prompts, cases)]
    # OpenRLHF's older experience maker decoded left-padded sequences: padding before the prompt
    queries[1] = pad + pad + queries[1] + pad
    labels = [label for _, _, label, _ in cases]
    expected = [e for _, _, _, e in cases]
    out = remote_rm_fn(url, queries, prompts, labels)
    ok = True
    for key in ("rewards", "scores", "extra_logs"):
        if key not in out:
            print(f"FAIL: answer has no `{key}`: {out}")
            ok = False
    if not ok:
        return False
    if [float(r) for r in out["rewards"]] != expected:
        print(f"FAIL: rewards {out['rewards']} != expected {expected}")
        ok = False
    if [float(s) for s in out["scores"]] != expected:
        print(f"FAIL: scores {out['scores']} != expected {expected}")
        ok = False
    math_log = out["extra_logs"].get("math")
    if math_log is None or len(math_log) != len(cases):
        print(f"FAIL: extra_logs.math missing or wrong length: {out['extra_logs']}")
        ok = False
    # the old protocol (query only): the whole query is the response, which still holds the answer
    old = request_api_wrapper(url, {"query": [TEMPLATE.format("1+1?") + "\\boxed{2}"], "labels": ["2"]})
    if old.get("rewards") != [1.0]:
        print(f"FAIL: query-only request: {old}")
        ok = False
    # a malformed request gets a 4xx naming the field
    try:
        request_api_wrapper(url, {"query": queries, "prompts": prompts[:-1], "labels": labels})
        print("FAIL: a short `prompts` list was accepted")
        ok = False
    except urllib.error.HTTPError as e:
        err = json.loads(e.read().decode("utf-8"))
        if e.code != 422 or err.get("field") != "prompts":
            print(f"FAIL: short prompts: HTTP {e.code} {err}")
            ok = False
    print("self-test " + ("passed" if ok else "FAILED") + f": rewards {out['rewards']}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000/get_reward")
    ap.add_argument("--input", help="JSONL of {prompt, response, label}")
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        sys.exit(0 if self_test(args.url) else 1)
    if not args.input:
        ap.error("--input or --self-test is required")
    with open(args.input, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for start in range(0, len(rows), args.batch_size):
        chunk = rows[start : start + args.batch_size]
        prompts = [r["prompt"] for r in chunk]
        queries = [r["prompt"] + r["response"] for r in chunk]
        labels = [r.get("label") for r in chunk]
        out = remote_rm_fn(args.url, queries, prompts, labels)
        for i in range(len(chunk)):
            extra = {k: v[i] for k, v in out.get("extra_logs", {}).items()}
            print(json.dumps({"reward": out["rewards"][i], "score": out["scores"][i], **extra}))


if __name__ == "__main__":
    main()
