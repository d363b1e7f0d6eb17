// `reckon models` (the zoo with parameters and MACs per image) and `reckon demo` (a few SGD
// steps on random data).
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "reckon/nn/models/registry.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/dispatch.h"
#include "reckon/ops/op_list.h"
#include "reckon/optim/optim.h"

using namespace reckon;

namespace {

// Forward MACs of one image: the model run once on the meta device, costs summed.
int64_t forward_macs_per_image(const std::string& name, const nn::ModelConfig& cfg) {
  nn::ModelConfig meta = cfg;
  meta.device = Device::meta;
  auto model = nn::make_model(name, meta);
  model->eval();
  Shape in = nn::model_input_shape(name, cfg);
  in.insert(in.begin(), 1);
  int64_t macs = 0;
  ObserveOps obs([&](const OpRecord& r) { macs += r.cost.macs; });
  NoGrad ng;
  (*model)(Tensor::empty(in, DType::f32, Device::meta));
  return macs;
}

// The table, or with json a list of {name, parameters, forward_macs_per_image, input: [C, H, W]}.
int cmd_models(bool json) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  if (!json) std::printf("%-16s %14s %16s  %s\n", "model", "parameters", "fwd MACs/image", "input");
  for (const auto& name : nn::model_names()) {
    nn::ModelConfig cfg;
    cfg.device = Device::meta;
    auto m = nn::make_model(name, cfg);
    const int64_t macs = forward_macs_per_image(name, {});
    const Shape in = nn::model_input_shape(name, {});
    if (json)
      list.push_back({{"name", name}, {"parameters", m->num_parameters()}, {"forward_macs_per_image", macs},
                      {"input", in}});
    else
      std::printf("%-16s %14lld %16lld  %s\n", name.c_str(), (long long)m->num_parameters(), (long long)macs,
                  shape_str(in).c_str());
  }
  if (json) std::printf("%s\n", list.dump(2).c_str());
  return 0;
}

int cmd_demo(const std::string& name, int steps, int64_t batch, double lr, uint64_t seed) {
  manual_seed(seed);
  nn::ModelConfig cfg;
  auto model = nn::make_model(name, cfg);
  model->train();
  Shape in = nn::model_input_shape(name, cfg);
  in.insert(in.begin(), batch);
  int64_t classes = 0;
  {
    NoGrad ng;
    nn::ModelConfig meta = cfg;
    meta.device = Device::meta;
    auto probe = nn::make_model(name, meta);
    probe->eval();
    classes = (*probe)(Tensor::empty(in, DType::f32, Device::meta)).size(1);
  }
  int64_t macs = forward_macs_per_image(name, cfg);
  std::printf("%s: %lld parameters, %.3f M forward MACs per image, input %s, %lld classes\n", name.c_str(),
              (long long)model->num_parameters(), double(macs) / 1e6, shape_str(in).c_str(), (long long)classes);
  std::printf("demo: %d SGD steps (lr %g, momentum 0.9) on one fixed random batch; the loss should fall\n",
              steps, lr);
  Tensor x, y;
  {
    TagGuard g(Tag::input);
    x = Tensor::empty(in);
    fill_normal_(x, 0.0, 1.0);
    y = Tensor::empty({batch}, DType::i64);
    for (int64_t i = 0; i < batch; ++i) y.set(i, double(i % classes));
  }
  optim::SGD opt(model->parameters(), {.lr = lr, .momentum = 0.9});
  auto t0 = std::chrono::steady_clock::now();
  for (int s = 1; s <= steps; ++s) {
    opt.zero_grad();
    Tensor loss = cross_entropy((*model)(x), y);
    loss.backward();
    opt.step();
    std::printf("step %2d  loss %.4f\n", s, loss.item());
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  auto st = tracker(Device::cpu).stats();
  std::printf("%.1f images/s, peak tracked memory %.2f MiB\n", double(steps * batch) / secs,
              double(st.peak_total_bytes) / (1 << 20));
  return 0;
}

}  // namespace


namespace {
tools::RegisterCommand reg_models([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static bool json = false;
  sub = app.add_subcommand("models", "list the model zoo with parameters and MACs per image");
  sub->add_flag("--json", json, "print JSON");
  return [] { return cmd_models(json); };
});

struct DemoArgs {
  std::string model = "lenet5";
  int steps = 10;
  int64_t batch = 32;
  double lr = 0.05;
  uint64_t seed = 0;
};
tools::RegisterCommand reg_demo([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static DemoArgs a;
  sub = app.add_subcommand("demo", "a few SGD steps on random data");
  sub->add_option("model", a.model, "zoo model name")->capture_default_str();
  sub->add_option("--steps", a.steps, "SGD steps")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--batch", a.batch, "batch size")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--lr", a.lr, "learning rate")->capture_default_str();
  sub->add_option("--seed", a.seed, "random seed")->capture_default_str()->check(CLI::NonNegativeNumber);
  return [] { return cmd_demo(a.model, a.steps, a.batch, a.lr, a.seed); };
});
}  // namespace
