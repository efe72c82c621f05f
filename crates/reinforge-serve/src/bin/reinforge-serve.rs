//! `reinforge-serve`: the reward and sandbox server on its own (the same as `reinforge serve`,
//! without the libtorch-linked CLI around it).

use clap::Parser;

#[derive(Parser)]
#[command(name = "reinforge-serve", version)]
struct Cli {
    #[command(flatten)]
    args: reinforge_serve::ServeArgs,
}

fn main() -> anyhow::Result<()> {
    reinforge_serve::run(&Cli::parse().args)
}
