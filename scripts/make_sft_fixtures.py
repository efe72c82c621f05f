"""Writes fixtures/data/sft/: small chat sets for `train-sft`'s tests, generated here (no third-party
text): arithmetic questions answered in one fixed style, some followed by a second turn, so a
short SFT has something to learn and held-out rows share it.

    python3 scripts/make_sft_fixtures.py
"""
import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "data" / "sft"


def conversation(rng: random.Random) -> list:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    msgs = [
        {"role": "user", "content": f"What is {a} + {b}?"},
        {"role": "assistant", "content": f"{a} + {b} = {a + b}. The answer is {a + b}."},
    ]
    if rng.random() < 0.35:
        msgs += [
            {"role": "user", "content": "Now double it."},
            {"role": "assistant", "content": f"2 * {a + b} = {2 * (a + b)}. The answer is {2 * (a + b)}."},
        ]
    return msgs


def write(name: str, rows: list) -> None:
    with open(OUT / name, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    rng = random.Random(20261127)
    train = [{"messages": conversation(rng)} for _ in range(48)]
    heldout = [{"messages": conversation(rng)} for _ in range(16)]
    write("chat_train.jsonl", train)
    write("chat_heldout.jsonl", heldout)
    # The same single-turn conversations as prompt-completion rows (TRL's conversational
    # prompt-completion format) and as plain text.
    pc = [
        {"prompt": r["messages"][:1], "completion": r["messages"][1:2]}
        for r in train
    ]
    write("chat_prompt_completion.jsonl", pc)
    text = [{"text": r["messages"][0]["content"] + " " + r["messages"][1]["content"]} for r in train[:16]]
    write("text.jsonl", text)


if __name__ == "__main__":
    main()
