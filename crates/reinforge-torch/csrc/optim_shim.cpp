// libtorch's fused AdamW kernel (`at::_fused_adamw_`, what `torch.optim.AdamW(fused=True)`
// runs) for reinforge-torch's optimizer (src/optim.rs): one multi-threaded pass over a
// parameter, its gradient and both moments, where the tch expression makes about ten passes
// and three parameter-sized temporaries (about 6x slower on a 135M-parameter model, 2 threads).
// tch binds no fused optimizer kernel, hence this C ABI; C++ exceptions come back as text.
#include <ATen/ATen.h>

#include "shim_error.h"

extern "C" {

// One AdamW step (decoupled weight decay) of `p` in place from gradient `g`, first and second
// moments `m` and `v`, at optimizer step `step` (1-based; bias corrections use it).
int rf_fused_adamw(at::Tensor* p, at::Tensor* g, at::Tensor* m, at::Tensor* v, double step,
                   double lr, double beta1, double beta2, double weight_decay, double eps,
                   char* err, size_t len) {
  try {
    at::Tensor steps = at::full({}, step, p->options().dtype(at::kFloat));
    at::_fused_adamw_({*p}, {*g}, {*m}, {*v}, {}, {steps}, lr, beta1, beta2, weight_decay, eps,
                      /*amsgrad=*/false, /*maximize=*/false);
    return 0;
  } catch (const std::exception& e) {
    reinforge_copy_error(e, err, len);
  }
  return 1;
}

// Drops the gradient of `t` (PyTorch's `zero_grad(set_to_none=True)`): its memory goes back
// to the allocator and the next backward pass allocates it afresh. tch can only zero a
// gradient in place, which keeps a parameter-sized buffer alive between updates.
void rf_clear_grad(at::Tensor* t) { t->mutable_grad().reset(); }

}  // extern "C"
