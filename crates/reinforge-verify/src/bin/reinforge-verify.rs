//! Stand-alone `reinforge-verify` binary (same as `reinforge verify`), used by
//! `scripts/bench_verify.sh` because the main binary needs libtorch.
use clap::Parser;

#[derive(Parser)]
#[command(
    name = "reinforge-verify",
    about = "Check predicted math answers against gold answers"
)]
struct Cli {
    #[command(flatten)]
    args: reinforge_verify::cli::VerifyArgs,
}

fn main() -> anyhow::Result<()> {
    reinforge_verify::cli::run(&Cli::parse().args)
}
