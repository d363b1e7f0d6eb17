// Every op of functional.h against PyTorch, through the golden files in golden/ops/ (written by
// scripts/make_golden.py; this test needs no Python). Each file holds one call: the inputs,
// PyTorch's output, an upstream gradient and PyTorch's gradient of every input that requires
// one (plus, for batch norm, the running statistics after the call). The test runs the same call
// through reckon's public API, backpropagates the same upstream gradient, and compares
// everything: float64 cases to ~1e-10, float32 ones to ~1e-5.
// Dropout has no golden file: its mask cannot match PyTorch's generator (tested elsewhere).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reckon/io/safetensors.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/op.h"

using namespace reckon;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const fs::path kGoldenOps = fs::path(RECKON_SOURCE_DIR) / "golden" / "ops";

// The inputs of one call, by the names the golden file gives them.
struct Inputs {
  std::map<std::string, Tensor> by_name;
  std::vector<std::string> order;
  const Tensor& operator()(const std::string& name) const {
    auto it = by_name.find(name);
    RK_CHECK(it != by_name.end(), "[golden] the file has no input '{}'", name);
    return it->second;
  }
  Tensor opt(const std::string& name) const {  // undefined when absent (an optional bias)
    auto it = by_name.find(name);
    return it == by_name.end() ? Tensor() : it->second;
  }
};

using Runner = std::function<Tensor(const Inputs&, const json&)>;

Int2 int2(const json& j) { return {j.at(0).get<int64_t>(), j.at(1).get<int64_t>()}; }
Reduction reduction(const json& j) {
  std::string r = j.get<std::string>();
  if (r == "mean") return Reduction::mean;
  if (r == "sum") return Reduction::sum;
  RK_CHECK(r == "none", "[golden] unknown reduction '{}'", r);
  return Reduction::none;
}
Pool2dArgs pool_args(const json& a) {
  Pool2dArgs p;
  p.kernel = int2(a.at("kernel"));
  p.stride = int2(a.at("stride"));
  p.padding = int2(a.at("padding"));
  p.ceil_mode = a.at("ceil_mode").get<bool>();
  p.count_include_pad = a.at("count_include_pad").get<bool>();
  return p;
}

