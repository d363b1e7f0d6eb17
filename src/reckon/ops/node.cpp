#include "reckon/ops/node.h"

#include "reckon/ops/functional.h"

namespace reckon {

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  Tensor g = std::move(grad_outputs[0]);
  if (!g.defined()) return {};
  auto& im = *leaf;
  RK_CHECK(g.shape() == im.shape, "[accumulate_grad] gradient {} for parameter {} of shape {}",
           shape_str(g.shape()), im.name, shape_str(im.shape));
  if (!im.grad) {
    // Take the incoming buffer when nobody else holds it; otherwise copy into a grad buffer.
    if (g.storage_ptr().use_count() == 1 && g.is_contiguous() && g.dtype() == im.dtype &&
        g.storage().tag() == Tag::temporary && g.numel() * int64_t(dtype_size(g.dtype())) == g.storage().bytes()) {
      g.storage().retag(Tag::grad);
      im.grad = g.impl_ptr();
    } else {
      TagGuard tg(Tag::grad);
      Tensor dst = empty(im.shape, im.dtype, g.device());
      copy_(dst, g);
      im.grad = dst.impl_ptr();
    }
  } else {
    add_(Tensor(im.grad), g);
  }
  return {};
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  auto& im = t.impl();
  if (im.grad_fn) return {im.grad_fn, im.output_nr};
  auto acc = im.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl_ptr());
    im.grad_accumulator = acc;
  }
  return {acc, 0};
}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  t_ = t.detach();
  t_.storage().add_saved_ref();
}

SavedTensor& SavedTensor::operator=(SavedTensor&& o) noexcept {
  if (this != &o) {
    reset();
    t_ = std::move(o.t_);
    o.t_ = Tensor();
  }
  return *this;
}

void SavedTensor::reset() {
  if (t_.defined()) {
    t_.storage().drop_saved_ref();
    t_ = Tensor();
  }
}

}  // namespace reckon
