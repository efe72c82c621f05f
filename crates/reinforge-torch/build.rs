//! Compiles the c10d shim (csrc/c10d_shim.cpp) against the installed libtorch's headers when
//! Gloo's headers are found, and sets `cfg(reinforge_c10d)`; without them the crate builds
//! with distributed training reporting how to enable it. libtorch ships c10d's headers and
//! symbols but not Gloo's headers, which `ProcessGroupGloo.hpp` includes: scripts/setup.sh
//! unpacks Debian's libgloo-dev into .venv/gloo (headers only; the code is libtorch's).
//! NCCL is compiled in with `REINFORGE_NCCL=1` when CUDA's and NCCL's headers are present.
//!
//! Also compiles csrc/optim_shim.cpp (libtorch's fused AdamW kernel, which tch does not bind)
//! whenever libtorch's headers are there, and sets `cfg(reinforge_fused_adamw)`; without it
//! the optimizer uses the tch expression of the same update.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rustc-check-cfg=cfg(reinforge_c10d)");
    println!("cargo:rustc-check-cfg=cfg(reinforge_fused_adamw)");
    println!("cargo:rerun-if-changed=csrc/c10d_shim.cpp");
    println!("cargo:rerun-if-changed=csrc/optim_shim.cpp");
    for var in [
        "LIBTORCH",
        "REINFORGE_GLOO_INCLUDE",
        "REINFORGE_NCCL",
        "CUDA_HOME",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let Some(libtorch) = std::env::var_os("LIBTORCH").map(PathBuf::from) else {
        println!("cargo:warning=LIBTORCH is not set: building without torch.distributed");
        return;
    };
    compile_optim_shim(&libtorch);
    let Some(gloo) = gloo_include(&libtorch) else {
        println!(
            "cargo:warning=Gloo headers not found (scripts/setup.sh installs them into .venv/gloo): \
             building without torch.distributed"
        );
        return;
    };
    println!(
        "cargo:rerun-if-changed={}",
        gloo.join("gloo/context.h").display()
    );
    let include = libtorch.join("include");
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .file("csrc/c10d_shim.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .include(&gloo)
        .define("USE_C10D_GLOO", None)
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .warnings(false);
    if std::env::var("REINFORGE_NCCL").as_deref() == Ok("1") {
        let cuda = std::env::var_os("CUDA_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("/usr/local/cuda"));
        build
            .define("USE_C10D_NCCL", None)
            .define("REINFORGE_NCCL", None)
            .include(cuda.join("include"));
    }
    build.compile("reinforge_c10d");
    println!("cargo:rustc-cfg=reinforge_c10d");
}

/// Compiles the fused-AdamW shim when libtorch's headers are present.
fn compile_optim_shim(libtorch: &Path) {
    let include = libtorch.join("include");
    if !include.join("ATen/ATen.h").is_file() {
        println!("cargo:warning=libtorch headers not found: AdamW without the fused kernel");
        return;
    }
    cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file("csrc/optim_shim.cpp")
        .include(&include)
        .include(include.join("torch/csrc/api/include"))
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .warnings(false)
        .compile("reinforge_optim");
    println!("cargo:rustc-cfg=reinforge_fused_adamw");
}

/// Where `gloo/context.h` is: `REINFORGE_GLOO_INCLUDE`, the project's .venv/gloo (next to
/// libtorch's venv), or the system include directory.
fn gloo_include(libtorch: &Path) -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = std::env::var_os("REINFORGE_GLOO_INCLUDE")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    // LIBTORCH is <root>/.venv/libtorch (a symlink); .venv/gloo/usr/include sits beside it.
    if let Some(venv) = libtorch.parent() {
        candidates.push(venv.join("gloo/usr/include"));
    }
    candidates.push(PathBuf::from("/usr/include"));
    candidates
        .into_iter()
        .find(|d| d.join("gloo/context.h").is_file())
}
