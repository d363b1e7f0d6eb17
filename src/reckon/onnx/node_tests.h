// ONNX's own operator tests (the node tests Debian's libonnx-testdata ships under
// /usr/share/libonnx-testdata/data/node): each case is a directory with a one-node model.onnx
// and test_data_set_*/input_*.pb, output_*.pb. A case runs when every operator of its model is
// one reckon imports (supported_ops()); its outputs must match as ONNX's backend tests compare
// them (numpy's assert_allclose, rtol 1e-3, atol 1e-7; integers exactly; shapes exactly).
#pragma once
#include <string>
#include <vector>

namespace reckon::onnx {

struct NodeTestResult {
  std::string name;            // "test_conv_with_strides_padding"
  std::vector<std::string> ops;  // its operators
  bool eligible = false;       // every operator is supported
  bool passed = false;
  std::string why;             // the first failure
};

// Every case under dir (sorted by name) whose name contains `filter` ("" for all).
std::vector<NodeTestResult> run_node_tests(const std::string& dir, const std::string& filter = "");

}  // namespace reckon::onnx
