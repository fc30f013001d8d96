// The `mha` block and `dot_product` head against an independent naive
// implementation, finite differences, batch = per-sample, and structural edits
// with the optimizer keeping exact state.
#include <cmath>
#include <map>

#include "growformer/model.hpp"
#include "growformer/multihead.hpp"
#include "growformer/ops.hpp"
#include "growformer/parallel.hpp"
#include "growformer/projections.hpp"
#include "testing.hpp"

using namespace gf;

namespace {

std::shared_ptr<AttentionBlock> make_block(const std::string& yaml, size_t d, uint64_t seed = 3) {
  static std::vector<std::unique_ptr<Rng>> keep;
  keep.push_back(std::make_unique<Rng>(seed, "test"));
  AttentionBuild b{d, 0, &gf_test::registry(), keep.back().get()};
  return gf_test::registry().create_attention(ConfigNode::load_string(yaml), b);
}

Var param(const AttentionBlock& blk, const std::string& name) {
  for (auto& [n, p] : blk.named_parameters())
    if (n == name) return p;
  FAIL("no parameter " << name);
  return Var();
}

// softmax(q k^T / sqrt(dk)) v per head, W_O per head, in double, with key masks.
std::vector<double> naive_mha(const AttentionBlock& blk, const Tensor& x,
                              const std::vector<uint8_t>& valid) {
  size_t B = x.dim(0), T = x.dim(1), d = x.dim(2);
  std::vector<double> out(B * T * d, 0.0);
  Var bo = param(blk, "b_o");
  for (size_t i = 0; i < out.size(); ++i) out[i] = bo.value()[i % d];
  for (auto& h : blk.heads()) {
    std::string p = "heads." + std::to_string(h.id) + ".";
    Tensor wq = param(blk, p + "w_q").value(), wk = param(blk, p + "w_k").value();
    Tensor wv = param(blk, p + "w_v").value(), wo = param(blk, p + "w_o").value();
    Tensor bq = param(blk, p + "b_q").value(), bk = param(blk, p + "b_k").value();
    Tensor bv = param(blk, p + "b_v").value();
    size_t dk = wq.dim(1), dv = wv.dim(1);
    auto proj = [&](const Tensor& w, const Tensor& bias, size_t b, size_t t, size_t j) {
      double s = bias[j];
      for (size_t c = 0; c < d; ++c) s += x[(b * T + t) * d + c] * double(w[c * w.dim(1) + j]);
      return s;
    };
    for (size_t b = 0; b < B; ++b)
      for (size_t i = 0; i < T; ++i) {
        std::vector<double> sc(T, -1e300);
        double mx = -1e300;
        for (size_t j = 0; j < T; ++j) {
          if (!valid[b * T + j]) continue;
          double s = 0;
          for (size_t c = 0; c < dk; ++c) s += proj(wq, bq, b, i, c) * proj(wk, bk, b, j, c);
          sc[j] = s / std::sqrt(double(dk));
          mx = std::max(mx, sc[j]);
        }
        double z = 0;
        for (size_t j = 0; j < T; ++j) z += valid[b * T + j] ? std::exp(sc[j] - mx) : 0;
        std::vector<double> a(dv, 0);
        for (size_t j = 0; j < T; ++j) {
          if (!valid[b * T + j]) continue;
          double pj = std::exp(sc[j] - mx) / z;
          for (size_t c = 0; c < dv; ++c) a[c] += pj * proj(wv, bv, b, j, c);
        }
        for (size_t o = 0; o < d; ++o)
          for (size_t c = 0; c < dv; ++c) out[(b * T + i) * d + o] += a[c] * wo[c * d + o];
      }
  }
  return out;
}

}  // namespace

TEST_CASE("mha equals an independent naive implementation (with padding)") {
  auto blk = make_block("plugin: mha\nheads: 3\nd_k: 4\nd_v: 5\n", 8);
  Tensor x = gf_test::randn({2, 6, 8}, 1);
  std::vector<uint8_t> valid{1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1};
  ForwardContext ctx;
  ctx.key_valid = &valid;
  Var y = blk->forward(constant(x), ctx);
  auto ref = naive_mha(*blk, x, valid);
  for (size_t i = 0; i < ref.size(); ++i)
    REQUIRE(y.value()[i] == doctest::Approx(ref[i]).epsilon(1e-4));
}

