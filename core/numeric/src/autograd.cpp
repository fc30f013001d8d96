#include "growformer/autograd.hpp"

#include <stdexcept>

#include "growformer/parallel.hpp"

namespace gf {

namespace {
thread_local bool g_grad_enabled = true;
thread_local std::vector<std::function<void()>> g_tape;
}  // namespace

Tensor& Node::grad_buf() {
  if (!grad.defined()) grad = Tensor(value.shape(), 0.0f);
  return grad;
}

Tensor& Node::grad_buf_for_write(bool& fresh) {
  fresh = !grad.defined();
  if (fresh) grad = Tensor::empty(value.shape());
  return grad;
}

void Node::add_grad(const Tensor& g) {
  if (g.size() != value.size())
    throw std::invalid_argument("add_grad: gradient " + shape_str(g.shape()) + " for a value " +
                                shape_str(value.shape()));
  if (grad.defined()) {
    grad.add_(g);
    return;
  }
  grad = Tensor::empty(value.shape());
  float* d = grad.data();
  const float* s = g.data();
  parallel_elementwise(g.size(), [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) d[i] = 0.0f + s[i];
  });
}

Var::Var(Tensor value, bool requires_grad) : node_(std::make_shared<Node>()) {
  node_->value = std::move(value);
  node_->requires_grad = requires_grad;
}

Var parameter(Tensor init) { return Var(std::move(init), true); }
Var constant(Tensor value) { return Var(std::move(value), false); }

NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }
bool grad_enabled() { return g_grad_enabled; }

Var make_result(Tensor value, std::initializer_list<const Var*> inputs) {
  bool req = false;
  if (g_grad_enabled)
    for (const Var* v : inputs)
      if (v && v->requires_grad()) req = true;
  return Var(std::move(value), req);
}

void record(std::function<void()> backward) { g_tape.push_back(std::move(backward)); }

void backward(const Var& loss) {
  if (!loss.defined() || loss.size() != 1)
    throw std::invalid_argument("backward: the loss must be a scalar");
  if (!loss.requires_grad()) {
    g_tape.clear();
    return;
  }
  Tensor& g = loss.node()->grad_buf();
  g[0] += 1.0f;
  // Closures capture the nodes they need; run newest first.
  auto tape = std::move(g_tape);
  g_tape.clear();
  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    (*it)();
    *it = nullptr;  // release intermediate buffers as soon as possible
  }
}

void clear_tape() { g_tape.clear(); }
size_t tape_size() { return g_tape.size(); }

}  // namespace gf
