// The op harness: every case of every op in op_list.h goes through the same checks.
//  1. every op has a case;
//  2. the dispatched kernel (fast cpu kernel where one exists) matches the reference kernel in
//     f32, with outputs pre-filled with NaN so an unwritten element is caught;
//  3. the reference kernel counted exactly the MACs the op declares;
//  4. gradients match central differences in double precision;
//  5. bad arguments raise reckon::Error naming the op.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "op_harness.h"
#include "reckon/ops/functional.h"

using namespace reckon;
using namespace reckon::harness;

namespace {

std::string case_name(const Case& c) { return c.op + " (" + c.label + ")"; }

// Runs one case's check; an exception fails that case (named) and the loop goes on.
template <class F>
void each_case(F&& f) {
  for (auto& c : cases()) {
    SCOPED_TRACE(case_name(c));
    try {
      f(c);
    } catch (const std::exception& e) {
      ADD_FAILURE() << case_name(c) << " threw: " << e.what();
    }
  }
}

// Max |a - b| / (atol + rtol |b|) over elements; < 1 passes.
double tol_ratio(const Tensor& a, const Tensor& b, double atol, double rtol) {
  auto x = a.to_vector(), y = b.to_vector();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(y[i]) && std::isnan(x[i])) continue;
    double r = std::abs(x[i] - y[i]) / (atol + rtol * std::abs(y[i]));
    if (std::isnan(r)) return INFINITY;
    worst = std::max(worst, r);
  }
  return worst;
}

std::vector<Tensor> clone_all(const std::vector<Tensor>& in) {
  std::vector<Tensor> r;
  for (auto& t : in) {
    if (!t.defined()) {
      r.push_back(Tensor());
      continue;
    }
    Tensor c = Tensor::empty(t.shape(), t.dtype());
    copy_(c, t);
    r.push_back(c);
  }
  return r;
}

}  // namespace

TEST(OpHarness, EveryOpHasACase) {
  std::set<std::string> have;
  for (auto& c : cases()) have.insert(c.op);
  for (auto& info : op_registry())
    EXPECT_TRUE(have.count(std::string(info.name))) << "op " << info.name << " has no harness case";
  std::set<std::string> names;
  for (auto& info : op_registry()) {
    EXPECT_TRUE(names.insert(std::string(info.name)).second) << "op name " << info.name << " is listed twice";
    EXPECT_TRUE((info.to_onnx != nullptr) != !info.not_exportable.empty()) << info.name;
  }
}

TEST(OpHarness, FastKernelMatchesReference) {
  each_case([&](const Case& c) {
    Generator g(42);
    auto in = c.inputs(DType::f32, g);
    std::vector<Tensor> fast, ref;
    {
      FillOutputsWithNaN nan;
      fast = c.run(clone_all(in));
    }
    {
      FillOutputsWithNaN nan;
      ForceReference f;
      ref = c.run(clone_all(in));
    }
    ASSERT_EQ(fast.size(), ref.size());
    for (size_t i = 0; i < fast.size(); ++i) {
      ASSERT_EQ(fast[i].shape(), ref[i].shape()) << "output " << i;
      if (!c.writes_outputs) continue;
      auto v = ref[i].to_vector();
      for (double e : v) ASSERT_FALSE(std::isnan(e)) << "reference left output " << i << " unwritten";
      EXPECT_LT(tol_ratio(fast[i], ref[i], 1e-5, 1e-4), 1.0) << "output " << i;
    }
  });
}

TEST(OpHarness, ReferenceCountsDeclaredMacs) {
  each_case([&](const Case& c) {
    Generator g(7);
    auto in = c.inputs(DType::f64, g);
    std::vector<OpRecord> recs;
    {
      ObserveOps obs([&](const OpRecord& r) { recs.push_back(r); });
      ForceReference f;
      NoGrad ng;
      c.run(in);
    }
    ASSERT_FALSE(recs.empty());
    const OpRecord& r = recs.back();  // the op itself (earlier records: input preparation)
    EXPECT_EQ(r.op, c.op);
    if (r.kernel == "ref") EXPECT_EQ(r.macs_counted, r.cost.macs);
    EXPECT_GE(r.cost.bytes_written, 0);
  });
}

