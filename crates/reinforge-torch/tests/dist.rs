//! c10d through the shim, across real processes: this test binary re-runs itself as 2 and 4
//! Gloo ranks (torchrun's environment variables) that check every collective's result, and a
//! job whose rank 1 dies makes rank 0 fail within the timeout naming rank 1.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use reinforge_torch::dist::{self, Backend, DistEnv, ProcessGroup, ReduceOp};
use reinforge_torch::tch::{Kind, Tensor};

/// A free TCP port for the rendezvous.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs `test` of this binary as every rank of a `world`-rank job; the outputs by rank.
fn launch(test: &str, world: usize, extra: &[(&str, &str)]) -> Vec<Output> {
    let port = free_port().to_string();
    // The test's full name in this binary: its module path without the crate's name.
    let test = match module_path!().split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    };
    let children: Vec<_> = (0..world)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    &test,
                    "--ignored",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", &port)
                .envs(extra.iter().copied())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect()
}

fn values(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(t).unwrap()
}

/// One rank's checks of every collective (run by [`collectives_agree_across_2_and_4_ranks`]).
#[test]
#[ignore = "a rank of collectives_agree_across_2_and_4_ranks"]
fn rank_collectives() {
    let env = DistEnv::from_env().unwrap().expect("launched as a rank");
    let pg = ProcessGroup::init(&env, Backend::Gloo, Duration::from_secs(30)).unwrap();
    let (r, w) = (env.rank as f32, env.world as f32);
    let a = Tensor::full(
        [3],
        f64::from(r + 1.0),
        (Kind::Float, reinforge_torch::Device::Cpu),
    );
    let b = Tensor::full(
        [2],
        f64::from(r),
        (Kind::Float, reinforge_torch::Device::Cpu),
    );
    pg.all_reduce(&[&a, &b], ReduceOp::Sum).unwrap();
    assert_eq!(values(&a), vec![w * (w + 1.0) / 2.0; 3]);
    assert_eq!(values(&b), vec![w * (w - 1.0) / 2.0; 2]);
    let m = Tensor::from_slice(&[r, -r]);
    pg.all_reduce(&[&m], ReduceOp::Max).unwrap();
    assert_eq!(values(&m), vec![w - 1.0, 0.0]);
    let c = Tensor::from_slice(&[r * 10.0, 7.0]);
    pg.broadcast(&c, 1).unwrap();
    assert_eq!(values(&c), vec![10.0, 7.0]);
    let g = pg.all_gather(&Tensor::from_slice(&[r, r * r])).unwrap();
    for (k, t) in g.iter().enumerate() {
        assert_eq!(values(t), vec![k as f32, (k * k) as f32]);
    }
    // inputs[k] = 100·rank + k: rank k receives Σ_ranks (100·rank + k).
    let inputs: Vec<Tensor> = (0..env.world)
        .map(|k| Tensor::from_slice(&[100.0 * r + k as f32]))
        .collect();
    let out = pg.reduce_scatter(&inputs, ReduceOp::Sum).unwrap();
    assert_eq!(values(&out), vec![100.0 * w * (w - 1.0) / 2.0 + r * w]);
    pg.barrier().unwrap();
    println!("rank {} ok", env.rank);
}

#[test]
fn collectives_agree_across_2_and_4_ranks() {
    assert!(
        dist::available(),
        "built without the c10d shim (scripts/setup.sh installs Gloo's headers)"
    );
    for world in [2, 4] {
        let outs = launch("rank_collectives", world, &[]);
        for (r, o) in outs.iter().enumerate() {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success() && text.contains(&format!("rank {r} ok")),
                "world {world} rank {r}: {text}\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}

/// Rank 1 exits after joining; rank 0's next collective must fail naming it.
#[test]
#[ignore = "a rank of a_dead_rank_is_named_within_the_timeout"]
fn rank_dies() {
    let env = DistEnv::from_env().unwrap().expect("launched as a rank");
    let pg = ProcessGroup::init(&env, Backend::Gloo, Duration::from_secs(5)).unwrap();
    pg.barrier().unwrap();
    if env.rank == 1 {
        std::process::exit(3);
    }
    std::thread::sleep(Duration::from_millis(300));
    let t = Tensor::from_slice(&[1.0f32]);
    let start = Instant::now();
    let err = pg.all_reduce(&[&t], ReduceOp::Sum).unwrap_err();
    println!("error after {:.1} s: {err}", start.elapsed().as_secs_f64());
}

#[test]
fn a_dead_rank_is_named_within_the_timeout() {
    let start = Instant::now();
    let outs = launch("rank_dies", 2, &[]);
    assert_eq!(outs[1].status.code(), Some(3));
    let text = String::from_utf8_lossy(&outs[0].stdout);
    assert!(
        text.contains("rank 0: all_reduce failed") && text.contains("rank 1 stopped"),
        "{text}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "took {:?}",
        start.elapsed()
    );
}

/// NCCL is compiled wherever the project's libtorch has CUDA (scripts/setup.sh installs the
/// headers), and where no GPU is, joining an NCCL group is an error naming NCCL, not an abort
/// inside libtorch.
#[test]
fn nccl_is_compiled_with_cuda_and_refuses_cleanly_without_a_gpu() {
    let venv_cuda = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.venv/libtorch/lib/libtorch_cuda.so")
        .exists();
    if dist::available() && venv_cuda && std::env::var("REINFORGE_NCCL").as_deref() != Ok("0") {
        assert!(
            dist::nccl_available(),
            "libtorch has CUDA but NCCL was not compiled"
        );
    }
    if !dist::available() || reinforge_torch::tch::Cuda::is_available() {
        return;
    }
    let env = DistEnv {
        rank: 0,
        world: 1,
        local_rank: 0,
        master_addr: "127.0.0.1".into(),
        master_port: free_port(),
    };
    let err = match ProcessGroup::init(&env, Backend::Nccl, Duration::from_secs(20)) {
        Ok(_) => panic!("an NCCL group formed without a GPU"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("nccl"), "{err}");
    if dist::nccl_available() {
        assert!(err.to_lowercase().contains("gpu"), "{err}");
    } else {
        assert!(err.contains("no NCCL"), "{err}");
    }
}