TEST_CASE("mha: gradients of the input and every parameter against finite differences") {
  auto blk = make_block("plugin: mha\nheads: 2\n", 6);
  Tensor x = gf_test::randn({2, 4, 6}, 2);
  std::vector<uint8_t> valid{1, 1, 1, 0, 1, 1, 1, 1};
  ForwardContext ctx;
  ctx.key_valid = &valid;
  // input gradient
  gf_test::check_gradients(
      [&](const std::vector<Var>& v) { return gf_test::weighted_sum(blk->forward(v[0], ctx)); },
      {x});
  // parameter gradients
  Var xin = constant(x);
  for (auto& [n, p] : blk->named_parameters()) const_cast<Var&>(p).zero_grad();
  backward(gf_test::weighted_sum(blk->forward(xin, ctx)));
  for (auto& [n, p] : blk->named_parameters()) {
    INFO(n);
    REQUIRE(p.grad().defined());
    Tensor g = p.grad().clone();
    Tensor& w = const_cast<Var&>(p).value();
    for (size_t j = 0; j < w.size(); j += std::max<size_t>(1, w.size() / 8)) {
      float keep = w[j];
      NoGradGuard ng;
      w[j] = keep + 1e-2f;
      double up = gf_test::weighted_sum(blk->forward(xin, ctx)).value()[0];
      w[j] = keep - 1e-2f;
      double dn = gf_test::weighted_sum(blk->forward(xin, ctx)).value()[0];
      w[j] = keep;
      double num = (up - dn) / 2e-2;
      CHECK(std::fabs(g[j] - num) / std::max(1.0, std::fabs(num)) < 2e-2);
    }
  }
}

TEST_CASE("mha: a padded batch equals its samples run one by one") {
  auto blk = make_block("plugin: mha\nheads: 2\n", 8);
  Tensor x = gf_test::randn({3, 5, 8}, 3);
  std::vector<uint8_t> valid{1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 0};
  ForwardContext ctx;
  ctx.key_valid = &valid;
  Var y = blk->forward(constant(x), ctx);
  size_t lens[3] = {5, 2, 4};
  for (size_t b = 0; b < 3; ++b) {
    Tensor xs({1, lens[b], 8});
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = x[b * 40 + i];
    Var ys = blk->forward(constant(xs), ForwardContext{});
    for (size_t i = 0; i < ys.size(); ++i)
      REQUIRE(ys.value()[i] == doctest::Approx(y.value()[b * 40 + i]).epsilon(1e-5));
  }
}

TEST_CASE(
    "adamw: a large parameter's update split over threads has the bits of one thread "
    "and of the hand formula") {
  // 100,000 elements: over the 65,536 from which elementwise work is split over the pool
  const size_t n = 100000;
  Tensor w0 = gf_test::randn({n}, 21), g0 = gf_test::randn({n}, 22);
  auto run = [&](size_t threads) {
    set_num_threads(threads);
    auto opt = gf_test::registry().create_optimizer(
        ConfigNode::load_string("plugin: adamw\nweight_decay: 0.1\ndecay: all\n"));
    NamedParams params{{"w", parameter(w0.clone())}};
    for (int k = 0; k < 2; ++k) {
      params[0].second.zero_grad();
      Tensor& g = params[0].second.grad_buf();
      for (size_t i = 0; i < n; ++i) g[i] = g0[i] * float(k + 1);
      opt->step(params, 1e-2f);
    }
    return params[0].second.value().clone();
  };
  const Tensor one = run(1), two = run(2);
  set_num_threads(0);
  for (size_t i = 0; i < n; ++i) REQUIRE(one[i] == two[i]);
  // the hand formula (defaults beta 0.9 / 0.999, eps 1e-8), in double, two steps
  for (size_t i : {size_t{0}, size_t{777}, n - 1}) {
    double w = w0[i], m = 0, v = 0;
    for (int t = 1; t <= 2; ++t) {
      const double g = double(g0[i]) * t;
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double mh = m / (1 - std::pow(0.9, t)), vh = v / (1 - std::pow(0.999, t));
      w = w * (1 - 1e-2 * 0.1) - 1e-2 * mh / (std::sqrt(vh) + 1e-8);
    }
    CHECK(one[i] == doctest::Approx(w).epsilon(1e-5));
  }
}

