// The data specs of a run (data_spec.h).
#include "reckon/train/data_spec.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "reckon/core/error.h"
#include "reckon/nn/models/registry.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/node.h"
#include "reckon/ops/op.h"

namespace reckon::train {

data::Normalize parse_normalize(const std::string& spec, const data::Dataset& train_set) {
  data::Normalize n;
  if (spec == "none") return n;
  int64_t C = train_set.sample_shape()[0];
  if (spec == "auto") {
    n.mean = data::channel_mean(train_set);
    n.std = data::channel_std(train_set);
    for (float& s : n.std)
      if (!(s > 0)) s = 1.0f;  // a constant channel: centre it only
    return n;
  }
  auto slash = spec.find('/');
  RK_CHECK(slash != std::string::npos, "--normalize '{}' is not auto, none or MEAN,../STD,..", spec);
  auto parse_list = [&](const std::string& s) {
    std::vector<float> v;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ',')) {
      size_t used = 0;
      float f = 0;
      try {
        f = std::stof(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      RK_CHECK(used > 0 && used == item.size() && std::isfinite(f), "--normalize '{}': '{}' is not a number", spec,
               item);
      v.push_back(f);
    }
    return v;
  };
  n.mean = parse_list(spec.substr(0, slash));
  n.std = parse_list(spec.substr(slash + 1));
  RK_CHECK(int64_t(n.mean.size()) == C && int64_t(n.std.size()) == C,
           "--normalize '{}' gives {} means and {} stds but the images have {} channels", spec, n.mean.size(),
           n.std.size(), C);
  for (float s : n.std) RK_CHECK(s > 0, "--normalize '{}': every std must be positive", spec);
  return n;
}

data::Augment parse_augment(const std::string& spec) {
  data::Augment a;
  if (spec == "none" || spec.empty()) return a;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == "flip") {
      a.hflip = true;
    } else if (item == "crop") {
      a.crop_padding = 4;
    } else if (item.rfind("crop:", 0) == 0) {
      std::string n = item.substr(5);
      RK_CHECK(!n.empty() && n.size() < 6 && std::all_of(n.begin(), n.end(), ::isdigit),
               "--augment '{}': crop padding '{}' is not a count", spec, n);
      a.crop_padding = std::stoll(n);
    } else {
      throw Error(fmt::format("--augment '{}': '{}' is not one of none, crop[:PAD], flip", spec, item));
    }
  }
  return a;
}

TrainData open_train_data(const std::string& spec) {
  TrainData d;
  d.train = data::open_dataset(spec, true, 0);
  d.test = data::open_dataset(spec, false, 0);
  d.chw = d.train->sample_shape();
  d.num_classes = d.train->num_classes();
  RK_CHECK(d.test->sample_shape() == d.chw && d.test->num_classes() == d.num_classes,
           "--data {}: the test split has {} images of {} classes but the training split {} of {}", spec,
           shape_str(d.test->sample_shape()), d.test->num_classes(), shape_str(d.chw), d.num_classes);
  RK_CHECK(d.chw.size() == 3, "--data {}: samples have shape {}, not (C, H, W)", spec, shape_str(d.chw));
  return d;
}

void check_labels(const data::Batch& b, int64_t K, const std::string& spec, int64_t epoch) {
  const int64_t* y = b.y.data<int64_t>();
  for (int64_t i = 0; i < b.y.numel(); ++i)
    RK_CHECK(y[i] >= 0 && y[i] < K, "--data {}: label {} in batch {} of epoch {} is out of range [0, {})", spec, y[i],
             b.index, epoch + 1, K);
}

int64_t forward_macs(const std::string& model_name, int64_t in_channels, int64_t num_classes, const Shape& chw) {
  nn::ModelConfig mc{.num_classes = num_classes, .in_channels = in_channels, .device = Device::meta};
  auto model = onnx::make_model(model_name, mc);  // throws for an unknown name, listing the known ones
  model->eval();
  Shape in = chw;
  in.insert(in.begin(), 1);
  int64_t macs = 0;
  Tensor out;
  try {
    ObserveOps obs([&](const OpRecord& r) { macs += r.cost.macs; });
    NoGrad ng;
    out = (*model)(Tensor::empty(in, DType::f32, Device::meta));
  } catch (const Error& e) {
    throw Error(fmt::format("model {} does not fit {} images (C, H, W): {}", model_name, shape_str(chw), e.what()));
  }
  RK_CHECK(out.shape() == Shape({1, num_classes}), "model {} maps {} images to {}, not [1, {}]", model_name,
           shape_str(chw), shape_str(out.shape()), num_classes);
  return macs;
}

}  // namespace reckon::train
