//! Links libtorch's CUDA backend into the `reinforge` binary whenever the installed libtorch
//! has one.
//!
//! torch-sys already passes `-ltorch_cuda`, but rustc links with `--as-needed` and no symbol
//! of `libtorch_cuda.so` is referenced, so the linker drops it: libtorch's CUDA kernels never
//! register and every CUDA tensor fails ("Could not run 'aten::empty.memory_format' with
//! arguments from the 'CUDA' backend"). Naming the libraries again inside
//! `--no-as-needed ... --as-needed` keeps them NEEDED. Against a CPU-only libtorch (no
//! `libtorch_cuda.so`) nothing is added and CUDA is simply absent; the device check of
//! `reinforge_torch::runtime::resolve_device` then says so.
//!
//! This is a build script of the binary crate because `rustc-link-arg` does not propagate from
//! a library (reinforge-torch) to the binaries that depend on it (the same reason torch-sys's
//! build script gives for not doing it).

use std::path::PathBuf;

/// libtorch's CUDA libraries, in link order; each is linked when present in `lib/`.
const CUDA_LIBS: &[&str] = &["torch_cuda", "c10_cuda"];

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=REINFORGE_NO_CUDA");
    println!("cargo:rustc-check-cfg=cfg(reinforge_cuda_linked)");
    if std::env::var_os("REINFORGE_NO_CUDA").is_some() {
        return;
    }
    let Some(lib) = std::env::var_os("LIBTORCH").map(|p| PathBuf::from(p).join("lib")) else {
        return;
    };
    let present: Vec<&str> = CUDA_LIBS
        .iter()
        .copied()
        .filter(|name| lib.join(format!("lib{name}.so")).is_file())
        .collect();
    println!(
        "cargo:rerun-if-changed={}",
        lib.join("libtorch_cuda.so").display()
    );
    if present.is_empty() {
        return;
    }
    let names: Vec<String> = present.iter().map(|n| format!("-l{n}")).collect();
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--no-as-needed,{},--as-needed",
        names.join(",")
    );
    println!("cargo:rustc-cfg=reinforge_cuda_linked");
}
