#!/usr/bin/env python3
"""Checks `reinforge serve --model` with the official `openai` Python client.

Usage (the client lives in the git-ignored .venv-openai made by scripts/openai_env.sh):

    scripts/openai_env.sh
    .venv-openai/bin/python scripts/clients/openai_policy_client.py http://127.0.0.1:8000 \
        [--update-weights DIR]

What it checks, against whatever model the server serves:
  - GET /v1/models lists one model with its weight_version;
  - completions with token-id prompts, n=2, logprobs and vLLM's return_tokens_as_token_ids /
    return_token_ids (sent with extra_body): choice order (prompt i, sample j -> i*n+j), greedy
    samples equal, log-prob tokens "token_id:N" equal to the returned ids, weight_version in the
    body and the x-reinforge-weight-version header;
  - a text completion and a chat completion, each streamed and not: the assembled chunks equal
    the non-streamed greedy result, finish reasons agree, usage comes with include_usage;
  - chat with logprobs/top_logprobs and n>1 sampling;
  - errors: a too-long request is openai.BadRequestError naming max_tokens, an unknown model
    openai.NotFoundError;
  - the weight routes via urllib: /get_weight_version, /pause_generation (wait), /is_paused,
    /continue_generation and, with --update-weights DIR, /update_weights_from_disk (the version
    changes and later responses carry it).
Prints a JSON summary; exits 0 when every check passed, else 1.
"""

import argparse
import json
import sys
import urllib.error
import urllib.request

import openai

CHECKS = []


def check(name, ok, detail=""):
    CHECKS.append({"check": name, "ok": bool(ok), "detail": "" if ok else str(detail)})
    return ok


API_KEY = None  # --api-key: sent as `Authorization: Bearer KEY` (the server's --api-key)


