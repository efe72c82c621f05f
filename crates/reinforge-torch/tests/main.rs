//! reinforge-torch's integration tests, one module per file, linked into one test binary
//! (`cargo test -p reinforge-torch --test suite MODULE::`): one link of the crate and its
//! dependencies instead of one per file (docs/ci.md).

mod golden;
mod hf_support;
mod oracle_support;
mod rl_support;

mod checkpoint_errors;
mod config_keys;
mod decode_attention;
mod device_generic;
mod dist;
mod heap;
mod hf_parity;
mod hf_save;
mod kv_cache;
mod linear;
mod lora;
mod memory;
mod model;
mod oracles;
mod oracles_distill;
mod oracles_dpo;
mod oracles_kto;
mod oracles_orpo;
mod oracles_p2l;
mod oracles_rm;
mod precision;
mod real_model;
mod sampling_ops;
mod update;