// op name (the file's "op" metadata) -> the same call through functional.h.
const std::map<std::string, Runner>& runners() {
  static const std::map<std::string, Runner> r = {
      {"conv2d",
       [](const Inputs& in, const json& a) {
         Conv2dArgs c;
         c.stride = int2(a.at("stride"));
         c.padding = int2(a.at("padding"));
         c.dilation = int2(a.at("dilation"));
         c.groups = a.at("groups").get<int64_t>();
         return conv2d(in("x"), in("w"), in.opt("b"), c);
       }},
      {"linear", [](const Inputs& in, const json&) { return linear(in("x"), in("w"), in.opt("b")); }},
      {"matmul",
       [](const Inputs& in, const json& a) {
         return matmul(in("a"), in("b"), a.at("trans_a").get<bool>(), a.at("trans_b").get<bool>());
       }},
      {"add", [](const Inputs& in, const json&) { return add(in("a"), in("b")); }},
      {"sub", [](const Inputs& in, const json&) { return sub(in("a"), in("b")); }},
      {"mul", [](const Inputs& in, const json&) { return mul(in("a"), in("b")); }},
      {"div", [](const Inputs& in, const json&) { return div(in("a"), in("b")); }},
      {"affine",
       [](const Inputs& in, const json& a) {
         return affine(in("x"), a.at("alpha").get<double>(), a.at("beta").get<double>());
       }},
      {"exp", [](const Inputs& in, const json&) { return exp(in("x")); }},
      {"log", [](const Inputs& in, const json&) { return log(in("x")); }},
      {"square", [](const Inputs& in, const json&) { return square(in("x")); }},
      {"relu", [](const Inputs& in, const json&) { return relu(in("x")); }},
      {"relu6", [](const Inputs& in, const json&) { return relu6(in("x")); }},
      {"leaky_relu",
       [](const Inputs& in, const json& a) { return leaky_relu(in("x"), a.at("negative_slope").get<double>()); }},
      {"gelu", [](const Inputs& in, const json&) { return gelu(in("x")); }},
      {"silu", [](const Inputs& in, const json&) { return silu(in("x")); }},
      {"sigmoid", [](const Inputs& in, const json&) { return sigmoid(in("x")); }},
      {"tanh", [](const Inputs& in, const json&) { return tanh(in("x")); }},
      {"sum",
       [](const Inputs& in, const json& a) {
         return sum(in("x"), a.at("dims").get<std::vector<int64_t>>(), a.at("keepdim").get<bool>());
       }},
      {"mean",
       [](const Inputs& in, const json& a) {
         return mean(in("x"), a.at("dims").get<std::vector<int64_t>>(), a.at("keepdim").get<bool>());
       }},
      {"concat",
       [](const Inputs& in, const json& a) {
         std::vector<Tensor> xs;
         for (const auto& n : in.order) xs.push_back(in(n));
         return concat(xs, a.at("dim").get<int64_t>());
       }},
      {"permute_contiguous",
       [](const Inputs& in, const json& a) {
         return contiguous(permute(in("x"), a.at("dims").get<std::vector<int64_t>>()));
       }},
      {"transpose_contiguous",
       [](const Inputs& in, const json& a) {
         return contiguous(transpose(in("x"), a.at("dim0").get<int64_t>(), a.at("dim1").get<int64_t>()));
       }},
      {"reshape", [](const Inputs& in, const json& a) { return reshape(in("x"), a.at("shape").get<Shape>()); }},
      {"flatten",
       [](const Inputs& in, const json& a) {
         return flatten(in("x"), a.at("start_dim").get<int64_t>(), a.at("end_dim").get<int64_t>());
       }},
      {"narrow",
       [](const Inputs& in, const json& a) {
         return narrow(in("x"), a.at("dim").get<int64_t>(), a.at("start").get<int64_t>(),
                       a.at("length").get<int64_t>());
       }},
      {"expand", [](const Inputs& in, const json& a) { return expand(in("x"), a.at("shape").get<Shape>()); }},
      {"max_pool2d", [](const Inputs& in, const json& a) { return max_pool2d(in("x"), pool_args(a)); }},
      {"avg_pool2d", [](const Inputs& in, const json& a) { return avg_pool2d(in("x"), pool_args(a)); }},
      {"adaptive_avg_pool2d",
       [](const Inputs& in, const json& a) { return adaptive_avg_pool2d(in("x"), int2(a.at("output_size"))); }},
      {"batch_norm2d",
       [](const Inputs& in, const json& a) {
         return batch_norm2d(in("x"), in("weight"), in("bias"), in("running_mean"), in("running_var"),
                             a.at("training").get<bool>(), a.at("momentum").get<double>(), a.at("eps").get<double>());
       }},
      {"local_response_norm",
       [](const Inputs& in, const json& a) {
         return local_response_norm(in("x"), a.at("size").get<int64_t>(), a.at("alpha").get<double>(),
                                    a.at("beta").get<double>(), a.at("k").get<double>());
       }},
      {"softmax", [](const Inputs& in, const json& a) { return softmax(in("x"), a.at("dim").get<int64_t>()); }},
      {"log_softmax",
       [](const Inputs& in, const json& a) { return log_softmax(in("x"), a.at("dim").get<int64_t>()); }},
      {"cross_entropy",
       [](const Inputs& in, const json& a) {
         CrossEntropyArgs c;
         c.reduction = reduction(a.at("reduction"));
         c.label_smoothing = a.at("label_smoothing").get<double>();
         c.ignore_index = a.at("ignore_index").get<int64_t>();
         return cross_entropy(in("logits"), in("target"), c);
       }},
      {"nll_loss",
       [](const Inputs& in, const json& a) {
         return nll_loss(in("logp"), in("target"), reduction(a.at("reduction")), a.at("ignore_index").get<int64_t>());
       }},
      {"mse_loss",
       [](const Inputs& in, const json& a) { return mse_loss(in("a"), in("b"), reduction(a.at("reduction"))); }},
  };
  return r;
}

std::vector<std::string> golden_files() {
  std::vector<std::string> files;
  if (fs::is_directory(kGoldenOps))
    for (const auto& e : fs::directory_iterator(kGoldenOps))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().stem().string());
  std::sort(files.begin(), files.end());
  return files;
}

