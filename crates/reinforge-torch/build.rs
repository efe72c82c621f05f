//! Compiles the c10d shim (csrc/c10d_shim.cpp) against the installed libtorch's headers when
//! Gloo's headers are found, and sets `cfg(reinforge_c10d)`; without them the crate builds
//! with distributed training reporting how to enable it. libtorch ships c10d's headers and
//! symbols but not Gloo's headers, which `ProcessGroupGloo.hpp` includes: scripts/setup.sh
//! unpacks Debian's libgloo-dev into .venv/gloo (headers only; the code is libtorch's).
//! NCCL is compiled in whenever the libtorch has its CUDA backend (`lib/libtorch_cuda.so`) and
//! CUDA's and NCCL's headers are found: the torch wheel's own `nvidia/cu13/include` and
//! `nvidia/nccl/include` beside it, or `CUDA_HOME`/`NCCL_HOME`. `REINFORGE_NCCL=0` leaves it out
//! (`REINFORGE_NCCL=1` makes missing headers an error). It sets `cfg(reinforge_nccl)`.
//!
//! Also compiles csrc/autocast_shim.cpp (`at::autocast` per device type, `cfg(reinforge_autocast)`),
//! csrc/linear_shim.cpp (oneDNN's linear for sampling forwards on the CPU, `cfg(reinforge_onednn_linear)`),
//! csrc/decode_attention_shim.cpp (one-pass attention of decoding steps, `cfg(reinforge_decode_attention)`)
//! and csrc/optim_shim.cpp (libtorch's fused AdamW kernel and dropping a gradient, which tch
//! does not bind)
//! whenever libtorch's headers are there, and sets `cfg(reinforge_fused_adamw)`; without it
//! the optimizer uses the tch expression of the same update.

use std::path::{Path, PathBuf};

