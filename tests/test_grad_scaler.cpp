// optim::GradScaler against torch.amp.GradScaler: growth and backoff, skipped steps that leave
// weights and optimizer state bit-identical, unscaling by float(1 / double(scale)), the scale
// trajectory of scripted overflows replayed from golden/amp/grad_scaler.json (written by
// scripts/make_amp_golden.py with torch 2.15; this test needs no Python), the disabled
// pass-through, misuse errors, state_dict, and the meta device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "reckon/ops/functional.h"
#include "reckon/optim/grad_scaler.h"

#include "test_util.h"

using namespace reckon;
using reckon::test_util::error_of;
using json = nlohmann::json;

namespace {

Tensor make_param(const std::vector<float>& v, const std::string& name, Device dev = Device::cpu) {
  Tensor p = dev == Device::cpu ? Tensor::from_floats(v, {int64_t(v.size())})
                                : Tensor::zeros({int64_t(v.size())}, DType::f32, dev);
  p.set_requires_grad(true);
  p.set_name(name);
  return p;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  std::vector<uint32_t> out;
  for (double v : t.to_vector()) out.push_back(bits(float(v)));
  return out;
}

// Distance in units in the last place (adjacent floats are 1 apart; +0 and -0 are 0 apart).
int64_t ulps(float a, float b) {
  auto key = [](float f) {
    int32_t i;
    std::memcpy(&i, &f, 4);
    return i < 0 ? int64_t(INT32_MIN) - i : int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}

// Every tensor of the optimizer's state as bits, by key.
std::vector<std::pair<std::string, std::vector<uint32_t>>> state_bits(const optim::Optimizer& opt) {
  std::vector<std::pair<std::string, std::vector<uint32_t>>> out;
  for (const auto& [k, t] : opt.state_dict()) out.emplace_back(k, bits_of(t));
  return out;
}

// A "backward" that leaves these (already scaled) gradients.
void set_grads(const std::vector<Tensor>& ps, const std::vector<std::vector<float>>& gs) {
  for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(Tensor::from_floats(gs[i], ps[i].shape()));
}

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

// ---------------------------------------------------------------- growth and backoff

TEST(GradScaler, GrowsAfterExactlyGrowthIntervalCleanSteps) {
  Tensor p = make_param({1.0f, 2.0f}, "p");
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler;  // defaults: 65536, x2 after 2000 clean steps
  EXPECT_EQ(scaler.get_scale(), 65536.0f);
  for (int i = 1; i <= 1999; ++i) {
    set_grads({p}, {{1.0f, -3.0f}});
    ASSERT_TRUE(scaler.step(opt));
    scaler.update();
  }
  EXPECT_EQ(scaler.get_scale(), 65536.0f) << "grew before 2000 clean steps";
  EXPECT_EQ(scaler.growth_tracker(), 1999);
  set_grads({p}, {{1.0f, -3.0f}});
  ASSERT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 131072.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  ASSERT_EQ(scaler.scale_history().size(), 2000u);
  EXPECT_EQ(scaler.scale_history()[1998], 65536.0f);
  EXPECT_EQ(scaler.scale_history()[1999], 131072.0f);
  EXPECT_EQ(scaler.skipped_steps(), 0);
  EXPECT_EQ(scaler.overflow_param(), "");
}

TEST(GradScaler, GrowthStopsAtFloatRange) {
  // 2^127 * 2 is inf in float32: torch keeps the old scale and still resets the tracker.
  Tensor p = make_param({1.0f}, "p");
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = std::ldexp(1.0, 127), .growth_interval = 1});
  set_grads({p}, {{0.0f}});
  scaler.step(opt);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0f, 127));
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// A skipped step must leave weights and optimizer state (momentum buffers, Adam's moments and
// step count) bit-identical; the scale halves and the tracker restarts.
class GradScalerSkip : public ::testing::TestWithParam<std::tuple<std::string, float>> {};

