"""The loop of crates/reinforge-torch/examples/allreduce_bench.rs in torch.distributed (Gloo):
one rank per process, launched by scripts/bench_allreduce.sh with the same variables. Prints
one JSON line per size on rank 0."""

import json
import os
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    iters = int(os.environ.get("ITERS", "20"))
    for mb in (1, 4, 16, 64):
        n = (mb << 20) // 4
        t = torch.ones(n, dtype=torch.float32)
        dist.all_reduce(t)
        times = []
        for _ in range(iters):
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(t)
            times.append(time.perf_counter() - start)
        times.sort()
        med = times[len(times) // 2]
        if rank == 0:
            busbw = 2 * (world - 1) / world * n * 4 / med / 1e9
            print(json.dumps({"impl": "torch.distributed", "world": world, "bytes": n * 4,
                              "median_s": round(med, 6), "busbw_gbps": round(busbw, 4)}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
