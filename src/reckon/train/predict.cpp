// `reckon predict` (predict.h).
#include "reckon/train/predict.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "reckon/core/json.h"
#include "reckon/io/checkpoint.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/train/config.h"
#include "reckon/train/eval.h"
#include "reckon/train/progress.h"

namespace reckon::train {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

bool image_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return e == ".png" || e == ".jpg" || e == ".jpeg";
}

// The files named: an image as given, a directory's images (by extension) in name order.
std::vector<std::string> image_files(const std::vector<std::string>& inputs) {
  RK_CHECK(!inputs.empty(), "reckon predict: give at least one image file or directory");
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> here;
      for (const auto& e : fs::directory_iterator(in, ec))
        if (e.is_regular_file(ec) && image_extension(e.path())) here.push_back(e.path().string());
      RK_CHECK(!ec, "{}: cannot list the directory ({})", in, ec.message());
      RK_CHECK(!here.empty(), "{}: the directory holds no .png, .jpg or .jpeg file", in);
      std::sort(here.begin(), here.end());
      files.insert(files.end(), here.begin(), here.end());
    } else {
      files.push_back(in);  // read_image names it if it is missing or not an image
    }
  }
  return files;
}

// What the model takes and how its inputs were scaled, from a reckon checkpoint's metadata
// alone (no dataset needed). False when the checkpoint does not say (a state dict, an older file).
bool setup_from_checkpoint(const PredictArgs& a, const io::Checkpoint& ck, EvalSetup& s, Shape& chw,
                           std::vector<std::string>& names) {
  if (!ck.has_training_state || !a.data.empty() || (a.normalize != "auto" && a.normalize != "none")) return false;
  const auto shape_it = ck.info.extra.find("input_shape"), k_it = ck.info.extra.find("num_classes");
  if (shape_it == ck.info.extra.end() || k_it == ck.info.extra.end()) return false;
  const std::string& path = ck.path;
  json shape = parse_json(shape_it->second, fmt::format("{}: metadata 'input_shape'", path));
  RK_CHECK(shape.is_array() && shape.size() == 3 && std::ranges::all_of(shape, [](const json& d) {
             return d.is_number_integer() && d.get<int64_t>() > 0 && d.get<int64_t>() <= 1 << 16;
           }),
           "{}: metadata 'input_shape' is {}, not [C, H, W]", path, shape_it->second.substr(0, 40));
  chw = shape.get<Shape>();
  int64_t K = 0;
  try {
    K = std::stoll(k_it->second);
  } catch (const std::exception&) {
  }
  RK_CHECK(K >= 1 && K <= 1 << 24, "{}: metadata 'num_classes' is '{}', not a count", path, k_it->second.substr(0, 40));
  names.clear();
  if (auto it = ck.info.extra.find("class_names"); it != ck.info.extra.end()) {
    json n = parse_json(it->second, fmt::format("{}: metadata 'class_names'", path));
    RK_CHECK(n.is_array() && int64_t(n.size()) == K && std::ranges::all_of(n, [](const json& x) { return x.is_string(); }),
             "{}: metadata 'class_names' is not a list of {} names", path, K);
    names = n.get<std::vector<std::string>>();
  } else {
    for (int64_t k = 0; k < K; ++k) names.push_back(std::to_string(k));
  }
  if (a.normalize == "auto") {
    std::optional<StoredNormalize> stored = checkpoint_normalization(ck, chw[0], "its input " + shape_str(chw));
    if (!stored) return false;
    s.norm = std::move(stored->norm);
    s.normalization = std::move(stored->described);
  } else {
    s.normalization = "none, as given";
  }
  s.model = onnx::make_model(a.model, {.num_classes = K, .in_channels = chw[0]});
  s.weights_note = io::load_model_state(ck, *s.model, a.model);
  return true;
}

}  // namespace