TEST_P(GradScalerSkip, LeavesWeightsAndStateUntouched) {
  const auto& [opt_name, bad] = GetParam();
  Tensor a = make_param({0.5f, -1.0f, 2.0f}, "features.0.weight");
  Tensor b = make_param({0.25f, 0.75f}, "features.0.bias");
  std::unique_ptr<optim::Optimizer> opt;
  if (opt_name == "sgd")
    opt = std::make_unique<optim::SGD>(std::vector<Tensor>{a, b}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  else
    opt = std::make_unique<optim::AdamW>(std::vector<Tensor>{a, b}, optim::AdamWOptions{.lr = 0.01});
  optim::GradScaler scaler;
  const float s = scaler.get_scale();
  for (int i = 0; i < 2; ++i) {  // two clean steps: the state exists and the tracker is 2
    set_grads({a, b}, {{0.1f * s, -0.2f * s, 0.3f * s}, {0.05f * s, 0.4f * s}});
    ASSERT_TRUE(scaler.step(*opt));
    scaler.update();
  }
  ASSERT_EQ(scaler.growth_tracker(), 2);
  ASSERT_FALSE(opt->state_dict().empty());
  const auto a0 = bits_of(a), b0 = bits_of(b);
  const auto st0 = state_bits(*opt);

  set_grads({a, b}, {{0.1f * s, -0.2f * s, 0.3f * s}, {0.05f * s, bad}});
  EXPECT_FALSE(scaler.step(*opt));
  EXPECT_EQ(bits_of(a), a0);
  EXPECT_EQ(bits_of(b), b0);
  EXPECT_EQ(state_bits(*opt), st0);
  EXPECT_EQ(scaler.overflow_param(), "features.0.bias");
  EXPECT_EQ(scaler.skipped_steps(), 1);
  // torch unscales even an overflowed step's gradients.
  EXPECT_EQ(a.grad().to_vector()[0], double(0.1f * s * float(1.0 / double(s))));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), s * 0.5f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.warning(), "");  // 32768 is not below 1
  EXPECT_EQ(scaler.overflow_param(), "features.0.bias");  // kept after update()

  // The next clean step runs again and clears the overflow name.
  const float s2 = scaler.get_scale();
  set_grads({a, b}, {{0.1f * s2, -0.2f * s2, 0.3f * s2}, {0.05f * s2, 0.4f * s2}});
  EXPECT_TRUE(scaler.step(*opt));
  EXPECT_NE(bits_of(a), a0);
  EXPECT_NE(state_bits(*opt), st0);
  EXPECT_EQ(scaler.overflow_param(), "");
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

INSTANTIATE_TEST_SUITE_P(GradScaler, GradScalerSkip,
                         ::testing::Combine(::testing::Values("sgd", "adamw"), ::testing::Values(kInf, -kInf, kNaN)),
                         [](const auto& info) {
                           const float v = std::get<1>(info.param);
                           return std::get<0>(info.param) + (std::isnan(v) ? "_nan" : v > 0 ? "_inf" : "_neginf");
                         });

// ---------------------------------------------------------------- unscaling arithmetic

TEST(GradScaler, UnscalesByTheDoubleReciprocalNotByDivision) {
  // torch: inv = float(1 / double(scale)), then g * inv in float32. (For every float32 s,
  // float(1 / double(s)) equals the float32 quotient 1.0f / s: double has enough bits that the
  // double rounding is innocuous; what differs from dividing is multiplying by the rounded
  // reciprocal.) With scale 1000 many gradients give g * inv != g / 1000.
  const float s = 1000.0f;
  const float inv = float(1.0 / double(s));
  std::vector<float> g;
  int differ = 0;
  for (int k = 1; k <= 64; ++k) {
    g.push_back(1.37f * float(k));
    differ += (g.back() * inv != g.back() / s);
  }
  ASSERT_GT(differ, 10) << "the example does not tell multiplication from division";
  Tensor p = make_param(std::vector<float>(g.size(), 0.0f), "p");
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = 1000.0});
  set_grads({p}, {g});
  scaler.unscale_(opt);
  const auto got = p.grad().to_vector();
  for (size_t k = 0; k < g.size(); ++k) EXPECT_EQ(bits(float(got[k])), bits(g[k] * inv)) << "element " << k;
}