TEST(OpHarness, GradientsMatchCentralDifferences) {
  each_case([&](const Case& c) {
    if (!c.differentiable) return;
    Generator g(11);
    auto in = c.inputs(DType::f64, g);
    std::set<int> skip(c.no_grad_inputs.begin(), c.no_grad_inputs.end());
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].defined() && is_floating(in[i].dtype()) && !skip.count(int(i)) && in[i].is_leaf())
        in[i].set_requires_grad(true);
      else if (in[i].defined() && is_floating(in[i].dtype()) && !skip.count(int(i)))
        in[i] = in[i].detach().set_requires_grad(true);
    // Fixed random weights R per floating output: L = sum_k sum(out_k * R_k).
    // Outputs that carry no gradient (batch norm's running statistics, written in place) are
    // left out of L.
    auto out = c.run(in);
    std::vector<Tensor> weights;
    Tensor loss;
    for (auto& o : out) {
      if (!is_floating(o.dtype()) || !o.requires_grad()) {
        weights.push_back(Tensor());
        continue;
      }
      Tensor w = rnd(o.shape(), o.dtype(), g);
      weights.push_back(w);
      Tensor term = sum(mul(o, w));
      loss = loss.defined() ? add(loss, term) : term;
    }
    ASSERT_TRUE(loss.defined()) << "no differentiable output";
    loss.backward();
    auto eval = [&](const std::vector<Tensor>& xs) {
      NoGrad ng;
      auto o = c.run(xs);
      double s = 0;
      for (size_t k = 0; k < o.size(); ++k) {
        if (!weights[k].defined()) continue;
        auto a = o[k].to_vector(), b = weights[k].to_vector();
        for (size_t j = 0; j < a.size(); ++j) s += a[j] * b[j];
      }
      return s;
    };
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined() || !in[i].requires_grad()) continue;
      Tensor gr = in[i].grad();
      ASSERT_TRUE(gr.defined()) << "input " << i << " got no gradient";
      int64_t n = in[i].numel();
      int64_t step = std::max<int64_t>(1, n / 24);  // check up to ~24 elements per input
      for (int64_t j = 0; j < n; j += step) {
        auto xs = clone_all(in);
        const double h = 1e-6;
        double x0 = xs[i].get(j);
        xs[i].set(j, x0 + h);
        double fp = eval(xs);
        xs[i].set(j, x0 - h);
        double fm = eval(xs);
        double num = (fp - fm) / (2 * h);
        double ana = gr.get(j);
        EXPECT_NEAR(ana, num, 1e-6 + 1e-5 * std::abs(num)) << "input " << i << " element " << j;
      }
    }
  });
}

TEST(OpHarness, BadArgumentsNameTheOp) {
  each_case([&](const Case& c) {
    for (auto& bad : c.bad) {
      try {
        bad();
        ADD_FAILURE() << "bad arguments were accepted";
      } catch (const Error& e) {
        std::string m = e.what();
        EXPECT_NE(m.find("[" + c.op), std::string::npos) << m;
      }
    }
  });
}

TEST(OpHarness, MetaDeviceRunsNoKernelButSameShapesAndCosts) {
  each_case([&](const Case& c) {
    Generator g(3);
    auto in = c.inputs(DType::f32, g);
    if (in.empty()) return;  // creation ops: their device is an attribute (tests/test_ops_extra.cpp)
    std::vector<Tensor> meta_in;
    for (auto& t : in) {
      if (!t.defined() || !t.is_contiguous()) {
        meta_in.push_back(t.defined() ? Tensor() : Tensor());
        continue;
      }
      meta_in.push_back(Tensor::empty(t.shape(), t.dtype(), Device::meta));
    }
    bool all_plain = true;
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].defined() && !meta_in[i].defined()) all_plain = false;
    if (!all_plain) return;  // inputs that are views of other tensors
    std::vector<OpRecord> cpu_recs, meta_recs;
    std::vector<Tensor> a, b;
    {
      ObserveOps obs([&](const OpRecord& r) { cpu_recs.push_back(r); });
      NoGrad ng;
      a = c.run(in);
    }
    {
      ObserveOps obs([&](const OpRecord& r) { meta_recs.push_back(r); });
      NoGrad ng;
      b = c.run(meta_in);
    }
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].shape(), b[i].shape());
      EXPECT_TRUE(b[i].is_meta());
    }
    ASSERT_FALSE(meta_recs.empty());
    EXPECT_EQ(meta_recs.back().cost.macs, cpu_recs.back().cost.macs);
    EXPECT_TRUE(meta_recs.back().kernel == "none" || meta_recs.back().kernel == "view");
  });
}
