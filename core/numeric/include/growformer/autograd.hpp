// Reverse-mode autograd: a value, its gradient, and a tape of backward closures.
//
// Every op appends one closure to the current tape when any input requires a
// gradient. `backward(loss)` seeds d loss = 1 and runs the tape in reverse.
// Plugins write fused ops of their own with `make_result` + `record`.
#pragma once
#include "growformer/export.hpp"

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "growformer/tensor.hpp"

GROWFORMER_API_BEGIN

namespace gf {

struct Node {
  Tensor value;
  Tensor grad;  // allocated (zeroed) on first accumulation
  bool requires_grad = false;

  /// The gradient buffer, zero-filled on first use.
  Tensor& grad_buf();
  /// The gradient buffer for an op that will write every element: a fresh one is allocated
  /// without zeroing and `fresh` set, so the op stores instead of accumulating; otherwise the
  /// existing gradient, to accumulate into.
  Tensor& grad_buf_for_write(bool& fresh);
  /// grad += g. A first gradient is written as 0 + g (one pass instead of a zero fill and an
  /// add; the same bits, -0 included).
  void add_grad(const Tensor& g);
  bool has_grad() const { return grad.defined(); }
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const { return static_cast<bool>(node_); }
  const Tensor& value() const { return node_->value; }
  Tensor& value() { return node_->value; }
  const Shape& shape() const { return node_->value.shape(); }
  size_t dim(size_t i) const { return node_->value.dim(i); }
  size_t size() const { return node_->value.size(); }
  bool requires_grad() const { return node_ && node_->requires_grad; }
  /// The gradient; undefined tensor when nothing flowed back.
  const Tensor& grad() const { return node_->grad; }
  Tensor& grad_buf() { return node_->grad_buf(); }
  Tensor& grad_buf_for_write(bool& fresh) { return node_->grad_buf_for_write(fresh); }
  void add_grad(const Tensor& g) { node_->add_grad(g); }
  void zero_grad() { node_->grad = Tensor(); }
  const std::shared_ptr<Node>& node() const { return node_; }
  /// Identity of the underlying node (parameters compare by node).
  bool same(const Var& o) const { return node_ == o.node_; }

 private:
  std::shared_ptr<Node> node_;
};

/// A parameter: a leaf that requires a gradient.
Var parameter(Tensor init);
/// A constant: a leaf without a gradient.
Var constant(Tensor value);

/// Disables taping inside its scope (evaluation, probes).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();

 private:
  bool prev_;
};
bool grad_enabled();

/// Output of an op: requires a gradient iff any input does and taping is on.
Var make_result(Tensor value, std::initializer_list<const Var*> inputs);
/// Appends a backward closure to the tape (call only when out.requires_grad()).
void record(std::function<void()> backward);

/// Runs the tape in reverse from a scalar `loss`, then clears the tape.
void backward(const Var& loss);
/// Drops the tape without running it (e.g. after an evaluation forward).
void clear_tape();
size_t tape_size();

}  // namespace gf

GROWFORMER_API_END