TEST(GradScaler, LargeAndStridedGradients) {
  // A gradient long enough for the threaded loop, with its only NaN last, and a transposed
  // (non-contiguous) one with its only inf first: both found, every element unscaled.
  const int64_t n = 200003;
  std::vector<float> big(n);
  for (int64_t k = 0; k < n; ++k) big[k] = float(k % 1000) * 8.0f;
  big[n - 1] = kNaN;
  Tensor a = make_param(std::vector<float>(n, 0.0f), "a");
  Tensor b = Tensor::zeros({3, 2});
  b.set_requires_grad(true);
  b.set_name("b");
  optim::SGD opt({a, b}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = 8.0});
  a.set_grad(Tensor::from_floats(big, {n}));
  Tensor gt = transpose(Tensor::from_floats({kInf, 16.0f, 24.0f, 32.0f, 40.0f, 48.0f}, {2, 3}), 0, 1);
  ASSERT_FALSE(gt.is_contiguous());
  b.set_grad(gt);
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(scaler.overflow_param(), "a");
  const auto ga = a.grad().to_vector();
  EXPECT_EQ(ga[999], 999.0);
  EXPECT_EQ(ga[n - 2], double((n - 2) % 1000));
  EXPECT_TRUE(std::isnan(ga[n - 1]));
  // gt is [[inf, 32], [16, 40], [24, 48]] in logical order.
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{kInf, 4.0, 2.0, 5.0, 3.0, 6.0}));
  scaler.update();
  // The strided gradient alone is found too.
  a.set_grad(Tensor::zeros({n}));
  b.set_grad(transpose(Tensor::from_floats({1.0f, 2.0f, kInf, 4.0f, 5.0f, 6.0f}, {2, 3}), 0, 1));
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(scaler.overflow_param(), "b");
}

TEST(GradScaler, UpdateMultipliesInDoubleLikeTorchsKernel) {
  // 0.3 is not a float: float(double(s) * 0.3) and float32 arithmetic part at the 4th backoff
  // from 1000 (the golden odd_factors trajectory checks the same against torch).
  Tensor p = make_param({1.0f}, "p");
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = 1000.0, .growth_factor = 3.0, .backoff_factor = 0.3});
  float want = 1000.0f, f32_only = 1000.0f;
  bool parted = false;
  for (int i = 0; i < 6; ++i) {
    set_grads({p}, {{kInf}});
    EXPECT_FALSE(scaler.step(opt));
    scaler.update();
    want = float(double(want) * 0.3);
    f32_only = f32_only * 0.3f;
    parted = parted || want != f32_only;
    EXPECT_EQ(scaler.get_scale(), want) << "backoff " << i;
  }
  EXPECT_TRUE(parted) << "the example does not tell double from float arithmetic";
}

// ---------------------------------------------------------------- against PyTorch

namespace {

float golden_float(const json& j) {
  if (j.is_string()) {
    const std::string s = j.get<std::string>();
    if (s == "inf") return kInf;
    if (s == "-inf") return -kInf;
    if (s == "nan") return kNaN;
    ADD_FAILURE() << "unknown number '" << s << "'";
    return 0.0f;
  }
  const double d = j.get<double>();
  EXPECT_EQ(double(float(d)), d) << "the golden file holds a value that is not a float32";
  return float(d);
}

std::vector<float> golden_floats(const json& j) {
  std::vector<float> v;
  for (const auto& x : j) v.push_back(golden_float(x));
  return v;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || bits(a) == bits(b); }

}  // namespace

