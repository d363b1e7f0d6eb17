#include "reckon/onnx/node_tests.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "reckon/onnx/import.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"

namespace reckon::onnx {

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> sorted_glob(const fs::path& dir, const std::string& prefix) {
  std::vector<fs::path> v;
  if (!fs::is_directory(dir)) return v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().rfind(prefix, 0) == 0) v.push_back(e.path());
  // input_10.pb after input_9.pb
  std::sort(v.begin(), v.end(), [&](const fs::path& a, const fs::path& b) {
    auto num = [&](const fs::path& p) {
      std::string s = p.stem().string().substr(prefix.size());
      return s.empty() || !std::isdigit(s[0]) ? 0L : std::stol(s);
    };
    return num(a) != num(b) ? num(a) < num(b) : a < b;
  });
  return v;
}

// Empty when equal as ONNX's backend tests compare, else what differs.
std::string compare(const Tensor& want, const Tensor& got) {
  if (!got.defined()) return "no output";
  if (want.shape() != got.shape())
    return fmt::format("shape [{}], expected [{}]", fmt::join(got.shape(), ", "), fmt::join(want.shape(), ", "));
  if (is_floating(want.dtype()) != is_floating(got.dtype()))
    return fmt::format("dtype {}, expected {}", dtype_name(got.dtype()), dtype_name(want.dtype()));
  const Tensor w = contiguous(want), g = contiguous(got);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double a = w.get(i), b = g.get(i);
    if (std::isnan(a) && std::isnan(b)) continue;
    if (is_floating(want.dtype()) ? !(std::fabs(a - b) <= 1e-7 + 1e-3 * std::fabs(a)) : a != b)
      return fmt::format("element {} is {}, expected {}", i, b, a);
  }
  return "";
}

}  // namespace

std::vector<NodeTestResult> run_node_tests(const std::string& dir, const std::string& filter) {
  RK_CHECK(fs::is_directory(dir), "[onnx-test] {} is not a directory", dir);
  std::vector<fs::path> cases;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory() && fs::exists(e.path() / "model.onnx") &&
        e.path().filename().string().find(filter) != std::string::npos)
      cases.push_back(e.path());
  std::sort(cases.begin(), cases.end());
  const auto& sup = supported_ops();
  const std::set<std::string> supported(sup.begin(), sup.end());
  std::vector<NodeTestResult> results;
  for (const fs::path& c : cases) {
    NodeTestResult r;
    r.name = c.filename().string();
    // Eligibility from the file's operators as protobuf reads them (before reckon's checks):
    // a case reckon should run but cannot load is a failure.
    {
      std::ifstream f(c / "model.onnx", std::ios::binary);
      ::onnx::ModelProto p;
      std::set<std::string> ops;
      bool default_domain = true;
      if (p.ParseFromIstream(&f))
        for (const auto& n : p.graph().node()) {
          ops.insert(n.op_type());
          default_domain = default_domain && (n.domain().empty() || n.domain() == "ai.onnx");
        }
      r.ops.assign(ops.begin(), ops.end());
      r.eligible = default_domain && !ops.empty() &&
                   std::all_of(ops.begin(), ops.end(), [&](const std::string& o) { return supported.count(o) > 0; });
    }
    if (!r.eligible) {
      results.push_back(r);
      continue;
    }
    try {
      Model m = load((c / "model.onnx").string());
      auto sets = sorted_glob(c, "test_data_set_");
      RK_CHECK(!sets.empty(), "no test_data_set_* directory");
      for (const fs::path& s : sets) {
        RunArgs a;
        auto ins = sorted_glob(s, "input_");
        // Inputs bind to the graph's inputs in order (initializers excluded), as ONNX's runner does.
        RK_CHECK(ins.size() <= m.inputs.size(), "{} inputs for a graph of {}", ins.size(), m.inputs.size());
        for (size_t i = 0; i < ins.size(); ++i) a.values[m.inputs[i].name] = load_tensor_file(ins[i].string());
        for (size_t i = ins.size(); i < m.inputs.size(); ++i) a.values[m.inputs[i].name] = Tensor();
        std::vector<Tensor> got;
        {
          NoGrad ng;
          got = run(m, a);
        }
        auto outs = sorted_glob(s, "output_");
        RK_CHECK(outs.size() == got.size(), "{} outputs, expected {}", got.size(), outs.size());
        for (size_t i = 0; i < outs.size(); ++i) {
          std::string d = compare(load_tensor_file(outs[i].string()), got[i]);
          RK_CHECK(d.empty(), "{}, output {} ({}): {}", s.filename().string(), i, m.outputs[i].name, d);
        }
      }
      r.passed = true;
    } catch (const std::exception& e) {
      r.why = e.what();
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace reckon::onnx
