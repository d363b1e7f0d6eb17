#include "reckon/nn/recompute.h"

#include <string_view>

#include "reckon/nn/layers.h"

namespace reckon::nn {

namespace {

bool is_residual_block(const Module& m) {
  const std::string& t = m.type_name();
  return t == "BasicBlock" || t == "Bottleneck" || t == "InvertedResidual";
}

bool is_pool(const Module& m) {
  const std::string& t = m.type_name();
  return t == "MaxPool2d" || t == "AvgPool2d" || t == "AdaptiveAvgPool2d";
}

// Segment ends of a plain feature stack (empty if s is not one).
std::vector<size_t> feature_segments(const Sequential& s) {
  std::vector<size_t> ends;
  for (size_t i = 0; i < s.size(); ++i) {
    const Module& c = *s.named_children()[i].second;
    if (!c.named_children().empty()) return {};
    if (is_pool(c)) ends.push_back(i + 1);
  }
  if (!ends.empty() && ends.back() < s.size()) ends.push_back(s.size());
  return ends;
}

int64_t mark(Module& m) {
  if (is_residual_block(m)) {
    m.set_recompute(true);
    return 1;
  }
  if (auto* s = dynamic_cast<Sequential*>(&m)) {
    std::vector<size_t> ends = feature_segments(*s);
    if (!ends.empty()) {
      const auto n = int64_t(ends.size());
      s->set_recompute_segments(std::move(ends));
      return n;
    }
  }
  int64_t n = 0;
  for (auto& [name, c] : m.named_children()) n += mark(*c);
  return n;
}

}  // namespace

int64_t enable_recompute(Module& root) { return mark(root); }

void disable_recompute(Module& root) {
  for (auto& [name, m] : root.named_modules()) {
    m->set_recompute(false);
    if (auto* s = dynamic_cast<Sequential*>(m)) s->set_recompute_segments({});
  }
}

}  // namespace reckon::nn