def http(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if API_KEY:
        headers["Authorization"] = "Bearer " + API_KEY
    req = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def extra(obj, key):
    """A field the OpenAI types do not declare (vLLM's and reinforge's)."""
    return obj.model_dump().get(key)


def completions(client, model, vocab_hint):
    prompts = [[11, 12, 13], [21, 22]]
    raw = client.completions.with_raw_response.create(
        model=model, prompt=prompts, n=2, max_tokens=6, temperature=0, logprobs=1,
        extra_body={"return_tokens_as_token_ids": True, "return_token_ids": True})
    resp = raw.parse()
    header = raw.headers.get("x-reinforge-weight-version")
    version = extra(resp, "weight_version")
    check("completions: weight_version in body and header agree", version is not None and version == header,
          f"body {version!r}, header {header!r}")
    check("completions: 4 choices", len(resp.choices) == 4, len(resp.choices))
    for i, c in enumerate(resp.choices):
        d = c.model_dump()
        check(f"completions: choice {i} index", c.index == i, c.index)
        check(f"completions: choice {i} prompt_token_ids", d.get("prompt_token_ids") == prompts[i // 2],
              d.get("prompt_token_ids"))
        ids = d.get("token_ids") or []
        check(f"completions: choice {i} has token ids", 0 < len(ids) <= 6, ids)
        toks = c.logprobs.tokens if c.logprobs else None
        check(f"completions: choice {i} logprob tokens are token_id:N of token_ids",
              toks == [f"token_id:{t}" for t in ids], (toks, ids))
        lps = c.logprobs.token_logprobs if c.logprobs else []
        check(f"completions: choice {i} log-probs are finite and <= 0",
              len(lps) == len(ids) and all(lp <= 0 for lp in lps), lps)
        check(f"completions: choice {i} finish_reason", c.finish_reason in ("stop", "length"), c.finish_reason)
    check("completions: greedy samples of one prompt are equal",
          extra(resp.choices[0], "token_ids") == extra(resp.choices[1], "token_ids")
          and extra(resp.choices[2], "token_ids") == extra(resp.choices[3], "token_ids"))
    check("completions: usage counts tokens",
          resp.usage.prompt_tokens == 5
          and resp.usage.completion_tokens == sum(len(extra(c, "token_ids")) for c in resp.choices),
          resp.usage)
    return version


def streamed_equals_whole(client, model):
    whole = client.completions.create(model=model, prompt="The answer is", max_tokens=12,
                                      temperature=0, extra_body={"return_token_ids": True})
    text, ids, finish, usage, versions = "", [], None, None, set()
    for chunk in client.completions.create(model=model, prompt="The answer is", max_tokens=12,
                                           temperature=0, stream=True,
                                           stream_options={"include_usage": True},
                                           extra_body={"return_token_ids": True}):
        versions.add(extra(chunk, "weight_version"))
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.text
            ids += extra(ch, "token_ids") or []
            finish = ch.finish_reason or finish
    w = whole.choices[0]
    check("stream completions: text equals the non-streamed greedy text", text == w.text, (text, w.text))
    check("stream completions: token ids equal", ids == extra(w, "token_ids"), (ids, extra(w, "token_ids")))
    check("stream completions: finish_reason equal", finish == w.finish_reason, (finish, w.finish_reason))
    check("stream completions: usage chunk equals the usage", usage == whole.usage, (usage, whole.usage))
    check("stream completions: one weight_version on every chunk", len(versions) == 1 and None not in versions,
          versions)

    messages = [{"role": "system", "content": "You are terse."},
                {"role": "user", "content": "Say something."}]
    whole = client.chat.completions.create(model=model, messages=messages, max_tokens=10, temperature=0,
                                           logprobs=True, top_logprobs=2,
                                           extra_body={"return_token_ids": True})
    c = whole.choices[0]
    ids = extra(c, "token_ids") or []
    check("chat: reply from the assistant", c.message.role == "assistant", c.message.role)
    check("chat: prompt_token_ids from the chat template", len(extra(whole, "prompt_token_ids") or []) > 0)
    check("chat: one log-prob entry per token with 2 alternatives",
          c.logprobs is not None and len(c.logprobs.content) == len(ids)
          and all(len(e.top_logprobs) == 2 for e in c.logprobs.content), c.logprobs)
    content, role, finish = "", None, None
    for chunk in client.chat.completions.create(model=model, messages=messages, max_tokens=10,
                                                temperature=0, stream=True):
        for ch in chunk.choices:
            role = role or ch.delta.role
            content += ch.delta.content or ""
            finish = ch.finish_reason or finish
    check("stream chat: role assistant first", role == "assistant", role)
    check("stream chat: content equals the non-streamed greedy reply", content == (c.message.content or ""),
          (content, c.message.content))
    check("stream chat: finish_reason equal", finish == c.finish_reason, (finish, c.finish_reason))

    many = client.chat.completions.create(model=model, messages=messages, max_tokens=5, temperature=1.0,
                                          n=3, seed=7)
    check("chat n=3: three choices indexed 0..2", [ch.index for ch in many.choices] == [0, 1, 2],
          [ch.index for ch in many.choices])
    again = client.chat.completions.create(model=model, messages=messages, max_tokens=5, temperature=1.0,
                                           n=3, seed=7)
    check("chat n=3: the same seed gives the same replies",
          [ch.message.content for ch in many.choices] == [ch.message.content for ch in again.choices])


def errors(client, model, max_model_len):
    try:
        client.completions.create(model=model, prompt=[1, 2, 3], max_tokens=max_model_len)
        check("errors: too long is BadRequestError", False, "no error")
    except openai.BadRequestError as e:
        body = e.body if isinstance(e.body, dict) else {}
        check("errors: too long is BadRequestError naming max_tokens", body.get("param") == "max_tokens", e.body)
    try:
        client.completions.create(model=model + "-nope", prompt=[1], max_tokens=1)
        check("errors: unknown model is NotFoundError", False, "no error")
    except openai.NotFoundError as e:
        check("errors: unknown model is NotFoundError", True, e)


def weights(base, client, model, update_dir):
    st, v = http(base, "GET", "/get_weight_version")
    check("weights: /get_weight_version", st == 200 and "weight_version" in v and "checksum" in v, v)
    before = v
    st, v = http(base, "POST", "/pause_generation", {"mode": "wait"})
    check("weights: /pause_generation wait", st == 200 and v.get("paused") is True, v)
    st, v = http(base, "GET", "/is_paused")
    check("weights: /is_paused true", st == 200 and v.get("is_paused") is True, v)
    st, v = http(base, "POST", "/continue_generation", {})
    check("weights: /continue_generation", st == 200 and v.get("paused") is False, v)
    if update_dir:
        st, v = http(base, "POST", "/update_weights_from_disk", {"model_path": update_dir})
        check("weights: /update_weights_from_disk succeeds", st == 200 and v.get("success") is True, v)
        check("weights: the version changes", v.get("weight_version") != before["weight_version"], v)
        after = client.completions.create(model=model, prompt=[5], max_tokens=2, temperature=0)
        check("weights: later responses carry the new version",
              extra(after, "weight_version") == v.get("weight_version"), extra(after, "weight_version"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base_url")
    ap.add_argument("--update-weights", metavar="DIR", help="a checkpoint directory to load")
    ap.add_argument("--api-key", metavar="KEY",
                    help="the server's --api-key: the client sends it, and a client without it must get 401")
    a = ap.parse_args()
    base = a.base_url.rstrip("/")
    global API_KEY
    API_KEY = a.api_key
    client = openai.OpenAI(base_url=base + "/v1", api_key=a.api_key or "unused", max_retries=0,
                           timeout=120)
    try:
        if a.api_key:
            wrong = openai.OpenAI(base_url=base + "/v1", api_key=a.api_key + "-wrong", max_retries=0,
                                  timeout=30)
            try:
                wrong.models.list()
                check("auth: a wrong key gets AuthenticationError (401)", False, "no error")
            except openai.AuthenticationError as e:
                check("auth: a wrong key gets AuthenticationError (401)", e.status_code == 401, repr(e))
        models = client.models.list().data
        check("models: one served model", len(models) == 1, models)
        model = models[0].id
        card = models[0].model_dump()
        check("models: weight_version and max_model_len", "weight_version" in card and "max_model_len" in card,
              card)
        completions(client, model, None)
        streamed_equals_whole(client, model)
        errors(client, model, card.get("max_model_len", 4096))
        weights(base, client, model, a.update_weights)
    except Exception as e:  # a failure of the client itself is a failed check, reported
        check("client ran to the end", False, repr(e))
    failed = [c for c in CHECKS if not c["ok"]]
    print(json.dumps({"openai_version": openai.__version__, "checks": len(CHECKS),
                      "passed": len(CHECKS) - len(failed), "failed": failed}, indent=2))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