// Replays each trajectory of golden/amp/grad_scaler.json: per step the loss
// sum(w * cw) + sum(b * cb) + sum(h * ch) is scaled, backpropagated, stepped and updated as
// torch did. Compared exactly: the scale (bits), the skip flag, the growth tracker, the first
// overflowing parameter, the unscaled gradients (bits; NaN = NaN). Parameters: bit for bit under
// SGD (lr 0.125, momentum 0.5: powers of two, so every product is exact and a fused
// multiply-add rounds like the separate operations); under AdamW within kAdamUlps, because
// AdamW rounds several times per element and torch's CPU kernels and reckon's loops contract
// different operations into fused multiply-adds (observed with torch 2.15 and GCC 12: at most 2 ulp after 28 steps).
TEST(GradScaler, MatchesPyTorchTrajectories) {
  constexpr int64_t kAdamUlps = 4;
  std::ifstream f(std::string(RECKON_SOURCE_DIR) + "/golden/amp/grad_scaler.json");
  ASSERT_TRUE(f.good()) << "golden/amp/grad_scaler.json missing: run python3 scripts/make_amp_golden.py";
  const json doc = json::parse(f);
  ASSERT_EQ(doc.at("format"), "reckon-golden-amp");
  ASSERT_EQ(doc.at("version"), 1);
  std::vector<std::string> names;
  for (const auto& p : doc.at("params")) names.push_back(p.at(0).get<std::string>());
  ASSERT_EQ(names, (std::vector<std::string>{"w", "b", "h"}));
  ASSERT_EQ(doc.at("trajectories").size(), 3u);

  bool saw_warning = false, saw_odd_scale = false;
  for (const auto& t : doc.at("trajectories")) {
    const std::string tname = t.at("name");
    SCOPED_TRACE(tname);
    std::vector<Tensor> ps;
    for (const auto& n : names) ps.push_back(make_param(golden_floats(t.at("init").at(n)), n));
    const json& o = t.at("optimizer");
    std::unique_ptr<optim::Optimizer> opt;
    const bool adam = o.at("type") == "adamw";
    if (adam)
      opt = std::make_unique<optim::AdamW>(
          ps, optim::AdamWOptions{.lr = o.at("lr").get<double>(), .weight_decay = o.at("weight_decay").get<double>()});
    else
      opt = std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = o.at("lr").get<double>(), .momentum = o.at("momentum").get<double>()});
    const json& so = t.at("scaler");
    optim::GradScaler scaler({.init_scale = so.at("init_scale").get<double>(),
                              .growth_factor = so.at("growth_factor").get<double>(),
                              .backoff_factor = so.at("backoff_factor").get<double>(),
                              .growth_interval = so.at("growth_interval").get<int64_t>()});
    int64_t skipped = 0, max_ulps = 0;
    std::vector<float> history;
    int step_no = 0;
    for (const auto& st : t.at("steps")) {
      SCOPED_TRACE("step " + std::to_string(step_no++) + " (" + st.at("events").get<std::string>() + ")");
      ASSERT_EQ(scaler.get_scale(), golden_float(st.at("scale_used")));
      opt->zero_grad();
      Tensor loss;
      for (size_t i = 0; i < ps.size(); ++i) {
        Tensor c = Tensor::from_floats(golden_floats(st.at("coef").at(names[i])), ps[i].shape());
        Tensor term = sum(mul(ps[i], c));
        loss = loss.defined() ? add(loss, term) : term;
      }
      scaler.scale(loss).backward();
      const bool ran = scaler.step(*opt);
      EXPECT_EQ(!ran, st.at("skipped").get<bool>());
      EXPECT_EQ(scaler.overflow_param(), st.at("overflow_param").get<std::string>());
      scaler.update();
      const float want = golden_float(st.at("scale"));
      EXPECT_EQ(bits(scaler.get_scale()), bits(want)) << scaler.get_scale() << " vs torch " << want;
      EXPECT_EQ(scaler.growth_tracker(), st.at("growth_tracker").get<int>());
      // The warning: exactly after an overflow that takes the scale below 1.
      const bool warn = !ran && want < 1.0f;
      EXPECT_EQ(!scaler.warning().empty(), warn) << scaler.warning();
      if (warn) {
        saw_warning = true;
        EXPECT_NE(scaler.warning().find("'" + st.at("overflow_param").get<std::string>() + "'"), std::string::npos)
            << scaler.warning();
      }
      saw_odd_scale = saw_odd_scale || want != std::ldexp(1.0f, std::ilogb(want));
      skipped += !ran;
      history.push_back(want);
      for (size_t i = 0; i < ps.size(); ++i) {
        const auto g = ps[i].grad().to_vector();
        const auto gw = golden_floats(st.at("grad").at(names[i]));
        const auto p = ps[i].to_vector();
        const auto pw = golden_floats(st.at("params").at(names[i]));
        ASSERT_EQ(g.size(), gw.size());
        ASSERT_EQ(p.size(), pw.size());
        for (size_t k = 0; k < g.size(); ++k)
          EXPECT_TRUE(same_float(float(g[k]), gw[k])) << names[i] << ".grad[" << k << "] " << g[k] << " vs " << gw[k];
        for (size_t k = 0; k < p.size(); ++k) {
          if (adam) {
            const int64_t d = ulps(float(p[k]), pw[k]);
            max_ulps = std::max(max_ulps, d);
            EXPECT_LE(d, kAdamUlps) << names[i] << "[" << k << "] " << p[k] << " vs " << pw[k];
          } else {
            EXPECT_TRUE(same_float(float(p[k]), pw[k])) << names[i] << "[" << k << "] " << p[k] << " vs " << pw[k];
          }
        }
      }
    }
    if (adam) std::printf("[ info ] %s: parameters within %lld ulp of torch\n", tname.c_str(), (long long)max_ulps);
    EXPECT_EQ(scaler.skipped_steps(), skipped);
    EXPECT_EQ(scaler.scale_history(), history);
    const json& sd = t.at("state_dict");
    nn::StateDict mine = scaler.state_dict();
    EXPECT_EQ(mine.at("scale").item(), sd.at("scale").get<double>());
    EXPECT_EQ(mine.at("growth_factor").item(), sd.at("growth_factor").get<double>());
    EXPECT_EQ(mine.at("backoff_factor").item(), sd.at("backoff_factor").get<double>());
    EXPECT_EQ(mine.at("growth_interval").item(), sd.at("growth_interval").get<double>());
    EXPECT_EQ(mine.at("_growth_tracker").item(), sd.at("_growth_tracker").get<double>());
  }
  EXPECT_TRUE(saw_warning) << "no trajectory took the scale below 1";
  EXPECT_TRUE(saw_odd_scale) << "no trajectory reached a scale that is not a power of two";
}