// allclose with rtol and atol = rtol * max|expected|; reports the worst elements.
void expect_close(const std::string& what, const Tensor& got, const Tensor& want, double rtol) {
  ASSERT_TRUE(got.defined()) << what << ": reckon produced no tensor";
  ASSERT_EQ(got.shape(), want.shape()) << what << ": shape " << shape_str(got.shape()) << " but PyTorch has "
                                       << shape_str(want.shape());
  EXPECT_EQ(got.dtype(), want.dtype()) << what << ": dtype " << dtype_name(got.dtype()) << " but PyTorch has "
                                       << dtype_name(want.dtype());
  std::vector<double> g = got.to_vector(), w = want.to_vector();
  double max_abs = 0;
  for (double v : w) max_abs = std::max(max_abs, std::abs(v));
  const double atol = rtol * std::max(max_abs, 1e-30);
  int64_t bad = 0;
  double worst = 0;
  int64_t worst_i = -1;
  std::string first;
  for (size_t i = 0; i < w.size(); ++i) {
    double d = std::abs(g[i] - w[i]);
    bool ok = d <= atol + rtol * std::abs(w[i]);  // false for NaN
    if (!ok) {
      if (bad < 5) first += fmt::format("\n    [{}] reckon {:.17g} torch {:.17g}", i, g[i], w[i]);
      ++bad;
      if (!(d <= worst)) {
        worst = d;
        worst_i = int64_t(i);
      }
    }
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << w.size() << " elements differ beyond rtol " << rtol
                    << " (max |torch| " << max_abs << "; worst at [" << worst_i << "], |diff| " << worst
                    << ")" << first;
}

class GoldenOps : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenOps, MatchesPyTorch) {
  const std::string file = (kGoldenOps / (GetParam() + ".safetensors")).string();
  SCOPED_TRACE("golden file " + file);
  SafetensorsFile f = load_safetensors(file);
  ASSERT_EQ(f.metadata["format"], "reckon-golden-op");
  ASSERT_EQ(f.metadata["version"], "1");
  const std::string op = f.metadata["op"];
  auto rit = runners().find(op);
  ASSERT_NE(rit, runners().end()) << "no runner for op " << op << " in tests/test_golden.cpp";
  const json args = json::parse(f.metadata["args"]);
  const auto names = json::parse(f.metadata["inputs"]).get<std::vector<std::string>>();

  Inputs in;
  in.order = names;
  bool any_grad = false;
  for (const auto& n : names) {
    ASSERT_TRUE(f.tensors.count("input." + n)) << "missing input." << n;
    Tensor t = f.tensors.at("input." + n);
    Tensor copy = Tensor::empty(t.shape(), t.dtype());  // the stored input stays untouched
    copy_(copy, t);
    if (f.tensors.count("grad_input." + n)) {
      copy.set_requires_grad(true);
      any_grad = true;
    }
    in.by_name[n] = copy;
  }
  const bool f64 = f.metadata["dtype"] == "float64";
  ASSERT_TRUE(f64 || f.metadata["dtype"] == "float32") << f.metadata["dtype"];
  const double rtol = f64 ? 1e-10 : 1e-5;

  Tensor out;
  {
    FillOutputsWithNaN nan_fill;  // an element a kernel forgets to write shows up as NaN
    out = rit->second(in, args);
  }
  expect_close("output", out, f.tensors.at("output"), rtol);
  for (const auto& [key, want] : f.tensors)
    if (key.rfind("after.", 0) == 0) expect_close(key + " (updated in place)", in(key.substr(6)), want, rtol);

  if (!any_grad) return;
  ASSERT_TRUE(out.requires_grad()) << "the output does not require grad";
  {
    FillOutputsWithNaN nan_fill;
    out.backward(f.tensors.at("grad_output"));
  }
  for (const auto& n : names) {
    auto it = f.tensors.find("grad_input." + n);
    if (it == f.tensors.end()) continue;
    Tensor g = in(n).grad();
    EXPECT_TRUE(g.defined()) << "no gradient reached input " << n;
    if (g.defined()) expect_close("gradient of " + n, g, it->second, rtol);
  }
}

std::string case_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Ops, GoldenOps, ::testing::ValuesIn(golden_files()), case_name);

// The goldens and the runner table stay in step: every op of functional.h that can be compared
// has files, and every file's op has a runner.
TEST(GoldenOpsIndex, EveryOpHasGoldenFiles) {
  auto files = golden_files();
  ASSERT_GE(files.size(), 100u) << "golden/ops is missing or nearly empty: run scripts/make_golden.py";
  std::map<std::string, int> per_op;
  for (const auto& stem : files) {
    SafetensorsFile f = load_safetensors((kGoldenOps / (stem + ".safetensors")).string());
    std::string op = f.metadata["op"];
    per_op[op]++;
    EXPECT_TRUE(runners().count(op)) << stem << ": no runner for op " << op;
  }
  for (const auto& [op, r] : runners()) EXPECT_GT(per_op[op], 0) << "no golden file exercises " << op;
}

}  // namespace