TEST_CASE("structural edits: stable names, optimizer state follows by name") {
  auto blk = make_block("plugin: mha\nheads: 2\nd_k: 4\n", 8);
  auto opt = gf_test::registry().create_optimizer(ConfigNode::load_string("plugin: adamw\n"));
  Tensor x = gf_test::randn({2, 5, 8}, 4);
  auto train_step = [&] {
    auto params = blk->named_parameters();
    for (auto& [n, p] : params) p.zero_grad();
    backward(gf_test::weighted_sum(blk->forward(constant(x), ForwardContext{})));
    opt->step(params, 1e-2f);
  };
  train_step();
  train_step();
  auto before = opt->state_tensors();
  auto before_t = opt->state_scalars();
  CHECK(before.count("m.heads.1.w_q"));

  Rng rng(9, "grow");
  HeadInit init;
  int id = blk->add_head(init, rng, 2);
  CHECK(id == 2);
  blk->remove_head(0);
  std::vector<std::string> removed;
  for (auto& [k, t] : before)
    if (k.rfind("m.heads.0.", 0) == 0) removed.push_back(k.substr(2));
  opt->forget(removed);
  auto names = blk->named_parameters();
  bool has_h0 = false, has_h2 = false;
  for (auto& [n, p] : names) {
    has_h0 = has_h0 || n.rfind("heads.0.", 0) == 0;
    has_h2 = has_h2 || n == "heads.2.w_q";
  }
  CHECK(!has_h0);
  CHECK(has_h2);
  // surviving moments are bit-identical; removed ones are gone; new ones do not exist yet
  auto mid = opt->state_tensors();
  for (auto& [k, t] : mid) {
    REQUIRE(before.count(k));
    for (size_t i = 0; i < t.size(); ++i) REQUIRE(t[i] == before.at(k)[i]);
  }
  CHECK(!mid.count("m.heads.0.w_q"));
  CHECK(!mid.count("m.heads.2.w_q"));
  CHECK(opt->state_scalars().at("t.heads.1.w_q") == before_t.at("t.heads.1.w_q"));

  // after the edit every parameter gets a gradient and changes on the next step
  std::map<std::string, Tensor> old;
  for (auto& [n, p] : blk->named_parameters()) old[n] = p.value().clone();
  train_step();
  for (auto& [n, p] : blk->named_parameters()) {
    INFO(n);
    REQUIRE(p.grad().defined());
    bool changed = false;
    for (size_t i = 0; i < p.value().size(); ++i) changed = changed || p.value()[i] != old[n][i];
    CHECK(changed);
  }
  CHECK(opt->state_scalars().at("t.heads.2.w_q") == 1);
  CHECK(opt->state_scalars().at("t.heads.1.w_q") == 3);
  // the last head cannot be removed; unknown ids are errors
  CHECK_THROWS_AS(blk->remove_head(42), RuntimeError);
}

TEST_CASE("preserve_function: the block output is unchanged by a growth") {
  auto blk = make_block("plugin: mha\nheads: 1\nd_k: 4\n", 8);
  Tensor x = gf_test::randn({2, 5, 8}, 5);
  Var y0 = blk->forward(constant(x), ForwardContext{});
  Rng rng(1, "g");
  HeadInit init;
  init.preserve_function = true;
  init.mode = "directed";
  init.direction = std::vector<float>(8, 0.0f);
  init.direction[3] = 1.0f;
  blk->add_head(init, rng, 0);
  Var y1 = blk->forward(constant(x), ForwardContext{});
  for (size_t i = 0; i < y0.size(); ++i) REQUIRE(y0.value()[i] == y1.value()[i]);
  clear_tape();
}

