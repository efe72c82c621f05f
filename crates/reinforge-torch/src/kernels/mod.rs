//! The kernels room: CPU kernels of the passes that record no gradient (sampling, serving,
//! log-prob passes), each behind a C++ shim in `csrc/` compiled by build.rs, and the switches
//! that choose between a shim and libtorch's own op (`choice`: `REINFORGE_CPU_LINEAR`,
//! `REINFORGE_DECODE_ATTENTION`, `REINFORGE_SAMPLING_OPS`). The model calls them; nothing here
//! knows a model.

pub mod choice;
pub mod decode_attention;
pub mod linear;
pub mod sampling_ops;