std::vector<float> image_to_input(const data::Image& img, int64_t channels, int64_t height, int64_t width) {
  const int64_t h = img.height, w = img.width;
  std::vector<uint8_t> planes(size_t(channels * h * w));
  data::image_to_planes(img, channels, planes.data());
  std::vector<float> out(size_t(channels * height * width));
  // Source coordinate of each output row / column: (o + 0.5) * in / out - 0.5, clamped at 0 (as
  // torch's upsample_bilinear2d with align_corners=False), its two neighbours and the weight.
  struct Tap {
    int64_t i0, i1;
    float t;
  };
  auto taps = [](int64_t in, int64_t n) {
    std::vector<Tap> v(static_cast<size_t>(n));
    const double scale = double(in) / double(n);
    for (int64_t o = 0; o < n; ++o) {
      const double src = std::max(0.0, (double(o) + 0.5) * scale - 0.5);
      const int64_t i0 = std::min<int64_t>(int64_t(src), in - 1);
      v[size_t(o)] = {i0, std::min<int64_t>(i0 + 1, in - 1), float(src - double(i0))};
    }
    return v;
  };
  const std::vector<Tap> ty = taps(h, height), tx = taps(w, width);
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* p = planes.data() + c * h * w;
    float* q = out.data() + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      const Tap& a = ty[size_t(y)];
      for (int64_t x = 0; x < width; ++x) {
        const Tap& b = tx[size_t(x)];
        auto at = [&](int64_t r, int64_t s) { return float(p[r * w + s]) / 255.0f; };
        const float top = at(a.i0, b.i0) + b.t * (at(a.i0, b.i1) - at(a.i0, b.i0));
        const float bot = at(a.i1, b.i0) + b.t * (at(a.i1, b.i1) - at(a.i1, b.i0));
        q[y * width + x] = top + a.t * (bot - top);
      }
    }
  }
  return out;
}

PredictResult predict(const PredictArgs& a) {
  RK_CHECK(a.top >= 1, "--top must be at least 1 (got {})", a.top);
  RK_CHECK(a.batch >= 1, "--batch must be at least 1 (got {})", a.batch);
  auto t0 = Clock::now();
  ThreadsGuard threads_guard(a.threads);
  const std::vector<std::string> files = image_files(a.inputs);
  PredictResult res;
  EvalSetup s;
  Shape chw;
  io::Checkpoint ck;
  if (!a.checkpoint.empty()) ck = io::read_checkpoint(a.checkpoint);
  if (!setup_from_checkpoint(a, ck, s, chw, res.class_names)) {
    std::string data = a.data;
    if (data.empty() && ck.has_training_state) {
      json c = parse_json(ck.info.config_json, fmt::format("{}: metadata 'config'", a.checkpoint));
      if (c.contains("data") && c["data"].is_string()) data = c["data"].get<std::string>();
    }
    if (data.empty()) data = "fashion-mnist";
    s = prepare_evaluation(a.model, ck, data, a.normalize);  // the file read once
    chw = s.test->sample_shape();
    res.class_names = s.test->class_names();
  }
  res.input = chw;
  res.normalization = s.normalization;
  res.weights_note = s.weights_note;
  const int64_t C = chw[0], H = chw[1], W = chw[2], K = int64_t(res.class_names.size());
  const int64_t top = std::min(a.top, K);
  s.model->eval();
  BatchEngines engines(*s.model);
  NoGrad ng;
  for (size_t first = 0; first < files.size(); first += size_t(a.batch)) {
    const int64_t n = std::min<int64_t>(a.batch, int64_t(files.size() - first));
    Tensor x = Tensor::empty({n, C, H, W});
    float* px = x.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      const std::string& f = files[first + size_t(i)];
      const data::Image img = data::read_image(f);
      Prediction p;
      p.file = f, p.height = img.height, p.width = img.width, p.channels = img.channels;
      std::vector<float> v = image_to_input(img, C, H, W);
      for (int64_t c = 0; c < C && !s.norm.mean.empty(); ++c)
        for (int64_t k = 0; k < H * W; ++k)
          v[size_t(c * H * W + k)] = (v[size_t(c * H * W + k)] - s.norm.mean[size_t(c)]) / s.norm.std[size_t(c)];
      std::copy(v.begin(), v.end(), px + i * C * H * W);
      res.images.push_back(std::move(p));
    }
    const Tensor logits = contiguous(engines.run(x));
    RK_CHECK(logits.dim() == 2 && logits.size(0) == n && logits.size(1) == K,
             "{}: the model gives outputs of shape {}, not ({}, {}) for its {} classes", a.model,
             shape_str(logits.shape()), n, K, K);
    const Tensor prob = contiguous(softmax(logits, 1));
    for (int64_t i = 0; i < n; ++i) {
      const float* q = prob.data<float>() + i * K;
      std::vector<int64_t> order(static_cast<size_t>(K));
      for (int64_t k = 0; k < K; ++k) order[size_t(k)] = k;
      std::stable_sort(order.begin(), order.end(), [&](int64_t l, int64_t r) { return q[l] > q[r]; });
      Prediction& p = res.images[first + size_t(i)];
      for (int64_t k = 0; k < top; ++k) {
        p.classes.push_back(order[size_t(k)]);
        p.probabilities.push_back(double(q[order[size_t(k)]]));
      }
    }
  }
  res.seconds = seconds_since(t0);
  return res;
}

}  // namespace reckon::train
