"""Seconds per torch.optim.AdamW step (fused, foreach and single-tensor) on the parameter
shapes of crates/reinforge-torch/examples/adamw_bench.rs (SmolLM2-135M's), for
scripts/bench_adamw.sh. Prints one JSON line per implementation: the median over ITERS steps
after one warm-up step."""
import json
import os
import time

import torch


def shapes():
    s = [(49152, 576)]
    for _ in range(30):
        s += [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576), (576, 1536), (576,), (576,)]
    return s + [(576,)]


def main():
    threads = int(os.environ.get("THREADS", "2"))
    iters = int(os.environ.get("ITERS", "10"))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in shapes()]
    count = sum(p.numel() for p in params)
    for name, kw in [("torch-fused", {"fused": True}), ("torch-foreach", {"foreach": True}),
                     ("torch-single", {"foreach": False})]:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0, **kw)
        times = []
        for i in range(iters + 1):
            for p in params:
                p.grad = torch.randn_like(p)
            start = time.perf_counter()
            opt.step()
            if i > 0:
                times.append(time.perf_counter() - start)
        times.sort()
        print(json.dumps({"impl": name, "params": count, "threads": threads, "median_s": round(times[len(times) // 2], 6)}))


if __name__ == "__main__":
    main()
