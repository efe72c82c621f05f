// The C ABI over PyTorch's own c10d that reinforge-torch binds (src/dist.rs): a TCPStore
// rendezvous, a Gloo (CPU) or NCCL (CUDA) process group, and the collectives training needs
// on at::Tensor (tch's C_tensor is an at::Tensor*). Every call catches C++ exceptions and
// returns them as text, so no exception crosses into Rust.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef REINFORGE_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<c10d::Backend> backend;
  std::chrono::milliseconds timeout;
};

// Copies `msg` into the caller's buffer (always NUL-terminated).
void set_error(char* err, size_t len, const std::string& msg) {
  if (err == nullptr || len == 0) return;
  std::strncpy(err, msg.c_str(), len - 1);
  err[len - 1] = '\0';
}

template <typename F>
int guarded(char* err, size_t len, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    set_error(err, len, e.what());
  } catch (...) {
    set_error(err, len, "unknown C++ exception");
  }
  return 1;
}

c10d::ReduceOp reduce_op(int op) {
  switch (op) {
    case 1: return c10d::ReduceOp::MAX;
    case 2: return c10d::ReduceOp::MIN;
    default: return c10d::ReduceOp::SUM;
  }
}

// Waits for `work`, failing after the group's timeout.
void wait(const Group* g, const c10::intrusive_ptr<c10d::Work>& work) { work->wait(g->timeout); }

}  // namespace

extern "C" {

// A process group of `world` ranks rendezvousing at master_addr:port (rank 0 hosts the
// TCPStore). backend: "gloo" or "nccl". Returns NULL and fills `err` on failure.
void* rf_c10d_new(const char* backend, const char* master_addr, int port, int rank, int world,
                  double timeout_s, char* err, size_t err_len) {
  Group* out = nullptr;
  guarded(err, err_len, [&] {
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000.0));
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<uint16_t>(port);
    opts.isServer = rank == 0;
    opts.numWorkers = world;
    opts.waitWorkers = true;
    opts.timeout = timeout;
    auto tcp = c10::make_intrusive<c10d::TCPStore>(master_addr, opts);
    c10::intrusive_ptr<c10d::Store> store =
        c10::make_intrusive<c10d::PrefixStore>("reinforge/", tcp);
    c10::intrusive_ptr<c10d::Backend> pg;
    std::string name(backend);
    if (name == "gloo") {
      auto o = c10d::ProcessGroupGloo::Options::create(timeout);
      const char* iface = std::getenv("GLOO_SOCKET_IFNAME");
      if (iface != nullptr && *iface != '\0') {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(iface));
      } else {
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, o);
    } else if (name == "nccl") {
#ifdef REINFORGE_NCCL
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = timeout;
      pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, world, o);
#else
      throw std::runtime_error(
          "this build has no NCCL: it is compiled when libtorch has CUDA and CUDA's and NCCL's "
          "headers are found (scripts/setup.sh installs them; see docs/distributed.md)");
#endif
    } else {
      throw std::runtime_error("unknown backend `" + name + "` (gloo or nccl)");
    }
    out = new Group{tcp, pg, timeout};
  });
  return out;
}

void rf_c10d_free(void* g) { delete static_cast<Group*>(g); }

// In-place all-reduce of `n` tensors (op: 0 sum, 1 max, 2 min).
int rf_c10d_all_reduce(void* gp, at::Tensor** ts, int n, int op, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> v;
    for (int i = 0; i < n; ++i) v.push_back(*ts[i]);
    c10d::AllreduceOptions o;
    o.reduceOp = reduce_op(op);
    o.timeout = g->timeout;
    wait(g, g->backend->allreduce(v, o));
  });
}

// In-place broadcast of `t` from `root`.
int rf_c10d_broadcast(void* gp, at::Tensor* t, int root, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> v{*t};
    c10d::BroadcastOptions o;
    o.rootRank = root;
    o.timeout = g->timeout;
    wait(g, g->backend->broadcast(v, o));
  });
}

// Gathers `input` of every rank into `outs[0..world)`.
int rf_c10d_all_gather(void* gp, at::Tensor* input, at::Tensor** outs, int world, char* err,
                       size_t len) {
  return guarded(err, len, [&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> in{*input};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int i = 0; i < world; ++i) out[0].push_back(*outs[i]);
    c10d::AllgatherOptions o;
    o.timeout = g->timeout;
    wait(g, g->backend->allgather(out, in, o));
  });
}

// Reduces `inputs[0..world)` over ranks (op as in all-reduce) and leaves rank r's share,
// the reduction of every rank's inputs[r], in `output`.
int rf_c10d_reduce_scatter(void* gp, at::Tensor* output, at::Tensor** inputs, int world, int op,
                           char* err, size_t len) {
  return guarded(err, len, [&] {
    auto* g = static_cast<Group*>(gp);
    std::vector<at::Tensor> out{*output};
    std::vector<std::vector<at::Tensor>> in(1);
    for (int i = 0; i < world; ++i) in[0].push_back(*inputs[i]);
    c10d::ReduceScatterOptions o;
    o.reduceOp = reduce_op(op);
    o.timeout = g->timeout;
    wait(g, g->backend->reduce_scatter(out, in, o));
  });
}

int rf_c10d_barrier(void* gp, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto* g = static_cast<Group*>(gp);
    c10d::BarrierOptions o;
    o.timeout = g->timeout;
    wait(g, g->backend->barrier(o));
  });
}

// Store access (the heartbeat that names a dead rank): set `key` to `value`.
int rf_c10d_store_set(void* gp, const char* key, const char* value, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto* g = static_cast<Group*>(gp);
    std::string v(value);
    g->store->set(std::string("hb/") + key, std::vector<uint8_t>(v.begin(), v.end()));
  });
}

// Reads `key` into `value` (NUL-terminated, truncated to `value_len`); fails if absent.
int rf_c10d_store_get(void* gp, const char* key, char* value, size_t value_len, char* err,
                      size_t len) {
  return guarded(err, len, [&] {
    auto* g = static_cast<Group*>(gp);
    std::string k = std::string("hb/") + key;
    if (!g->store->check({k})) throw std::runtime_error("no key " + k);
    auto v = g->store->get(k);
    set_error(value, value_len, std::string(v.begin(), v.end()));
  });
}

}  // extern "C"