TEST_CASE(
    "a block grown from one head to four takes a fixed four-head block's fused paths: the same "
    "ops on the tape and the same bits, forward and backward") {
  // what a growth policy makes of a one-head block (heads of d_k 16 added one by one) against
  // the block a fixed 4-head config builds, given the same weights: a grown head that fell off
  // the fused projections or the one-product output map would change the tape and the bits
  for (const char* kind : {"mha", "hkt"}) {
    INFO(kind);
    const std::string opts = std::string("plugin: ") + kind + "\nd_k: 16\nheads: ";
    auto fixed = make_block(opts + "4\n", 64, 5);
    auto grown = make_block(opts + "1\n", 64, 6);
    Rng rng(2, "g");
    for (int i = 0; i < 3; ++i) {
      HeadInit init;
      init.preserve_function = true;
      grown->add_head(init, rng, size_t(10 * (i + 1)));
    }
    REQUIRE(grown->heads().size() == 4);
    std::map<std::string, Var> src;
    for (auto& [n, p] : fixed->named_parameters()) src[n] = p;
    size_t copied = 0;
    for (auto& [n, p] : grown->named_parameters()) {
      REQUIRE(src.count(n));  // the same names: heads.0 .. heads.3
      REQUIRE(src[n].value().shape() == p.value().shape());
      Tensor& dst = const_cast<Var&>(p).value();
      std::copy(src[n].value().data(), src[n].value().data() + dst.size(), dst.data());
      ++copied;
    }
    REQUIRE(copied == src.size());
    Tensor x = gf_test::randn({2, 48, 64}, 9);
    auto run = [&](AttentionBlock& blk, size_t& tape) {
      Var xin = parameter(x.clone());
      for (auto& [n, p] : blk.named_parameters()) const_cast<Var&>(p).zero_grad();
      Var y = blk.forward(xin, ForwardContext{});
      tape = tape_size();
      backward(gf_test::weighted_sum(y));
      std::vector<float> all = y.value().to_vector();
      for (float g : xin.grad().to_vector()) all.push_back(g);
      for (auto& [n, p] : blk.named_parameters())
        for (float g : p.grad().to_vector()) all.push_back(g);
      return all;
    };
    size_t tape_fixed = 0, tape_grown = 0;
    const std::vector<float> a = run(*fixed, tape_fixed), b = run(*grown, tape_grown);
    CHECK(tape_grown == tape_fixed);
    REQUIRE(a.size() == b.size());
    CHECK(a == b);
    clear_tape();
  }
}

TEST_CASE("projections of all heads in one product equal each head's own") {
  // d_k 3, d_v 5: columns of different heads share vectors and scalar tails
  auto blk = make_block("plugin: mha\nheads: 3\nd_k: 3\nd_v: 5\n", 8);
  Tensor x = gf_test::randn({3, 50, 8}, 6);  // 150 rows: split over 2 threads
  struct Run {
    std::vector<float> y, gx;
    std::map<std::string, std::vector<float>> grads;
  };
  auto run = [&](bool fused) {
    set_fused_projections(fused);
    Run r;
    Var xin = parameter(x.clone());
    for (auto& [n, p] : blk->named_parameters()) const_cast<Var&>(p).zero_grad();
    Var y = blk->forward(xin, ForwardContext{});
    backward(gf_test::weighted_sum(y));
    r.y = y.value().to_vector();
    r.gx = xin.grad().to_vector();
    for (auto& [n, p] : blk->named_parameters()) r.grads[n] = p.grad().to_vector();
    set_fused_projections(true);
    return r;
  };
  const size_t threads = num_threads();
  set_num_threads(1);
  Run one = run(true);
  set_num_threads(2);
  Run a = run(true), b = run(false);
  set_num_threads(threads);
  // the thread count changes no bit
  REQUIRE(one.y == a.y);
  REQUIRE(one.gx == a.gx);
  REQUIRE(one.grads == a.grads);
  REQUIRE(a.y == b.y);
  for (auto& [n, g] : a.grads) {
    INFO(n);
    REQUIRE(g == b.grads[n]);
  }
  REQUIRE(a.gx.size() == b.gx.size());
  for (size_t i = 0; i < a.gx.size(); ++i)
    REQUIRE(a.gx[i] == doctest::Approx(b.gx[i]).epsilon(1e-5));
  clear_tape();
}

