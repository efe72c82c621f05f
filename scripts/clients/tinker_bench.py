#!/usr/bin/env python3
"""Timings of `reinforge serve --model DIR --tinker` through the `tinker` SDK: concurrent
sampling clients, and `forward_backward` of many data in one request. Prints one JSON line.

  # N clients, each its own session, sampling at once (unseeded, no stop: every row decodes
  # --max-tokens tokens); wall time from the common start to the last answer:
  .venv-tinker/bin/python scripts/clients/tinker_bench.py sample --base-url http://127.0.0.1:8000 \\
      --model SmolLM2-135M-Instruct --clients 4 --num-samples 8 --max-tokens 32
  # the same while another client's forward_backward of 32 data runs (submitted first):
  ... sample ... --train-data 32
  # one LoRA client, forward_backward of --data data of --length tokens, --repeats times:
  .venv-tinker/bin/python scripts/clients/tinker_bench.py forward-backward \\
      --base-url http://127.0.0.1:8000 --model SmolLM2-135M-Instruct --data 32 --length 64
"""

import argparse
import json
import random
import threading
import time

import tinker
from tinker import types


def make_data(n, length, seed=0):
    """`n` cross-entropy data of `length // 2` to `length` random tokens."""
    rng = random.Random(seed)
    data = []
    for _ in range(n):
        k = rng.randint(length // 2, length)
        tokens = [rng.randrange(100, 20000) for _ in range(k + 1)]
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={"target_tokens": tokens[1:]},
            )
        )
    return data


def sample(args):
    """Each client creates its session and sampler and warms up, then all sample at once;
    with `--train-data`, a training client's forward_backward is submitted first."""
    start = threading.Barrier(args.clients + 1 + (args.train_data > 0))
    out = [None] * args.clients
    train = {}

    def trainer():
        sc = tinker.ServiceClient(base_url=args.base_url, api_key=args.api_key)
        tc = sc.create_lora_training_client(base_model=args.model, rank=args.rank, seed=0)
        data = make_data(args.train_data, args.length)
        tc.forward_backward(data[:1], "cross_entropy").result()
        start.wait()
        t0 = time.time()
        tc.forward_backward(data, "cross_entropy").result()
        train["seconds"] = time.time() - t0
        sc.close("success").result()

    def client(i):
        sc = tinker.ServiceClient(base_url=args.base_url, api_key=args.api_key)
        sampler = sc.create_sampling_client(base_model=args.model)
        rng = random.Random(i)
        prompt = types.ModelInput.from_ints([rng.randrange(100, 20000) for _ in range(args.prompt_length)])
        params = types.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, stop=[])
        sampler.sample(prompt, 1, types.SamplingParams(max_tokens=1, stop=[])).result()
        start.wait()
        if args.train_data:
            time.sleep(0.5)
        t0 = time.time()
        seqs = sampler.sample(prompt, args.num_samples, params).result().sequences
        out[i] = {"seconds": time.time() - t0, "tokens": sum(len(s.tokens) for s in seqs)}
        sc.close("success").result()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(args.clients)]
    if args.train_data:
        threads.append(threading.Thread(target=trainer))
    for t in threads:
        t.start()
    start.wait()
    t0 = time.time()
    for t in threads:
        t.join()
    wall = time.time() - t0
    return {
        "mode": "sample",
        "clients": args.clients,
        "num_samples": args.num_samples,
        "max_tokens": args.max_tokens,
        "wall_seconds": round(wall, 3),
        "client_seconds": [round(o["seconds"], 3) for o in out],
        "tokens": sum(o["tokens"] for o in out),
        "train_data": args.train_data,
        "train_seconds": round(train["seconds"], 3) if train else None,
    }


def forward_backward(args):
    """One LoRA client: a warm-up request, then `--repeats` timed forward_backward calls."""
    sc = tinker.ServiceClient(base_url=args.base_url, api_key=args.api_key)
    tc = sc.create_lora_training_client(base_model=args.model, rank=args.rank, seed=0)
    data = make_data(args.data, args.length)
    tc.forward_backward(data[:1], "cross_entropy").result()
    times, losses = [], []
    for _ in range(args.repeats):
        t0 = time.time()
        losses.append(tc.forward_backward(data, "cross_entropy").result().metrics["loss:sum"])
        times.append(round(time.time() - t0, 3))
    sc.close("success").result()
    return {
        "mode": "forward_backward",
        "data": args.data,
        "tokens": sum(len(d.model_input.to_ints()) for d in data),
        "seconds": times,
        "loss_sum": losses,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["sample", "forward-backward"])
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", default="tml-reinforge-local")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--num-samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--prompt-length", type=int, default=16)
    ap.add_argument("--data", type=int, default=32)
    ap.add_argument("--train-data", type=int, default=0, help="sample: a concurrent forward_backward of this many data")
    ap.add_argument("--length", type=int, default=64, help="longest datum's tokens")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rank", type=int, default=8)
    args = ap.parse_args()
    result = sample(args) if args.mode == "sample" else forward_backward(args)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
