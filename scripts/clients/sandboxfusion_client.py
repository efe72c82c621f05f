#!/usr/bin/env python3
"""Client for `reinforge serve`'s POST /run_code, speaking SandboxFusion's protocol with the
standard library only (urllib).

The request is SandboxFusion's `RunCodeRequest` (sandbox/server/sandbox_api.py): `code`,
`language`, `compile_timeout`, `run_timeout`, `memory_limit_MB`, `stdin`, `files` (path ->
base64), `fetch_files`; the answer its `RunCodeResponse`: `status` (Success | Failed |
SandboxError), `message`, `compile_result`, `run_result` (`status` Finished |
TimeLimitExceeded | Error, `execution_time`, `return_code`, `stdout`, `stderr`),
`executor_pod_name`, `files` (path -> base64). Clients of SandboxFusion (its SDK, verl's
sandbox_fusion reward) work unchanged with the server's base URL.

Usage:
  sandboxfusion_client.py --url http://127.0.0.1:8000 --code 'print(1)' [--language bash]
  sandboxfusion_client.py --url http://127.0.0.1:8000 --self-test
      runs success / runtime error / timeout / stdin / files cases and checks that each gets
      the status SandboxFusion gives; exit status 0 when all do
"""

import argparse
import base64
import json
import sys
import urllib.error
import urllib.request


def run_code(base_url, code, language="python", run_timeout=10, compile_timeout=10,
             memory_limit_mb=-1, stdin=None, files=None, fetch_files=None, timeout=300):
    """POST a RunCodeRequest (every field, as the SDK's pydantic model dumps it)."""
    req = {
        "compile_timeout": compile_timeout,
        "run_timeout": run_timeout,
        "memory_limit_MB": memory_limit_mb,
        "code": code,
        "stdin": stdin,
        "language": language,
        "files": {k: base64.b64encode(v).decode("ascii") for k, v in (files or {}).items()},
        "fetch_files": list(fetch_files or []),
    }
    body = json.dumps(req).encode("utf-8")
    r = urllib.request.Request(
        base_url.rstrip("/") + "/run_code",
        data=body,
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(r, timeout=timeout) as resp:
        return json.loads(resp.read().decode("utf-8"))


def self_test(base_url):
    checks = []

    def expect(name, resp, status, run_status, return_code="any", stdout=None, stderr_has=None):
        rr = resp.get("run_result") or {}
        problems = []
        if resp.get("status") != status:
            problems.append(f"status {resp.get('status')!r} != {status!r}")
        if rr.get("status") != run_status:
            problems.append(f"run_result.status {rr.get('status')!r} != {run_status!r}")
        if return_code != "any" and rr.get("return_code") != return_code:
            problems.append(f"return_code {rr.get('return_code')!r} != {return_code!r}")
        if stdout is not None and rr.get("stdout") != stdout:
            problems.append(f"stdout {rr.get('stdout')!r} != {stdout!r}")
        if stderr_has is not None and stderr_has not in (rr.get("stderr") or ""):
            problems.append(f"stderr lacks {stderr_has!r}: {rr.get('stderr')!r}")
        for key in ("message", "compile_result", "executor_pod_name", "files"):
            if key not in resp:
                problems.append(f"no `{key}` in the answer")
        if not isinstance(rr.get("execution_time"), (int, float)):
            problems.append(f"execution_time {rr.get('execution_time')!r}")
        checks.append((name, problems))

    r = run_code(base_url, "print('hello')")
    expect("success", r, "Success", "Finished", 0, stdout="hello\n")
    r = run_code(base_url, "print('before')\nraise ValueError('boom')")
    expect("runtime error", r, "Failed", "Finished", 1, stdout="before\n", stderr_has="ValueError: boom")
    r = run_code(base_url, "import sys\nsys.exit(3)")
    expect("exit code", r, "Failed", "Finished", 3)
    r = run_code(base_url, "import time\nprint('start', flush=True)\nwhile True:\n    time.sleep(0.01)",
                 run_timeout=1)
    expect("timeout", r, "Failed", "TimeLimitExceeded", None, stdout="start\n")
    r = run_code(base_url, "import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin="1 2 3\n")
    expect("stdin", r, "Success", "Finished", 0, stdout="6\n")
    r = run_code(base_url, "data = open('in.txt').read()\nopen('out.txt', 'w').write(data.upper())\nprint(len(data))",
                 files={"in.txt": b"abc"}, fetch_files=["out.txt", "missing.txt"])
    expect("files", r, "Success", "Finished", 0, stdout="3\n")
    got = {k: base64.b64decode(v) for k, v in r.get("files", {}).items()}
    if got != {"out.txt": b"ABC"}:
        checks.append(("fetched files", [f"files {got!r} != {{'out.txt': b'ABC'}}"]))
    r = run_code(base_url, "echo hi; exit 2", language="bash")
    expect("bash", r, "Failed", "Finished", 2, stdout="hi\n")
    ok = True
    for name, problems in checks:
        if problems:
            ok = False
            print(f"FAIL {name}: " + "; ".join(problems))
        else:
            print(f"ok   {name}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    ap.add_argument("--code")
    ap.add_argument("--language", default="python")
    ap.add_argument("--run-timeout", type=float, default=10)
    ap.add_argument("--stdin")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        sys.exit(0 if self_test(args.url) else 1)
    if args.code is None:
        ap.error("--code or --self-test is required")
    print(json.dumps(run_code(args.url, args.code, args.language, args.run_timeout, stdin=args.stdin), indent=2))


if __name__ == "__main__":
    main()