TEST_CASE("the heads' output maps as one product equal the per-head path") {
  // with head masks on, the block maps each head on its own and sums (ops::linear, sum_all,
  // add); without, one ops::linear_sum: the same values up to rounding, and the same gradients
  auto blk = make_block("plugin: mha\nheads: 3\nd_k: 4\n", 8);
  Tensor x = gf_test::randn({2, 40, 8}, 8);
  auto run = [&](bool masks) {
    blk->set_head_masks(masks);
    Var xin = parameter(x.clone());
    for (auto& [n, p] : blk->named_parameters()) const_cast<Var&>(p).zero_grad();
    Var y = blk->forward(xin, ForwardContext{});
    backward(gf_test::weighted_sum(y));
    std::vector<float> all = y.value().to_vector();
    for (float g : xin.grad().to_vector()) all.push_back(g);
    for (auto& [n, p] : blk->named_parameters())
      for (float g : p.grad().to_vector()) all.push_back(g);
    return all;
  };
  const std::vector<float> per_head = run(true), fused = run(false);
  blk->set_head_masks(false);
  REQUIRE(per_head.size() == fused.size());
  for (size_t i = 0; i < fused.size(); ++i)
    REQUIRE(fused[i] == doctest::Approx(per_head[i]).epsilon(1e-4).scale(1e-2));
  clear_tape();
}

TEST_CASE("a muted head: the block output equals the output with that head's W_O at zero") {
  for (const char* combine : {"sum", "mean"}) {
    INFO(combine);
    auto blk =
        make_block(std::string("plugin: mha\nheads: 3\nd_k: 4\ncombine: ") + combine + "\n", 8);
    Tensor x = gf_test::randn({2, 6, 8}, 9);
    const std::vector<HeadInfo> heads = blk->heads();
    REQUIRE(heads.size() == 3);
    auto out = [&] { return blk->forward(constant(x), ForwardContext{}).value().to_vector(); };
    const std::vector<float> full = out();
    blk->set_muted({heads[1].id, 999});  // ids that are not heads are ignored
    const std::vector<float> muted = out();
    blk->set_muted({});
    CHECK(out() == full);
    // the independent way: the head's output map at zero
    Tensor& w = const_cast<Var*>(heads[1].w_o)->value();
    const Tensor saved = w.clone();
    w.zero();
    const std::vector<float> zeroed = out();
    w = saved;
    REQUIRE(muted.size() == zeroed.size());
    bool differs = false;
    for (size_t i = 0; i < muted.size(); ++i) {
      REQUIRE(muted[i] == doctest::Approx(zeroed[i]).epsilon(1e-5).scale(1e-3));
      differs = differs || std::fabs(muted[i] - full[i]) > 1e-4f;
    }
    CHECK(differs);  // the head mattered
    // every head muted: the output bias alone
    std::vector<float> bias;
    for (auto& [n, p] : blk->named_parameters())
      if (n == "b_o") {
        Tensor& b = const_cast<Var&>(p).value();
        for (size_t i = 0; i < b.size(); ++i) b[i] = 0.1f * float(i) - 0.3f;
        bias = b.to_vector();
      }
    REQUIRE(bias.size() == 8);
    blk->set_muted({heads[0].id, heads[1].id, heads[2].id});
    const std::vector<float> none = out();
    blk->set_muted({});
    for (size_t i = 0; i < none.size(); ++i) REQUIRE(none[i] == bias[i % 8]);
  }
  clear_tape();
}

