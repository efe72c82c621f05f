//! torch.distributed for reinforge: PyTorch's own c10d (TCPStore rendezvous, Gloo on CPU,
//! NCCL on CUDA) through a small C++ shim (`csrc/c10d_shim.cpp`, compiled by build.rs against
//! the installed libtorch), not a transport of our own. The environment contract is
//! torchrun's: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`, so any
//! launcher that sets them (torchrun, Slurm, Kubernetes) starts reinforge ranks.
//!
//! Collectives block until every rank joins or the group's timeout passes. A failed collective
//! names the ranks that stopped: every rank bumps a heartbeat key in the store each second,
//! and after a failure the ranks whose heartbeat stood still are reported (when rank 0, which
//! hosts the store, is the one gone, the store itself is unreachable and the error says so).

pub mod ranks;

use std::ffi::{c_char, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tch::{Device, Tensor};

/// Where a process sits in a job, from torchrun's environment variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DistEnv {
    pub rank: usize,
    pub world: usize,
    pub local_rank: usize,
    pub master_addr: String,
    pub master_port: u16,
}

impl DistEnv {
    /// Reads `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `MASTER_ADDR`, `MASTER_PORT`. `None` when
    /// `WORLD_SIZE` is unset (a single process); errors name the variable that is malformed or
    /// missing.
    pub fn from_env() -> Result<Option<Self>> {
        Self::from_lookup(|k| std::env::var(k).ok())
    }

    /// [`Self::from_env`] over any lookup (tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>> {
        let Some(world) = get("WORLD_SIZE") else {
            return Ok(None);
        };
        let num = |k: &str, v: &str| -> Result<usize> {
            v.trim()
                .parse()
                .with_context(|| format!("environment variable {k}={v:?} is not a number"))
        };
        let world = num("WORLD_SIZE", &world)?;
        let need = |k: &str| get(k).with_context(|| format!("WORLD_SIZE is set but {k} is not"));
        let rank = num("RANK", &need("RANK")?)?;
        let local_rank = match get("LOCAL_RANK") {
            Some(v) => num("LOCAL_RANK", &v)?,
            None => rank,
        };
        let master_port = num("MASTER_PORT", &need("MASTER_PORT")?)?;
        if world == 0 || rank >= world {
            bail!("RANK={rank} must be below WORLD_SIZE={world}");
        }
        let master_port = u16::try_from(master_port)
            .ok()
            .filter(|p| *p > 0)
            .with_context(|| format!("MASTER_PORT={master_port} is not a TCP port"))?;
        Ok(Some(Self {
            rank,
            world,
            local_rank,
            master_addr: need("MASTER_ADDR")?,
            master_port,
        }))
    }
}

/// The communication backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// CPU tensors (libtorch's Gloo).
    Gloo,
    /// CUDA tensors (libtorch's NCCL; compiled whenever libtorch has CUDA, see [`nccl_available`]).
    Nccl,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }
}

/// A reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Max = 1,
    Min = 2,
}

/// Whether this build has the c10d shim (Gloo's headers were found at build time).
pub fn available() -> bool {
    cfg!(reinforge_c10d)
}

/// Whether NCCL's process group is compiled in: build.rs does so whenever the libtorch has its
/// CUDA backend and CUDA's and NCCL's headers are present (the torch wheel's, with
/// scripts/setup.sh's header packages).
pub fn nccl_available() -> bool {
    cfg!(reinforge_nccl)
}

