//! The CPU kernels' checks against libtorch (the linear kernels, decode attention, the fused
//! sampling ops), in a binary of their own: they draw their inputs from libtorch's one default
//! generator without holding it, which beside the main suite would land inside other tests'
//! seeded sections (`runtime::with_seed`) and make those draws irreproducible.

#[path = "../hf_support/mod.rs"]
mod hf_support;

#[path = "../decode_attention.rs"]
mod decode_attention;
#[path = "../linear.rs"]
mod linear;
#[path = "../sampling_ops.rs"]
mod sampling_ops;
