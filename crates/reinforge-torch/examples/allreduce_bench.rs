//! All-reduce bandwidth of reinforge's c10d binding, one rank per process (launched by
//! scripts/bench_allreduce.sh with torchrun's variables, side by side with the same loop in
//! torch.distributed, scripts/bench_allreduce.py). Prints one JSON line per size on rank 0:
//! bytes, median seconds per all-reduce, and bus bandwidth `2 (n-1)/n · bytes / s` (the NCCL
//! tests' definition).
#[path = "support/env.rs"]
mod env;
use env::env_or;

use std::time::{Duration, Instant};

use reinforge_torch::dist::{Backend, DistEnv, ProcessGroup, ReduceOp};
use reinforge_torch::tch::{Kind, Tensor};

fn main() -> anyhow::Result<()> {
    let env = DistEnv::from_env()?
        .ok_or_else(|| anyhow::anyhow!("launch with RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT"))?;
    let pg = ProcessGroup::init(&env, Backend::Gloo, Duration::from_secs(120))?;
    let iters: usize = env_or("ITERS", 20);
    for mb in [1usize, 4, 16, 64] {
        let n = (mb << 20) / 4;
        let t = Tensor::ones([n as i64], (Kind::Float, reinforge_torch::Device::Cpu));
        pg.all_reduce(&[&t], ReduceOp::Sum)?; // warm-up
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            pg.barrier()?;
            let start = Instant::now();
            pg.all_reduce(&[&t], ReduceOp::Sum)?;
            times.push(start.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let med = times[times.len() / 2];
        let w = env.world as f64;
        let bytes = (n * 4) as f64;
        if env.rank == 0 {
            println!(
                "{{\"impl\": \"reinforge\", \"world\": {}, \"bytes\": {}, \"median_s\": {med:.6}, \"busbw_gbps\": {:.4}}}",
                env.world,
                n * 4,
                2.0 * (w - 1.0) / w * bytes / med / 1e9
            );
        }
    }
    Ok(())
}
