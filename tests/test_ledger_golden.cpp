// The ledger's figures for every zoo model, frozen before the graph-IR refactor (issue 10) and
// compared after it: the refactor must not change what the ledger predicts, except where an op
// now declares what an old formula guessed (the optimizer's update, once "one pass over params,
// grads and state"; now the update ops' own cost).
//
// golden/ledger/refactor.json was written by this file's DISABLED_WriteGolden at the commit
// before the refactor:
//   build/reckon_tests --gtest_also_run_disabled_tests --gtest_filter='LedgerGolden.DISABLED_WriteGolden'
// Kernel planning is off (plan_workspace = false), so no oneDNN plan and no cpu-specific choice
// enters a figure: the file is the same on every machine.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "reckon/ledger/ledger.h"
#include "reckon/nn/models/registry.h"

using namespace reckon;
using json = nlohmann::ordered_json;

namespace {

const char* kPath = RECKON_SOURCE_DIR "/golden/ledger/refactor.json";

struct Case {
  std::string precision, optimizer;
  int64_t accum;
  bool recompute;
  bool rows;  // keep the per-layer figures too (the file stays small with three cases of seven)
  std::string label() const {
    return precision + "-" + optimizer + (accum > 1 ? "-accum" + std::to_string(accum) : "") +
           (recompute ? "-recompute" : "");
  }
};

const std::vector<Case>& cases() {
  static const std::vector<Case> c = {
      {"fp32", "sgd", 1, false, true},   {"fp32", "adamw", 1, false, false}, {"bf16", "sgd", 1, false, false},
      {"bf16", "adamw", 1, false, true}, {"fp32", "sgd", 2, false, false},   {"fp32", "adamw", 1, true, false},
      {"bf16", "sgd", 2, true, true},
  };
  return c;
}

// Small batches: the meta device's cost does not depend on them, and the big models stay cheap.
int64_t batch_of(const std::string& model) {
  return model == "lenet5" || model == "tinycnn" || model == "resnet18_cifar" ? 8 : 2;
}

LedgerConfig config_of(const std::string& model, const Case& c) {
  LedgerConfig cfg;
  cfg.batch = batch_of(model);
  cfg.precision = c.precision;
  cfg.optimizer = c.optimizer;
  cfg.accum = c.accum;
  cfg.recompute = c.recompute;
  cfg.plan_workspace = false;
  cfg.device = "h100";
  return cfg;
}

json tags(const std::array<int64_t, kNumTags>& a) {
  json j = json::object();
  for (int i = 0; i < kNumTags; ++i) j[std::string(tag_name(Tag(i)))] = a[size_t(i)];
  return j;
}

// The figures that must not move. The optimizer's guessed pass (totals.optimizer_bytes) is taken
// out of bytes_moved and kept apart, so the comparison after the refactor can set it beside what
// the update ops declare.
json canonical(const Ledger& l, bool with_rows) {
  json j;
  const LedgerTotals& t = l.totals;
  j["optimizer_guess_bytes"] = t.optimizer_bytes;
  j["totals"] = {{"params", t.params},         {"fwd_macs", t.fwd_macs},     {"bwd_macs", t.bwd_macs},
                 {"conv_macs", t.conv_macs},   {"linear_macs", t.linear_macs}, {"flops", t.flops},
                 {"bytes_moved", t.bytes_moved - t.optimizer_bytes},           {"saved_bytes", t.saved_bytes},
                 {"recompute_macs", t.recompute_macs}, {"num_ops", t.num_ops}};
  j["memory"] = {{"at_peak", tags(l.memory.at_peak_bytes)},
                 {"tag_peak", tags(l.memory.tag_peak_bytes)},
                 {"peak", l.memory.peak_bytes}};
  // Per layer: [scope, fwd MACs, bwd MACs, fwd FLOPs, bwd FLOPs, saved bytes, bytes moved, op calls].
  json rows = json::array();
  for (const auto& r : l.rows) {
    const int64_t moved = r.scope == "(optimizer)" ? r.bytes_moved - t.optimizer_bytes : r.bytes_moved;
    rows.push_back(json::array({r.scope, r.fwd_macs, r.bwd_macs, r.fwd_flops, r.bwd_flops, r.saved_bytes, moved,
                                r.num_ops}));
  }
  if (with_rows) j["rows"] = rows;
  return j;
}

json current() {
  json all = json::object();
  for (const auto& model : nn::model_names()) {
    json m = json::object();
    for (const Case& c : cases()) m[c.label()] = canonical(ledger(model, config_of(model, c)), c.rows);
    all[model] = m;
  }
  return all;
}

}  // namespace

TEST(LedgerGolden, DISABLED_WriteGolden) {
  // One line per model and case, so a change shows as a readable diff.
  const json all = current();
  std::ofstream f(kPath);
  ASSERT_TRUE(f.good()) << kPath;
  f << "{\"note\": \"the ledger before the graph-IR refactor; tests/test_ledger_golden.cpp\",\n\"models\": {\n";
  bool first_model = true;
  for (const auto& [model, by_case] : all.items()) {
    f << (first_model ? "" : ",\n") << json(model).dump() << ": {\n";
    bool first = true;
    for (const auto& [label, c] : by_case.items()) {
      f << (first ? "" : ",\n") << json(label).dump() << ": " << c.dump();
      first = false;
    }
    f << "}";
    first_model = false;
  }
  f << "}}\n";
}

TEST(LedgerGolden, EveryZooModelUnchanged) {
  std::ifstream f(kPath);
  ASSERT_TRUE(f.good()) << kPath << " is missing";
  const json golden = json::parse(f)["models"];
  const json now = current();
  ASSERT_EQ(golden.size(), now.size());
  for (const auto& [model, byCase] : now.items()) {
    for (const auto& [label, got] : byCase.items()) {
      SCOPED_TRACE(model + " " + label);
      ASSERT_TRUE(golden.contains(model) && golden[model].contains(label));
      const json& want = golden[model][label];
      EXPECT_EQ(got["totals"], want["totals"]);
      EXPECT_EQ(got["memory"], want["memory"]);
      EXPECT_EQ(got.contains("rows"), want.contains("rows"));
      if (got.contains("rows")) EXPECT_EQ(got["rows"], want["rows"]);
      EXPECT_EQ(got["optimizer_guess_bytes"], want["optimizer_guess_bytes"]);
    }
  }
}
