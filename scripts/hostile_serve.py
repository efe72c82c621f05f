#!/usr/bin/env python3
"""Hostile clients against a real `reinforge serve --model DIR` process (issue 24).

Starts the binary on 127.0.0.1 (loopback only), runs the reproduction of each finding of
issue 24 and the sandbox acceptance check against it, and prints one line per check: `held` or
`FAILED (what happened)`. Measures the server process's resident memory (/proc/PID/status
VmRSS) after a warm-up and after every check, on the same process when nothing failed.

    scripts/hostile_serve.py --binary target/release/reinforge --model fixtures/hf/models/qwen2
    scripts/hostile_serve.py --binary OLD/target/release/reinforge --model ... --old

`--old` starts a build from before issue 24 (no --api-key/--admin-key/--weights-root flags):
the checks are the same, so they show what the old code did. A check that fails may leave the
server dead or poisoned (a megabyte header on every response): the server is restarted after
it. Exit status 0 when every check held. Python standard library only.
"""

import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

API, ADMIN = "user-key-7f3a", "admin-key-91c2"


class Server:
    """One `reinforge serve` process and its address."""

    def __init__(self, args, root):
        cmd = [args.binary, "serve", "--model", args.model, "--host", "127.0.0.1", "--port", "0",
               "--threads", "1", "--workers", "2", "--max-concurrency", "8",
               "--sandbox-wall-time-s", "10"]
        if not args.old:
            cmd += ["--api-key", API, "--admin-key", ADMIN, "--weights-root", root]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        self.port = None
        self.log = []
        deadline = time.time() + 120
        for line in self.proc.stderr:
            self.log.append(line)
            if "listening on http://" in line:
                self.port = int(line.split("listening on http://")[1].split()[0].rsplit(":", 1)[1])
                break
            if time.time() > deadline:
                break
        if self.port is None:
            raise SystemExit("the server did not start:\n" + "".join(self.log))
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self):
        for line in self.proc.stderr:
            self.log.append(line)

    def alive(self):
        return self.proc.poll() is None

    def status(self, key):
        """A field of /proc/PID/status, kB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return 0

    def stop(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def request(port, method, path, body=None, key=API, timeout=30):
    """(status, parsed body or text, headers); raises on transport errors."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    try:
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = text
        return r.status, parsed, r.getheaders()
    finally:
        c.close()


def healthy(s, within=1.0):
    """Whether /health answers within `within` seconds."""
    t = time.time()
    try:
        st, _, _ = request(s.port, "GET", "/health", key=None, timeout=max(within, 5))
    except OSError:
        return False
    return st == 200 and time.time() - t < within


def verify_time(s):
    """Seconds one /v1/verify takes (inf when it fails)."""
    t = time.time()
    try:
        st, v, _ = request(s.port, "POST", "/v1/verify", {"cases": [{"gold": "2", "pred": "2"}]},
                           timeout=5)
    except OSError:
        return float("inf")
    return time.time() - t if st == 200 and v["verdicts"][0]["correct"] else float("inf")


def stall(s, n):
    """n connections that send headers and one byte of a 100-byte body, then stall."""
    socks = []
    for i in range(n):
        path = ["/v1/verify", "/get_reward", "/run_code"][i % 3]
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall((f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {API}\r\n"
                   "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{").encode())
        socks.append(c)
    return socks


def run_code(s, code, **extra):
    body = {"code": code, "language": "python", "run_timeout": 8}
    body.update(extra)
    return request(s.port, "POST", "/run_code", body, timeout=60)


EIGHT_CHILDREN = """
import os, time
pids = []
for i in range(8):
    p = os.fork()
    if p == 0:
        x = b'\\x01' * (80 << 20)
        time.sleep(3)
        os._exit(0)
    pids.append(p)
for p in pids:
    os.waitpid(p, 0)
print("survived")
"""