// ---------------------------------------------------------------- the rest of the contract

TEST(GradScaler, WarnsWhenOverflowPushesTheScaleBelowOne) {
  Tensor p = make_param({1.0f}, "classifier.1.weight");
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler({.init_scale = 2.0});
  auto overflow_step = [&] {
    set_grads({p}, {{kNaN}});
    EXPECT_FALSE(scaler.step(opt));
    scaler.update();
  };
  overflow_step();  // 2 -> 1: not below 1
  EXPECT_EQ(scaler.get_scale(), 1.0f);
  EXPECT_EQ(scaler.warning(), "");
  overflow_step();  // 1 -> 0.5
  EXPECT_EQ(scaler.get_scale(), 0.5f);
  EXPECT_NE(scaler.warning().find("'classifier.1.weight'"), std::string::npos) << scaler.warning();
  EXPECT_NE(scaler.warning().find("0.5"), std::string::npos) << scaler.warning();
  set_grads({p}, {{1.0f}});
  EXPECT_TRUE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.warning(), "");
  EXPECT_EQ(scaler.skipped_steps(), 2);
  EXPECT_EQ(scaler.scale_history(), (std::vector<float>{1.0f, 0.5f, 0.5f}));
}

TEST(GradScaler, NamesUnnamedParametersByIndex) {
  Tensor a = Tensor::from_floats({1.0f}, {1}), b = Tensor::from_floats({1.0f}, {1});
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  optim::SGD opt({a, b}, {.lr = 0.0});
  optim::GradScaler scaler;
  set_grads({a, b}, {{1.0f}, {kInf}});
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(scaler.overflow_param(), "parameter 1");
}