TEST_CASE(
    "a head muted on some examples: those rows equal the muted block's, the others the full "
    "block's, and the head's parameters get gradients from the other rows only") {
  auto blk = make_block("plugin: mha\nheads: 2\nd_k: 4\n", 8);
  Tensor x = gf_test::randn({3, 5, 8}, 4);
  const std::vector<HeadInfo> heads = blk->heads();
  REQUIRE(heads.size() == 2);
  const size_t row = 5 * 8;
  auto out = [&] { return blk->forward(constant(x), ForwardContext{}).value().to_vector(); };
  const std::vector<float> full = out();
  blk->set_muted({heads[1].id});
  const std::vector<float> muted = out();
  blk->set_muted({});
  blk->set_muted_examples({heads[1].id}, {1, 0, 1});
  const std::vector<float> part = out();
  for (size_t b = 0; b < 3; ++b)
    for (size_t i = 0; i < row; ++i) {
      const float want = b == 1 ? full[b * row + i] : muted[b * row + i];
      REQUIRE(part[b * row + i] == doctest::Approx(want).epsilon(1e-5).scale(1e-3));
    }
  // a marking of another batch size is refused, naming the sizes
  blk->set_muted_examples({heads[1].id}, {1, 0});
  CHECK(gf_test::runtime_error_of([&] { out(); }).find("marks 2 examples of a batch of 3") !=
        std::string::npos);
  // gradients: a loss on the muted rows alone leaves the head's W_O without gradient; on the
  // unmuted row the gradient equals the full block's on that example alone
  auto grad_wo = [&](const std::vector<uint8_t>& mark, const std::vector<float>& weight) {
    blk->set_muted_examples(mark.empty() ? std::vector<int>{} : std::vector<int>{heads[1].id},
                            mark);
    for (auto& [n, p] : blk->named_parameters()) const_cast<Var&>(p).zero_grad();
    Var y = blk->forward(constant(x), ForwardContext{});
    Tensor w(y.value().shape(), 0.0f);
    for (size_t b = 0; b < 3; ++b)
      for (size_t i = 0; i < row; ++i) w[b * row + i] = weight[b] * float(i % 7) * 0.1f;
    backward(ops::sum(ops::mul(y, constant(w))));
    std::vector<float> g = const_cast<Var*>(heads[1].w_o)->grad().to_vector();
    clear_tape();
    return g;
  };
  for (float v : grad_wo({1, 0, 1}, {1, 0, 1})) CHECK(v == 0.0f);
  const std::vector<float> part_grad = grad_wo({1, 0, 1}, {1, 1, 1});
  const std::vector<float> one_row = grad_wo({}, {0, 1, 0});
  REQUIRE(part_grad.size() == one_row.size());
  bool nonzero = false;
  for (size_t i = 0; i < part_grad.size(); ++i) {
    REQUIRE(part_grad[i] == doctest::Approx(one_row[i]).epsilon(1e-5).scale(1e-4));
    nonzero = nonzero || part_grad[i] != 0.0f;
  }
  CHECK(nonzero);
  blk->set_muted_examples({}, {});
  CHECK(out() == full);
  clear_tape();
}

TEST_CASE("structure round trip recreates the same heads") {
  auto blk = make_block("plugin: mha\nheads: 2\n", 8);
  Rng rng(1, "g");
  blk->add_head(HeadInit{}, rng, 7);
  blk->remove_head(0);
  // through the text a checkpoint keeps
  const std::string text = blk->structure()->text();
  auto fresh = make_block("plugin: mha\nheads: 2\n", 8);
  fresh->restore_structure(BlockStructure::parse(text, "mha", fresh->max_heads()));
  auto a = blk->named_parameters(), b = fresh->named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i].first == b[i].first);
  CHECK(fresh->heads()[1].born_step == 7);
  CHECK(fresh->structure()->text() == text);
  // the next head gets the same id and the same initial values in both (the init stream)
  Rng r1(2, "g"), r2(2, "g");
  const int id = blk->add_head(HeadInit{}, r1, 9);
  CHECK(id == 3);
  CHECK(fresh->add_head(HeadInit{}, r2, 9) == id);
  const std::string prefix = "heads." + std::to_string(id) + ".";
  size_t compared = 0;
  for (auto& [n, v] : blk->named_parameters()) {
    if (n.rfind(prefix, 0) != 0) continue;
    Var w = param(*fresh, n);
    for (size_t i = 0; i < v.size(); ++i) REQUIRE(v.value()[i] == w.value()[i]);
    ++compared;
  }
  CHECK(compared == 7);  // W_O, and W_Q, W_K, W_V with their biases
  BlockStructure none;
  CHECK_THROWS_AS(fresh->restore_structure(none), RuntimeError);  // a block has a head
}

