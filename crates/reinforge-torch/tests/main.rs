//! reinforge-torch's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-torch --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md). Three other binaries hold what must not
//! run beside these: `kernels` (the CPU kernel checks draw unseeded inputs from libtorch's
//! one generator, which would land inside these tests' seeded sections), `precision` (the
//! bf16 switch is process-wide) and `heap` (malloc's settings and page-fault counts are
//! per process).

mod golden;
mod hf_support;
mod oracle_support;
mod rl_support;

mod checkpoint_errors;
mod config_keys;
mod device_generic;
mod dist;
mod hf_parity;
mod hf_save;
mod kv_cache;
mod lora;
mod memory;
mod model;
mod moe;
mod oracles;
mod oracles_distill;
mod oracles_dpo;
mod oracles_kto;
mod oracles_orpo;
mod oracles_p2l;
mod oracles_rm;
mod real_model;
mod update;
mod vision;