fn main() {
    println!("cargo:rustc-check-cfg=cfg(reinforge_c10d)");
    println!("cargo:rustc-check-cfg=cfg(reinforge_fused_adamw)");
    println!("cargo:rustc-check-cfg=cfg(reinforge_nccl)");
    println!("cargo:rustc-check-cfg=cfg(reinforge_autocast)");
    println!("cargo:rustc-check-cfg=cfg(reinforge_onednn_linear)");
    println!("cargo:rustc-check-cfg=cfg(reinforge_decode_attention)");
    println!("cargo:rustc-check-cfg=cfg(reinforge_sampling_ops)");
    println!("cargo:rerun-if-changed=csrc/c10d_shim.cpp");
    println!("cargo:rerun-if-changed=csrc/shim_error.h");
    println!("cargo:rerun-if-changed=csrc/vec8.h");
    for file in SHIMS.iter().map(|(file, _)| *file).chain([UNITY]) {
        println!("cargo:rerun-if-changed={file}");
    }
    for var in [
        "LIBTORCH",
        "REINFORGE_GLOO_INCLUDE",
        "REINFORGE_NCCL",
        "CUDA_HOME",
        "NCCL_HOME",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let Some(libtorch) = std::env::var_os("LIBTORCH").map(PathBuf::from) else {
        println!("cargo:warning=LIBTORCH is not set: building without torch.distributed");
        return;
    };
    // Two independent compiles of ATen's headers: side by side where a core is free.
    std::thread::scope(|s| {
        s.spawn(|| compile_shims(&libtorch));
        compile_c10d(&libtorch);
    });
}

/// Compiles the c10d shim when Gloo's headers are found (with NCCL when [`nccl_includes`]
/// finds it) and sets `cfg(reinforge_c10d)`.
fn compile_c10d(libtorch: &Path) {
    let Some(gloo) = gloo_include(libtorch) else {
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
    let mut build = shim_build(&libtorch.join("include"), &["csrc/c10d_shim.cpp"]);
    build.include(&gloo).define("USE_C10D_GLOO", None);
    let nccl = nccl_includes(libtorch);
    if let Some(dirs) = &nccl {
        build
            .define("USE_C10D_NCCL", None)
            .define("REINFORGE_NCCL", None);
        for d in dirs {
            build.include(d);
        }
    }
    build.compile("reinforge_c10d");
    println!("cargo:rustc-cfg=reinforge_c10d");
    if nccl.is_some() {
        println!("cargo:rustc-cfg=reinforge_nccl");
    }
}

/// The include directories NCCL's process group needs (CUDA runtime and NCCL headers), when
/// NCCL is to be compiled: libtorch has its CUDA backend and both headers are found, unless
/// `REINFORGE_NCCL=0`. With `REINFORGE_NCCL=1`, missing pieces stop the build.
fn nccl_includes(libtorch: &Path) -> Option<Vec<PathBuf>> {
    let wanted = std::env::var("REINFORGE_NCCL").ok();
    if wanted.as_deref() == Some("0") {
        return None;
    }
    let required = wanted.as_deref() == Some("1");
    let found = nccl_headers(libtorch);
    if found.is_none() && required {
        panic!(
            "REINFORGE_NCCL=1 but libtorch's CUDA backend ({}) or the CUDA/NCCL headers \
             (cuda_runtime_api.h, nccl.h; CUDA_HOME, NCCL_HOME or the torch wheel's nvidia/) \
             were not found",
            libtorch.join("lib/libtorch_cuda.so").display()
        );
    }
    if found.is_none() && libtorch.join("lib/libtorch_cuda.so").is_file() {
        println!("cargo:warning=CUDA/NCCL headers not found: building without NCCL");
    }
    found
}

/// `[cuda, nccl]` include directories when libtorch has CUDA and the headers exist.
fn nccl_headers(libtorch: &Path) -> Option<Vec<PathBuf>> {
    if !libtorch.join("lib/libtorch_cuda.so").is_file() {
        return None;
    }
    // The wheel's NVIDIA packages sit beside torch/ in site-packages (LIBTORCH is a symlink
    // to site-packages/torch; canonicalize to reach its real parent).
    let site = std::fs::canonicalize(libtorch)
        .ok()
        .and_then(|t| t.parent().map(|p| p.join("nvidia")));
    let env_dir = |var: &str| std::env::var_os(var).map(|v| PathBuf::from(v).join("include"));
    let first = |header: &str, candidates: Vec<Option<PathBuf>>| {
        candidates
            .into_iter()
            .flatten()
            .find(|d| d.join(header).is_file())
    };
    let cuda = first(
        "cuda_runtime_api.h",
        vec![
            env_dir("CUDA_HOME"),
            site.as_ref().map(|s| s.join("cu13/include")),
            site.as_ref().map(|s| s.join("cuda_runtime/include")),
            Some(PathBuf::from("/usr/local/cuda/include")),
        ],
    )?;
    let nccl = first(
        "nccl.h",
        vec![
            env_dir("NCCL_HOME"),
            site.as_ref().map(|s| s.join("nccl/include")),
            Some(cuda.clone()),
            Some(PathBuf::from("/usr/include")),
        ],
    )?;
    // The runtime package ships no `crt/` and no CCCL (`nv/target`); scripts/setup.sh adds the
    // header-only nvidia-cuda-crt and nvidia-cuda-cccl of the wheel's CUDA into the same dir.
    if !cuda.join("crt/host_config.h").is_file() || !cuda.join("nv/target").is_file() {
        return None;
    }
    Some(vec![cuda, nccl])
}

/// The file that includes every source of [`SHIMS`].
const UNITY: &str = "csrc/shims.cpp";

/// The shims compiled whenever libtorch's headers are present: (source, cfg set).
const SHIMS: [(&str, &str); 5] = [
    ("csrc/optim_shim.cpp", "reinforge_fused_adamw"),
    ("csrc/autocast_shim.cpp", "reinforge_autocast"),
    ("csrc/linear_shim.cpp", "reinforge_onednn_linear"),
    (
        "csrc/decode_attention_shim.cpp",
        "reinforge_decode_attention",
    ),
    ("csrc/sampling_ops_shim.cpp", "reinforge_sampling_ops"),
];

/// Compiles the fused-AdamW, autocast, oneDNN-linear, decode-attention and sampling-ops shims
/// ([`SHIMS`]) as one translation unit (csrc/shims.cpp: ATen's headers parsed once) when
/// libtorch's headers are present.
fn compile_shims(libtorch: &Path) {
    let include = libtorch.join("include");
    if !include.join("ATen/ATen.h").is_file() {
        println!("cargo:warning=libtorch headers not found: AdamW without the fused kernel");
        return;
    }
    shim_build(&include, &[UNITY]).compile("reinforge_shims");
    for (_, cfg) in SHIMS {
        println!("cargo:rustc-cfg={cfg}");
    }
}

/// A C++17 build of shim sources against libtorch's headers (ATen and the C++ API).
fn shim_build(include: &Path, files: &[&str]) -> cc::Build {
    let mut build = cc::Build::new();
    build
        .cpp(true)
        .std("c++17")
        .files(files)
        .include(include)
        .include(include.join("torch/csrc/api/include"))
        // ATen's `parallel_for` is inline OpenMP in libtorch's headers: without -fopenmp it runs
        // on one thread. The OpenMP runtime is libtorch's own libgomp, which torch-sys links.
        .flag_if_supported("-fopenmp")
        .flag_if_supported("-Wno-psabi")
        .flag_if_supported("-Wno-unused-parameter")
        .flag_if_supported("-Wno-deprecated-declarations")
        .warnings(false);
    build
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