TEST(GradScaler, DisabledIsAPassThrough) {
  Tensor p = make_param({1.0f, 2.0f}, "p");
  optim::SGD opt({p}, {.lr = 1.0});
  optim::GradScaler scaler({.enabled = false});
  EXPECT_FALSE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 1.0f);
  Tensor loss = sum(mul(p, p));
  EXPECT_TRUE(scaler.scale(loss).same(loss));
  set_grads({p}, {{4.0f, kInf}});
  scaler.unscale_(opt);
  scaler.unscale_(opt);  // no "already called" when disabled
  EXPECT_EQ(p.grad().to_vector()[0], 4.0);
  EXPECT_TRUE(scaler.step(opt));  // steps even with an inf gradient
  EXPECT_EQ(p.to_vector()[0], -3.0);
  EXPECT_TRUE(std::isinf(p.to_vector()[1]));
  EXPECT_TRUE(scaler.step(opt));  // twice: still no error
  scaler.update();
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 1.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_TRUE(scaler.scale_history().empty());
  EXPECT_TRUE(scaler.state_dict().empty());
  nn::StateDict junk;
  junk.insert("nonsense", Tensor::zeros({3}));
  EXPECT_NO_THROW(scaler.load_state_dict(junk));
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(GradScaler, MisuseThrowsNamingTheCall) {
  Tensor p = make_param({1.0f}, "p");
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler;
  EXPECT_NE(error_of([&] { scaler.update(); }).find("no inf checks were recorded"), std::string::npos);
  // No gradient at all: torch's "No inf checks were recorded for this optimizer."
  EXPECT_NE(error_of([&] { scaler.step(opt); }).find("no inf checks were recorded for this optimizer"),
            std::string::npos);
  scaler.update(65536.0);  // forget that step (torch's update(new_scale) needs no check)

  set_grads({p}, {{65536.0f}});
  scaler.unscale_(opt);
  EXPECT_EQ(p.grad().to_vector()[0], 1.0);
  EXPECT_NE(error_of([&] { scaler.unscale_(opt); })
                .find("unscale_() has already been called on this optimizer since the last update()"),
            std::string::npos);
  EXPECT_EQ(p.grad().to_vector()[0], 1.0) << "a refused unscale_ must not touch the gradient";
  EXPECT_TRUE(scaler.step(opt));  // does not unscale again
  EXPECT_EQ(p.grad().to_vector()[0], 1.0);
  EXPECT_NE(error_of([&] { scaler.unscale_(opt); }).find("unscale_() is being called after step()"),
            std::string::npos);
  EXPECT_NE(error_of([&] { scaler.step(opt); }).find("step() has already been called since the last update()"),
            std::string::npos);
  scaler.update();
  set_grads({p}, {{65536.0f}});
  EXPECT_NO_THROW(scaler.unscale_(opt));  // a new step

  EXPECT_NE(error_of([] { optim::GradScaler s({.growth_factor = 1.0}); }).find("growth_factor"), std::string::npos);
  EXPECT_NE(error_of([] { optim::GradScaler s({.backoff_factor = 1.0}); }).find("backoff_factor"), std::string::npos);
  EXPECT_NE(error_of([] { optim::GradScaler s({.growth_interval = 0}); }).find("growth_interval"), std::string::npos);
  EXPECT_NE(error_of([] { optim::GradScaler s({.init_scale = 1e39}); }).find("scale"), std::string::npos);

  Tensor q = make_param({1.0f}, "q");
  optim::SGD opt_q({q}, {.lr = 0.0});
  q.set_grad(Tensor::from_vector({1.0}, {1}, DType::f64));
  EXPECT_NE(error_of([&] { scaler.unscale_(opt_q); }).find("('q') has a f64 gradient"), std::string::npos)
      << error_of([&] { scaler.unscale_(opt_q); });
}

TEST(GradScaler, UpdateWithANewScale) {
  Tensor p = make_param({1.0f}, "p");
  optim::SGD opt({p}, {.lr = 0.0});
  optim::GradScaler scaler({.growth_interval = 5});
  set_grads({p}, {{1.0f}});
  scaler.step(opt);
  scaler.update();
  scaler.update(3.0);
  EXPECT_EQ(scaler.get_scale(), 3.0f);
  EXPECT_EQ(scaler.growth_tracker(), 1);  // untouched, as torch
  EXPECT_EQ(scaler.scale_history(), (std::vector<float>{65536.0f, 3.0f}));
}