FORK_BOMB = """
import os, time
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""


def f1_auth(s, ctx):
    st, _, _ = request(s.port, "POST", "/v1/verify", {"cases": [{"gold": "1", "pred": "1"}]},
                       key=None)
    return st == 401, f"/v1/verify without a key: {st}"


def f2_huge_n(s, ctx):
    try:
        st, v, _ = request(s.port, "POST", "/v1/completions",
                           {"prompt": [1], "n": 10**12, "max_tokens": 1})
    except OSError as e:
        st, v = None, repr(e)
    time.sleep(0.3)
    if not s.alive():
        return False, f"n = 1e12: the process died (exit {s.proc.poll()})"
    return st == 400, f"n = 1e12: {st}"


def f3_weights_outside(s, ctx):
    planted = ctx["planted"]
    st, v, _ = request(s.port, "POST", "/update_weights_from_disk",
                       {"model_path": planted, "weight_version": "planted"}, key=ADMIN)
    st2, v2, _ = request(s.port, "POST", "/update_weights_from_disk",
                         {"model_path": planted + "-missing"}, key=ADMIN)
    same = json.dumps(v).replace(planted, "P") == json.dumps(v2).replace(planted + "-missing", "P")
    return st != 200 and same, f"load of a directory outside the root: {st}; " \
        f"its message and a missing path's {'agree' if same else 'differ'}"


def f4_weight_version(s, ctx):
    try:
        st, _, _ = request(s.port, "POST", "/update_weights_from_disk",
                           {"model_path": ctx["inside"], "weight_version": "v" * (8 << 20)},
                           key=ADMIN, timeout=60)
        _, _, headers = request(s.port, "GET", "/v1/models")
    except (OSError, http.client.HTTPException) as e:
        return False, f"8 MB weight_version: the next response broke the client ({type(e).__name__})"
    longest = max((len(v) for _, v in headers), default=0)
    return st == 400 and longest < 1024, f"8 MB weight_version: {st}, longest header {longest} B"


def f5_children(s, ctx):
    st, v, _ = run_code(s, EIGHT_CHILDREN, memory_limit_MB=100)
    out = (v.get("run_result") or {}).get("stdout", "") if isinstance(v, dict) else ""
    status = v.get("status") if isinstance(v, dict) else v
    return status != "Success" and "survived" not in out, \
        f"8 x 80 MiB children under 100 MiB: {st} {status}"


def f6_fetch_flood(s, ctx):
    hwm = s.status("VmHWM")
    code = "open('f', 'wb').write(b'x' * (16 << 20))"
    st, v, _ = run_code(s, code, fetch_files=["f"] * 48)
    grew = (s.status("VmHWM") - hwm) >> 10
    return 400 <= st < 500 and grew < 200, \
        f"48 x the same 16 MiB file: {st}, peak RSS +{grew} MiB"


def f7_stalled(s, ctx):
    socks = stall(s, 8)
    time.sleep(0.3)
    took = verify_time(s)
    for c in socks:
        c.close()
    return took < 1.0, f"/v1/verify with 8 stalled uploads: {took:.2f} s"


def f8_pause(s, ctx):
    st, _, _ = request(s.port, "POST", "/pause_generation", {}, key=API)
    if st == 200:
        request(s.port, "POST", "/continue_generation", {}, key=ADMIN)
    return st == 401, f"/pause_generation with the user key: {st}"


def f9_big_prompts(s, ctx):
    big = "The quick brown fox jumps over the lazy dog. " * (4 << 20 >> 6)
    threads = [threading.Thread(target=lambda: request(
        s.port, "POST", "/v1/completions", {"prompt": big, "max_tokens": 1}, timeout=120))
        for _ in range(2)]
    for t in threads:
        t.start()
    time.sleep(0.4)
    slowest = 0.0
    for _ in range(5):
        t = time.time()
        try:
            request(s.port, "GET", "/health", key=None, timeout=30)
        except OSError:
            pass
        slowest = max(slowest, time.time() - t)
        time.sleep(0.1)
    for t in threads:
        t.join()
    return slowest < 1.0, f"/health during two 4 MB prompts: slowest {slowest:.2f} s"


def f10_config_first(s, ctx):
    hwm = s.status("VmHWM")
    st, v, _ = request(s.port, "POST", "/update_weights_from_disk",
                       {"model_path": ctx["config_only"]}, key=ADMIN, timeout=120)
    grew = (s.status("VmHWM") - hwm) >> 10
    return 400 <= st < 500 and grew < 100, \
        f"config-only directory of another shape: {st}, peak RSS +{grew} MiB"


def f11_low(s, ctx):
    bad = []
    st, v, _ = request(s.port, "POST", "/v1/completions",
                       {"prompt": [3], "max_tokens": 2, "temperature": 1e-320})
    if st != 200 or "backtrace" in json.dumps(v).lower():
        bad.append(f"temperature 1e-320: {st}")
    st, v, _ = request(s.port, "POST", "/v1/completions",
                       {"prompt": [3], "max_tokens": 2**64 - 1})
    if st != 400 or str(2**64 - 1) not in json.dumps(v):
        bad.append(f"max_tokens = u64::MAX: {st} {json.dumps(v)[:120]}")
    _, models, _ = request(s.port, "GET", "/v1/models")
    if "/" in json.dumps(models.get("data", [{}])[0].get("root", "")):
        bad.append("/v1/models names a host path")
    st, v, _ = run_code(s, "print(1)", fetch_files=["./x"])
    if st != 422:
        bad.append(f"fetch_files ['./x']: {st}")
    return not bad, "; ".join(bad) or "tiny temperature, u64::MAX, model paths, ./x"


def sandbox_abuse(s, ctx):
    """Acceptance: a fork bomb, a fetch_files flood and 8 stalled uploads at once leave
    /v1/verify answering within 1 s."""
    flood = "for i in range(4):\n    open(f'f{i}', 'wb').write(b'x' * (4 << 20))"
    jobs = [threading.Thread(target=lambda: run_code(s, FORK_BOMB, run_timeout=4))]
    jobs += [threading.Thread(target=lambda: run_code(
        s, flood, fetch_files=[f"f{i}" for i in range(4)])) for _ in range(2)]
    for j in jobs:
        j.start()
    socks = stall(s, 8)
    time.sleep(1.0)
    slowest = max(verify_time(s) for _ in range(5))
    for c in socks:
        c.close()
    for j in jobs:
        j.join()
    return slowest < 1.0, f"/v1/verify during a fork bomb, a fetch flood, 8 stalled uploads: " \
        f"slowest of 5 {slowest:.2f} s"


CHECKS = [("1 authentication", f1_auth), ("2 n = 1e12", f2_huge_n),
          ("3 weights outside the root", f3_weights_outside),
          ("4 8 MB weight_version", f4_weight_version), ("5 memory per run", f5_children),
          ("6 fetch_files flood", f6_fetch_flood), ("7 stalled uploads", f7_stalled),
          ("8 pause by a client", f8_pause), ("9 CPU work on async workers", f9_big_prompts),
          ("10 config before allocation", f10_config_first), ("11 low findings", f11_low),
          ("sandbox abuse, verify < 1 s", sandbox_abuse)]


def prepare(model, tmp):
    """The weights root (a copy of the model inside), a planted copy outside it, and a
    config-only directory of another shape inside it."""
    root = os.path.join(tmp, "root")
    inside = os.path.join(root, "push")
    shutil.copytree(model, inside)
    planted = os.path.join(tmp, "planted")
    shutil.copytree(model, planted)
    config_only = os.path.join(root, "big")
    os.makedirs(config_only)
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    cfg["hidden_size"] = 2048
    cfg["intermediate_size"] = 8192
    with open(os.path.join(config_only, "config.json"), "w") as f:
        json.dump(cfg, f)
    return {"root": root, "inside": inside, "planted": planted, "config_only": config_only}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--old", action="store_true", help="a build without issue 24's flags")
    p.add_argument("--json", help="write the results here")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ctx = prepare(args.model, tmp)
        s = Server(args, ctx["root"])
        for warm in range(3):
            request(s.port, "POST", "/v1/completions", {"prompt": [3], "max_tokens": 4})
            verify_time(s)
            run_code(s, "print(1)")
        rss0 = s.status("VmRSS")
        results, restarts = [], 0
        for name, check in CHECKS:
            try:
                ok, detail = check(s, ctx)
            except (OSError, http.client.HTTPException, ValueError) as e:
                ok, detail = False, f"{type(e).__name__}: {e}"
            if ok and not healthy(s):
                ok, detail = False, detail + "; /health did not answer within 1 s after"
            rss = s.status("VmRSS") >> 10 if s.alive() else None
            results.append({"check": name, "held": ok, "detail": detail, "rss_mib": rss})
            print(f"{name:32} {'held' if ok else 'FAILED'}: {detail} [RSS {rss} MiB]", flush=True)
            if not ok:
                s.stop()
                s = Server(args, ctx["root"])
                restarts += 1
        rss1 = s.status("VmRSS")
        grew = (rss1 - rss0) >> 10
        rss_ok = restarts == 0 and grew < 200
        print(f"{'RSS after the suite':32} {'held' if rss_ok else 'FAILED'}: {rss0 >> 10} MiB "
              f"after warm-up, {rss1 >> 10} MiB after ({grew:+} MiB"
              f"{'' if restarts == 0 else f'; {restarts} restarts, not one process'})")
        results.append({"check": "RSS", "held": rss_ok, "before_mib": rss0 >> 10,
                        "after_mib": rss1 >> 10, "restarts": restarts})
        s.stop()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    sys.exit(0 if all(r["held"] for r in results) else 1)


if __name__ == "__main__":
    main()