TEST_CASE(
    "a block structure's text is the checkpoint format, read back exactly; a damaged one is "
    "refused naming what is wrong") {
  auto has = [](const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
  };
  // as checkpoints have held it since the format began: heads 1 (born at 0) and 4 (at 70, with
  // a state "hi" as hex); byte for byte, so old checkpoints load and new ones are identical
  const std::string text = "next_id 5 rng 123 457 heads 2 1 0 4 70 states 1 4 6869";
  BlockStructure s = BlockStructure::parse(text, "b", 256);
  CHECK(s.next_id == 5);
  CHECK(s.rng_state == 123);
  CHECK(s.rng_increment == 457);
  CHECK(s.ids() == std::vector<int>{1, 4});
  CHECK(s.heads[1].born == 70);
  CHECK(s.heads[0].state.empty());
  CHECK(s.heads[1].state == "hi");
  CHECK(s.text() == text);
  CHECK(BlockStructure::parse("next_id 2 rng 1 1 heads 2 0 0 1 0", "b", 256).text() ==
        "next_id 2 rng 1 1 heads 2 0 0 1 0");
  auto error = [](const std::string& t, size_t max_heads = 256) -> std::string {
    try {
      BlockStructure::parse(t, "ck: block layers.0.attn", max_heads);
    } catch (const RuntimeError& e) {
      return e.what();
    }
    return "(accepted)";
  };
  CHECK(error("garbage") == "ck: block layers.0.attn: malformed block structure `garbage`");
  CHECK(has(error("next_id 2 rng 1 1 heads 0"), "malformed block structure"));
  CHECK(has(error("next_id 2 rng 1 1 heads 2 0 0"), "malformed block structure"));
  CHECK(
      has(error("next_id 2 rng 1 1 heads 2 0 0 1 0", 1), "names 2 heads, more than max_heads = 1"));
  CHECK(has(error("next_id 2 rng 1 1 heads 100000000000 0 0"), "more than max_heads = 256"));
  CHECK(has(error("next_id 2 rng 1 1 heads 1000 0 0", 4096), "more than its text holds"));
  CHECK(has(error("next_id 2 rng 1 1 heads 2 0 0 0 0"), "names head 0 twice"));
  CHECK(has(error("next_id 1 rng 1 1 heads 2 0 0 1 0"), "names head 1, not below its next id 1"));
  CHECK(has(error("next_id 2 rng 1 1 heads 1 0 0 states 1 7 00"),
            "a state for head 7, which is not one of its heads"));
  CHECK(has(error("next_id 2 rng 1 1 heads 1 0 0 states 1 0 0g"), "malformed head state"));
  CHECK(has(error("next_id 2 rng 1 1 heads 1 0 0 states 2 0 00 0 00"), "malformed head states"));
  CHECK(has(error("next_id 2 rng 1 1 heads 1 0 0 extra"), "malformed head states"));
}

TEST_CASE("unknown options of the block and of its head are config errors") {
  CHECK_THROWS_WITH_AS(make_block("plugin: mha\nhaeds: 2\n", 8),
                       doctest::Contains("did you mean `heads`?"), ConfigError);
  CHECK_THROWS_WITH_AS(make_block("plugin: mha\nheads: 3\n", 8), doctest::Contains("not divisible"),
                       ConfigError);
  CHECK_THROWS_AS(make_block("plugin: mha\nhead: {plugin: dot_product, x: 1}\n", 8), ConfigError);
}

TEST_CASE("pool: cls with causal attention is refused (the CLS slot would see only itself)") {
  const std::string base = "d_model: 8\nlayers: 1\nmax_len: 16\n";
  auto model = [&](const std::string& pool, const std::string& attention) {
    return gf::Model(gf::ConfigNode::load_string(
                         base + "pool: " + pool + "\nattention: " + attention, "model.yaml"),
                     10, 3, gf_test::registry(), 1);
  };
  const std::string causal = "{plugin: mha, heads: 2, causal: true, head: {plugin: dot_product}}";
  auto refused = [&](const std::string& attention) {
    try {
      model("cls", attention);
      FAIL("no error");
    } catch (const gf::ConfigError& e) {
      CHECK(std::string(e.what()).find("model.yaml:4:7: `pool`") != std::string::npos);
      CHECK(std::string(e.what()).find("causal") != std::string::npos);
    }
  };
  refused(causal);
  if (gf_test::registry().find(gf::Kind::Attention, "hkt")) {
    refused("{plugin: hkt, heads: 2, causal: true, head: {plugin: dot_product}}");
    CHECK_NOTHROW(
        model("mean", "{plugin: hkt, heads: 2, causal: true, head: {plugin: dot_product}}"));
  }
  CHECK_NOTHROW(model("mean", causal));
  CHECK_NOTHROW(model("cls", "{plugin: mha, heads: 2, head: {plugin: dot_product}}"));
}