TEST(GradScaler, StateDictRoundTrip) {
  auto run = [](optim::GradScaler& scaler, const std::vector<float>& gs) {
    Tensor p = make_param({1.0f}, "p");
    optim::SGD opt({p}, {.lr = 0.0});
    for (float g : gs) {
      set_grads({p}, {{g}});
      scaler.step(opt);
      scaler.update();
    }
  };
  optim::GradScaler a({.init_scale = 1024.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 5});
  run(a, {1.0f, kInf, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f});  // 1024 -> 256 -> 768, tracker 2
  ASSERT_EQ(a.get_scale(), 768.0f);
  ASSERT_EQ(a.growth_tracker(), 2);
  const nn::StateDict sd = a.state_dict();
  EXPECT_EQ(sd.keys(),
            (std::vector<std::string>{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}));
  EXPECT_EQ(sd.at("scale").dtype(), DType::f32);
  EXPECT_EQ(sd.at("growth_factor").dtype(), DType::f64);
  EXPECT_EQ(sd.at("growth_interval").dtype(), DType::i64);
  EXPECT_EQ(sd.at("_growth_tracker").dtype(), DType::i32);
  EXPECT_EQ(sd.at("scale").item(), 768.0);

  optim::GradScaler b;  // defaults, replaced by the dict
  b.load_state_dict(sd);
  EXPECT_EQ(b.get_scale(), 768.0f);
  EXPECT_EQ(b.growth_tracker(), 2);
  EXPECT_EQ(b.options().growth_factor, 3.0);
  EXPECT_EQ(b.options().backoff_factor, 0.25);
  EXPECT_EQ(b.options().growth_interval, 5);
  const std::vector<float> next = {1.0f, 1.0f, 1.0f, kNaN, 1.0f};
  run(a, next);
  run(b, next);
  EXPECT_EQ(b.get_scale(), a.get_scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.scale_history(), std::vector<float>(a.scale_history().end() - 5, a.scale_history().end()));

  // Bad dicts: the error names the key, and nothing changes.
  auto without = [&](const std::string& key) {
    nn::StateDict d;
    for (const auto& [k, t] : sd)
      if (k != key) d.insert(k, t);
    return d;
  };
  auto with = [&](const std::string& key, Tensor t) {
    nn::StateDict d = sd;
    d.set(key, t);
    return d;
  };
  optim::GradScaler c;
  EXPECT_NE(error_of([&] { c.load_state_dict(without("growth_interval")); }).find("'growth_interval'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.load_state_dict(with("extra", Tensor::zeros({}))); }).find("'extra'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.load_state_dict(with("scale", Tensor::zeros({2}))); }).find("'scale'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.load_state_dict(with("growth_interval", Tensor::full({}, 2.5, DType::f64))); })
                .find("'growth_interval'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.load_state_dict(with("_growth_tracker", Tensor::full({}, 5, DType::i32))); })
                .find("'_growth_tracker'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.load_state_dict(with("backoff_factor", Tensor::full({}, 1.5, DType::f64))); })
                .find("backoff_factor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { c.load_state_dict(nn::StateDict{}); }).find("empty"), std::string::npos);
  EXPECT_EQ(c.get_scale(), 65536.0f);
  EXPECT_EQ(c.options().growth_interval, 2000);
}

TEST(GradScaler, WorksOnTheMetaDevice) {
  // The ledger runs a scaled training step on meta: no data, so no check and no overflow.
  Tensor w = make_param({0, 0, 0, 0}, "fc.weight", Device::meta);
  Tensor x = Tensor::zeros({4}, DType::f32, Device::meta);
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  optim::GradScaler scaler;
  Tensor loss = sum(mul(w, x));
  Tensor scaled = scaler.scale(loss);
  EXPECT_TRUE(scaled.is_meta());
  EXPECT_EQ(scaled.shape(), loss.shape());
  EXPECT_FALSE(scaled.same(loss));
  scaled.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(w.grad().is_meta());
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(scaler.overflow_param(), "");
  EXPECT_EQ(opt.state_dict().keys(), (std::vector<std::string>{"state.0.momentum_buffer"}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 65536.0f);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_EQ(scaler.skipped_steps(), 0);
}
