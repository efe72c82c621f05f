"""The slowest test binaries of a `cargo test` run, for scripts/test.sh.

Usage: slowest_tests.py ARTIFACTS RUN_LOG [N]
ARTIFACTS is `cargo test --no-run --message-format=json` output: it names the package and target
of each test executable, since every crate's integration tests link into one binary named
`suite`. RUN_LOG is the run's output: each `Running ... (target/.../deps/NAME-HASH)` line is
followed by its `test result: ... finished in S` line. Prints the N slowest (default 10) with
their seconds, and the sum over all binaries. Standard library only: it runs before any
environment is set up.
"""
import json
import re
import sys


def executables(path):
    """Executable file name (NAME-HASH, unique per build) -> 'package kind'."""
    names = {}
    with open(path) as f:
        for line in f:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            exe = msg.get("executable")
            if msg.get("reason") != "compiler-artifact" or not exe:
                continue
            target = msg["target"]
            fragment = msg["package_id"].rsplit("#", 1)[-1]
            # `path+file:///.../crates/NAME#VERSION`, or `...#NAME@VERSION` when they differ.
            package = fragment.split("@")[0] if "@" in fragment else \
                msg["package_id"].rsplit("#", 1)[0].rstrip("/").rsplit("/", 1)[-1]
            kind = "unit tests" if target["kind"] != ["test"] else "tests/" + target["name"]
            names[exe.rsplit("/", 1)[-1]] = f"{package} {kind}"
    return names


def timings(path, names):
    """(name, seconds) of every binary the run log shows finishing."""
    running = re.compile(r"Running (?:unittests )?\S+ \((?:\S*/)?([^/\s]+)\)")
    doc = re.compile(r"Doc-tests (\S+)")
    result = re.compile(r"test result: .* finished in ([0-9.]+)s")
    out, current = [], None
    with open(path, errors="replace") as f:
        for line in f:
            m = running.search(line)
            if m:
                current = names.get(m.group(1), m.group(1))
                continue
            m = doc.search(line)
            if m:
                current = f"{m.group(1)} doc tests"
                continue
            m = result.search(line)
            if m and current:
                out.append((current, float(m.group(1))))
                current = None
    return out


def main():
    artifacts, log = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 10
    rows = sorted(timings(log, executables(artifacts)), key=lambda r: -r[1])
    if not rows:
        print("slowest test binaries: none finished", file=sys.stderr)
        return
    print(f"slowest test binaries (of {len(rows)}, {sum(s for _, s in rows):.0f} s in all):",
          file=sys.stderr)
    for name, secs in rows[:n]:
        print(f"  {secs:8.1f} s  {name}", file=sys.stderr)


if __name__ == "__main__":
    main()