#[cfg(reinforge_c10d)]
extern "C" {
    fn rf_c10d_new(
        backend: *const c_char,
        master_addr: *const c_char,
        port: i32,
        rank: i32,
        world: i32,
        timeout_s: f64,
        err: *mut c_char,
        err_len: usize,
    ) -> *mut c_void;
    fn rf_c10d_free(g: *mut c_void);
    fn rf_c10d_all_reduce(
        g: *mut c_void,
        ts: *mut *mut c_void,
        n: i32,
        op: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32;
    fn rf_c10d_broadcast(
        g: *mut c_void,
        t: *mut c_void,
        root: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32;
    fn rf_c10d_all_gather(
        g: *mut c_void,
        input: *mut c_void,
        outs: *mut *mut c_void,
        world: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32;
    fn rf_c10d_reduce_scatter(
        g: *mut c_void,
        output: *mut c_void,
        inputs: *mut *mut c_void,
        world: i32,
        op: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32;
    fn rf_c10d_barrier(g: *mut c_void, err: *mut c_char, len: usize) -> i32;
    fn rf_c10d_store_set(
        g: *mut c_void,
        key: *const c_char,
        value: *const c_char,
        err: *mut c_char,
        len: usize,
    ) -> i32;
    fn rf_c10d_store_get(
        g: *mut c_void,
        key: *const c_char,
        value: *mut c_char,
        value_len: usize,
        err: *mut c_char,
        len: usize,
    ) -> i32;
}

/// Without the shim every entry point fails with how to get it.
#[cfg(not(reinforge_c10d))]
mod fallback {
    use super::*;

    fn missing(err: *mut c_char, len: usize) -> i32 {
        let msg = b"this build of reinforge has no torch.distributed: Gloo's headers were not found when reinforge-torch was built (run scripts/setup.sh, which installs them, then rebuild)\0";
        let n = msg.len().min(len);
        // SAFETY: `err` points to `len` writable bytes (the callers' buffers).
        unsafe {
            std::ptr::copy_nonoverlapping(msg.as_ptr().cast(), err, n);
            *err.add(n - 1) = 0;
        }
        1
    }

    pub unsafe fn rf_c10d_new(
        _: *const c_char,
        _: *const c_char,
        _: i32,
        _: i32,
        _: i32,
        _: f64,
        err: *mut c_char,
        len: usize,
    ) -> *mut c_void {
        missing(err, len);
        std::ptr::null_mut()
    }
    pub unsafe fn rf_c10d_free(_: *mut c_void) {}
    pub unsafe fn rf_c10d_all_reduce(
        _: *mut c_void,
        _: *mut *mut c_void,
        _: i32,
        _: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32 {
        missing(err, len)
    }
    pub unsafe fn rf_c10d_broadcast(
        _: *mut c_void,
        _: *mut c_void,
        _: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32 {
        missing(err, len)
    }
    pub unsafe fn rf_c10d_all_gather(
        _: *mut c_void,
        _: *mut c_void,
        _: *mut *mut c_void,
        _: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32 {
        missing(err, len)
    }
    pub unsafe fn rf_c10d_reduce_scatter(
        _: *mut c_void,
        _: *mut c_void,
        _: *mut *mut c_void,
        _: i32,
        _: i32,
        err: *mut c_char,
        len: usize,
    ) -> i32 {
        missing(err, len)
    }
    pub unsafe fn rf_c10d_barrier(_: *mut c_void, err: *mut c_char, len: usize) -> i32 {
        missing(err, len)
    }
    pub unsafe fn rf_c10d_store_set(
        _: *mut c_void,
        _: *const c_char,
        _: *const c_char,
        err: *mut c_char,
        len: usize,
    ) -> i32 {
        missing(err, len)
    }
    pub unsafe fn rf_c10d_store_get(
        _: *mut c_void,
        _: *const c_char,
        _: *mut c_char,
        _: usize,
        err: *mut c_char,
        len: usize,
    ) -> i32 {
        missing(err, len)
    }
}
#[cfg(not(reinforge_c10d))]
use fallback::*;

const ERR_LEN: usize = 4096;

/// The shim's group handle, shareable with the heartbeat thread (c10d's store client
/// serialises its own operations).
struct Handle(*mut c_void);
// SAFETY: the handle is only used through the shim, whose store operations lock internally;
// collectives are issued from the owning thread only.
unsafe impl Send for Handle {}
// SAFETY: as above.
unsafe impl Sync for Handle {}

/// Runs a shim call with an error buffer; its message on failure.
fn call(f: impl FnOnce(*mut c_char, usize) -> i32) -> std::result::Result<(), String> {
    let mut buf = vec![0u8; ERR_LEN];
    if f(buf.as_mut_ptr().cast(), ERR_LEN) == 0 {
        return Ok(());
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(ERR_LEN);
    Err(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// A process group: this rank's handle to every collective of the job.
pub struct ProcessGroup {
    handle: Arc<Handle>,
    rank: usize,
    world: usize,
    /// Where the backend moves data: NCCL only moves CUDA tensors (this rank's GPU), Gloo
    /// moves CPU tensors (`None`: use tensors where they are).
    staging: Option<Device>,
    stop: Arc<AtomicBool>,
    heartbeat: Option<std::thread::JoinHandle<()>>,
}

/// Seconds between heartbeats.
const HEARTBEAT: Duration = Duration::from_millis(500);

impl ProcessGroup {
    /// Joins the job `env` describes (rank 0 hosts the TCPStore at `MASTER_ADDR:MASTER_PORT`)
    /// with `backend`; every collective fails after `timeout`.
    pub fn init(env: &DistEnv, backend: Backend, timeout: Duration) -> Result<Self> {
        let b = CString::new(backend.name())?;
        let addr = CString::new(env.master_addr.as_str())?;
        let mut ptr = std::ptr::null_mut();
        call(|err, len| {
            // SAFETY: valid C strings and an error buffer of `len` bytes.
            ptr = unsafe {
                rf_c10d_new(
                    b.as_ptr(),
                    addr.as_ptr(),
                    i32::from(env.master_port),
                    env.rank as i32,
                    env.world as i32,
                    timeout.as_secs_f64(),
                    err,
                    len,
                )
            };
            i32::from(ptr.is_null())
        })
        .map_err(|e| {
            anyhow::anyhow!(
                "rank {}: joining the {} group of {} ranks at {}:{}: {e}",
                env.rank,
                backend.name(),
                env.world,
                env.master_addr,
                env.master_port
            )
        })?;
        let handle = Arc::new(Handle(ptr));
        let stop = Arc::new(AtomicBool::new(false));
        let heartbeat = {
            let (h, stop, rank) = (handle.clone(), stop.clone(), env.rank);
            std::thread::spawn(move || {
                let mut beat = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    beat += 1;
                    let _ = set_key(&h, &rank.to_string(), &beat.to_string());
                    std::thread::sleep(HEARTBEAT);
                }
            })
        };
        Ok(Self {
            handle,
            rank: env.rank,
            world: env.world,
            staging: match backend {
                Backend::Nccl => Some(Device::Cuda(env.local_rank)),
                Backend::Gloo => None,
            },
            stop,
            heartbeat: Some(heartbeat),
        })
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world(&self) -> usize {
        self.world
    }

    /// In-place all-reduce of `tensors`: one collective over one flat buffer holding them all
    /// (a gradient bucket), copied back afterwards. They must share a dtype and device.
    pub fn all_reduce(&self, tensors: &[&Tensor], op: ReduceOp) -> Result<()> {
        let _guard = tch::no_grad_guard();
        if let [t] = tensors {
            return self.all_reduce_one(t, op);
        }
        if let Some(t) = tensors.iter().find(|t| t.kind() != tensors[0].kind()) {
            bail!(
                "all_reduce of mixed dtypes ({:?} and {:?})",
                tensors[0].kind(),
                t.kind()
            );
        }
        let parts: Vec<Tensor> = tensors.iter().map(|t| t.detach().reshape([-1])).collect();
        let flat = Tensor::cat(&parts, 0);
        self.all_reduce_one(&flat, op)?;
        let mut offset = 0;
        for t in tensors {
            let n = t.numel() as i64;
            t.detach()
                .copy_(&flat.narrow(0, offset, n).view(t.size().as_slice()));
            offset += n;
        }
        Ok(())
    }

    /// `t` where the backend can move it, and whether that is a copy to write back. A step's
    /// host values (counts, per-row sums read back as numbers) cross NCCL through the GPU: one
    /// small copy each way, named here rather than at every caller.
    fn staged(&self, t: &Tensor) -> (Tensor, bool) {
        match self.staging {
            Some(d) if t.device() != d => (t.to_device(d), true),
            _ => (t.shallow_clone(), false),
        }
    }

    /// In-place all-reduce of one tensor.
    fn all_reduce_one(&self, t: &Tensor, op: ReduceOp) -> Result<()> {
        let (mut owned, copied) = self.staged(t);
        let mut ptrs: Vec<*mut c_void> = vec![owned.as_mut_ptr().cast()];
        self.check("all_reduce", |err, len| {
            // SAFETY: `ptrs` holds a live at::Tensor handle owned by `owned`.
            unsafe { rf_c10d_all_reduce(self.handle.0, ptrs.as_mut_ptr(), 1, op as i32, err, len) }
        })?;
        if copied {
            t.detach().copy_(&owned);
        }
        Ok(())
    }

    /// In-place broadcast of `t` from rank `root`.
    pub fn broadcast(&self, t: &Tensor, root: usize) -> Result<()> {
        let (mut owned, copied) = self.staged(t);
        let p = owned.as_mut_ptr().cast();
        self.check("broadcast", |err, len| {
            // SAFETY: `p` is a live at::Tensor handle held by `owned`.
            unsafe { rf_c10d_broadcast(self.handle.0, p, root as i32, err, len) }
        })?;
        if copied {
            tch::no_grad(|| t.detach().copy_(&owned));
        }
        Ok(())
    }

    /// Every rank's `t`, in rank order (same shape on every rank).
    pub fn all_gather(&self, t: &Tensor) -> Result<Vec<Tensor>> {
        let (input, copied) = self.staged(t);
        let outs: Vec<Tensor> = (0..self.world).map(|_| input.empty_like()).collect();
        self.all_gather_into(&input, &outs)?;
        Ok(match copied {
            true => outs.iter().map(|o| o.to_device(t.device())).collect(),
            false => outs,
        })
    }

    /// Every rank's `t` written into `outs` (one per rank, in rank order; views of one buffer
    /// work, so a gather needs no extra copy).
    pub fn all_gather_into(&self, t: &Tensor, outs: &[Tensor]) -> Result<()> {
        if outs.len() != self.world {
            bail!(
                "all_gather needs one output per rank ({}), got {}",
                self.world,
                outs.len()
            );
        }
        let mut input = t.shallow_clone();
        let mut outs: Vec<Tensor> = outs.iter().map(Tensor::shallow_clone).collect();
        let mut ptrs: Vec<*mut c_void> = outs.iter_mut().map(|o| o.as_mut_ptr().cast()).collect();
        let ip = input.as_mut_ptr().cast();
        self.check("all_gather", |err, len| {
            // SAFETY: live handles held by `input` and `outs`.
            unsafe {
                rf_c10d_all_gather(
                    self.handle.0,
                    ip,
                    ptrs.as_mut_ptr(),
                    self.world as i32,
                    err,
                    len,
                )
            }
        })
    }

    /// Reduces `inputs[r]` over ranks for every `r` and returns this rank's share
    /// (`inputs.len()` must equal the world size; shapes equal).
    pub fn reduce_scatter(&self, inputs: &[Tensor], op: ReduceOp) -> Result<Tensor> {
        if inputs.len() != self.world {
            bail!(
                "reduce_scatter needs one input per rank ({}), got {}",
                self.world,
                inputs.len()
            );
        }
        let mut owned: Vec<Tensor> = inputs.iter().map(|t| self.staged(t).0).collect();
        let mut ptrs: Vec<*mut c_void> = owned.iter_mut().map(|t| t.as_mut_ptr().cast()).collect();
        let mut out = owned[0].empty_like();
        let op_ptr = out.as_mut_ptr().cast();
        self.check("reduce_scatter", |err, len| {
            // SAFETY: live handles held by `owned` and `out`.
            unsafe {
                rf_c10d_reduce_scatter(
                    self.handle.0,
                    op_ptr,
                    ptrs.as_mut_ptr(),
                    self.world as i32,
                    op as i32,
                    err,
                    len,
                )
            }
        })?;
        Ok(out.to_device(inputs[0].device()))
    }

    /// Waits until every rank arrives.
    pub fn barrier(&self) -> Result<()> {
        self.check("barrier", |err, len| {
            // SAFETY: a live group handle and an error buffer.
            unsafe { rf_c10d_barrier(self.handle.0, err, len) }
        })
    }

    /// Runs collective `what`; on failure the error names this rank and the ranks whose
    /// heartbeat stopped.
    fn check(&self, what: &str, f: impl FnOnce(*mut c_char, usize) -> i32) -> Result<()> {
        call(f).map_err(|e| {
            anyhow::anyhow!(
                "rank {}: {what} failed: {}; {}",
                self.rank,
                e.lines().next().unwrap_or(""),
                self.dead_ranks()
            )
        })
    }

    /// Which ranks stopped beating, watched over three heartbeat periods.
    fn dead_ranks(&self) -> String {
        let read = || -> Option<Vec<Option<String>>> {
            let mut v = vec![];
            for r in 0..self.world {
                match get_key(&self.handle, &r.to_string()) {
                    Ok(x) => v.push(Some(x)),
                    Err(e) if e.contains("no key") => v.push(None),
                    Err(_) => return None,
                }
            }
            Some(v)
        };
        let Some(before) = read() else {
            return "the store on rank 0 is unreachable: rank 0 stopped".into();
        };
        std::thread::sleep(HEARTBEAT * 3);
        let Some(after) = read() else {
            return "the store on rank 0 is unreachable: rank 0 stopped".into();
        };
        let dead: Vec<String> = (0..self.world)
            .filter(|&r| r != self.rank && before[r] == after[r])
            .map(|r| r.to_string())
            .collect();
        if dead.is_empty() {
            "every rank is still alive (a timeout or a mismatched collective)".into()
        } else {
            format!("rank {} stopped (no heartbeat)", dead.join(", "))
        }
    }
}

fn set_key(h: &Handle, key: &str, value: &str) -> std::result::Result<(), String> {
    let (k, v) = (
        CString::new(key).unwrap_or_default(),
        CString::new(value).unwrap_or_default(),
    );
    call(|err, len| {
        // SAFETY: valid C strings, a live handle and an error buffer.
        unsafe { rf_c10d_store_set(h.0, k.as_ptr(), v.as_ptr(), err, len) }
    })
}

fn get_key(h: &Handle, key: &str) -> std::result::Result<String, String> {
    let k = CString::new(key).unwrap_or_default();
    let mut buf = vec![0u8; 64];
    call(|err, len| {
        // SAFETY: valid C string, a live handle, and buffers of the stated lengths.
        unsafe { rf_c10d_store_get(h.0, k.as_ptr(), buf.as_mut_ptr().cast(), 64, err, len) }
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(64);
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Gradient bucket size of [`all_reduce_gradients`]: 25 MB, torch DDP's `bucket_cap_mb`.
pub const DEFAULT_BUCKET_BYTES: usize = 25 << 20;

/// Sums the gradients of `vs`'s trainable variables over every rank, one all-reduce per
/// bucket of at most `bucket_bytes` (a variable without a gradient counts as zeros).
pub fn all_reduce_gradients(
    pg: &ProcessGroup,
    vs: &tch::nn::VarStore,
    bucket_bytes: usize,
) -> Result<()> {
    // A frozen variable (an LM head under a reward model's score) has no gradient to sum.
    let vars: Vec<Tensor> = vs
        .trainable_variables()
        .into_iter()
        .filter(Tensor::requires_grad)
        .collect();
    for v in &vars {
        if !v.grad().defined() {
            // A zero gradient, so every rank reduces the same buffers (a backward pass
            // through `0 · Σ v` touches only this leaf).
            (v * 0.0).sum(v.kind()).backward();
        }
    }
    let _guard = tch::no_grad_guard();
    let grads: Vec<Tensor> = vars.iter().map(Tensor::grad).collect();
    let mut bucket: Vec<&Tensor> = vec![];
    let mut bytes = 0;
    for g in &grads {
        let size = g.numel() * g.kind().elt_size_in_bytes();
        if !bucket.is_empty() && bytes + size > bucket_bytes {
            pg.all_reduce(&bucket, ReduceOp::Sum)?;
            bucket.clear();
            bytes = 0;
        }
        bucket.push(g);
        bytes += size;
    }
    if !bucket.is_empty() {
        pg.all_reduce(&bucket, ReduceOp::Sum)?;
    }
    Ok(())
}

/// Copies rank 0's values of every variable of `vs` to every rank (at start and on resume,
/// so all ranks train the same weights).
pub fn broadcast_parameters(pg: &ProcessGroup, vs: &tch::nn::VarStore) -> Result<()> {
    let _guard = tch::no_grad_guard();
    let mut named: Vec<(String, Tensor)> = vs.variables().into_iter().collect();
    named.sort_by(|a, b| a.0.cmp(&b.0));
    for (_, t) in &named {
        pg.broadcast(t, 0)?;
    }
    Ok(())
}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProcessGroup(rank {} of {})", self.rank, self.world)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.heartbeat.take() {
            let _ = h.join();
        }
        // SAFETY: the heartbeat thread has ended; this is the last user of the handle.
        unsafe { rf_c10d_free(self.handle.0) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Option<DistEnv>> {
        let m: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        DistEnv::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn torchrun_variables_are_read_and_checked() {
        assert_eq!(env(&[]).unwrap(), None);
        let e = env(&[
            ("WORLD_SIZE", "4"),
            ("RANK", "2"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("MASTER_PORT", "29500"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (e.rank, e.world, e.local_rank, e.master_port),
            (2, 4, 2, 29500)
        );
        let err = env(&[("WORLD_SIZE", "2"), ("RANK", "0"), ("MASTER_ADDR", "x")]).unwrap_err();
        assert!(err.to_string().contains("MASTER_PORT"), "{err}");
        let err = env(&[
            ("WORLD_SIZE", "2"),
            ("RANK", "2"),
            ("MASTER_ADDR", "x"),
            ("MASTER_PORT", "1"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("RANK=2"), "{err}");
        let err = env(&[
            ("WORLD_SIZE", "two"),
            ("RANK", "0"),
            ("MASTER_ADDR", "x"),
            ("MASTER_PORT", "1"),
        ])
        .unwrap_err();
        assert!(err.to_string().contains("WORLD_SIZE"), "{err}");
    }
}
