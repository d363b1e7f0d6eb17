// Training checkpoints: a round trip of model, optimizer (SGD momentum, Adam moments and step
// counts), progress, RNG state and config, bit for bit; a plain state dict read as weights
// only; and every way a checkpoint can be wrong (missing, truncated, corrupt, another model,
// another shape, missing or unexpected keys, another optimizer, bad metadata), each a one-line
// reckon::Error naming the file and the key, with the model left unchanged.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "reckon/io/checkpoint.h"
#include "reckon/io/safetensors.h"
#include "reckon/nn/models/registry.h"
#include "reckon/ops/functional.h"
#include "reckon/optim/optim.h"

using namespace reckon;
namespace fs = std::filesystem;

namespace {

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("reckon_ck_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_;
};

// One training step so that the optimizer has state.
void one_step(nn::Module& m, optim::Optimizer& opt, uint64_t seed) {
  Generator g(seed);
  Tensor x = Tensor::empty({4, 1, 28, 28});
  fill_normal_(x, 0, 1, g);
  Tensor y = Tensor::from_vector({0, 1, 2, 3}, {4}, DType::i64);
  opt.zero_grad();
  cross_entropy(m(x), y).backward();
  opt.step();
}

bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ca = contiguous(a), cb = contiguous(b);
  return std::memcmp(ca.raw_data(), cb.raw_data(), size_t(ca.nbytes())) == 0;
}

void expect_same_state(const nn::StateDict& a, const nn::StateDict& b) {
  ASSERT_EQ(a.keys(), b.keys());
  for (const auto& [k, t] : a) EXPECT_TRUE(same_bits(t, b.at(k))) << k;
}

// Expects f() to throw reckon::Error whose one-line message holds every needle.
template <class F>
void expect_error(F&& f, std::initializer_list<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
  }
}

io::CheckpointInfo info_for(const std::string& model, const std::string& optimizer) {
  io::CheckpointInfo info;
  info.model = model;
  info.optimizer = optimizer;
  info.progress = {.step = 1234, .epoch = 3, .batch_in_epoch = 17, .rng_state = {1, 2, 0xffffffffffffffffull, 42}};
  info.config_json = R"({"lr": 0.05, "batch": 64, "normalize_mean": [0.25]})";
  info.extra["train_state"] = R"({"x": 1})";
  return info;
}

}  // namespace

TEST_F(Checkpoint, RoundTripSgdBitExact) {
  manual_seed(1);
  auto m = nn::make_model("tinycnn");  // BatchNorm buffers, including i64 num_batches_tracked
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
  one_step(*m, opt, 7);
  one_step(*m, opt, 8);
  const std::string p = path("ck.safetensors");
  io::save_checkpoint(p, *m, &opt, info_for("tinycnn", "sgd"));

  io::Checkpoint ck = io::read_checkpoint(p);
  EXPECT_TRUE(ck.has_training_state);
  EXPECT_EQ(ck.info.model, "tinycnn");
  EXPECT_EQ(ck.info.optimizer, "sgd");
  EXPECT_EQ(ck.info.progress.step, 1234);
  EXPECT_EQ(ck.info.progress.epoch, 3);
  EXPECT_EQ(ck.info.progress.batch_in_epoch, 17);
  EXPECT_EQ(ck.info.progress.rng_state, (std::array<uint64_t, 4>{1, 2, 0xffffffffffffffffull, 42}));
  EXPECT_EQ(nlohmann::json::parse(ck.info.config_json)["lr"], 0.05);
  EXPECT_EQ(ck.info.extra.at("train_state"), R"({"x": 1})");
  EXPECT_TRUE(ck.model_state.contains("features.1.num_batches_tracked"));
  EXPECT_TRUE(ck.optimizer_state.contains("state.0.momentum_buffer"));

  manual_seed(99);  // other initial weights
  auto m2 = nn::make_model("tinycnn");
  optim::SGD opt2(m2->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
  io::load_model_state(ck, *m2, "tinycnn");
  io::load_optimizer_state(ck, opt2, "sgd");
  expect_same_state(m->state_dict(), m2->state_dict());
  expect_same_state(opt.state_dict(), opt2.state_dict());
  // And the next step is identical.
  one_step(*m, opt, 9);
  one_step(*m2, opt2, 9);
  expect_same_state(m->state_dict(), m2->state_dict());
}

TEST_F(Checkpoint, RoundTripAdamStepCount) {
  manual_seed(2);
  auto m = nn::make_model("lenet5");
  optim::Adam opt(m->parameters(), {.lr = 1e-3});
  for (int i = 0; i < 3; ++i) one_step(*m, opt, uint64_t(i));
  const std::string p = path("adam.safetensors");
  io::save_checkpoint(p, *m, &opt, info_for("lenet5", "adam"));
  auto ck = io::read_checkpoint(p);
  EXPECT_EQ(ck.optimizer_state.at("state.0.step").item(), 3.0);
  auto m2 = nn::make_model("lenet5");
  optim::Adam opt2(m2->parameters(), {.lr = 1e-3});
  io::load_model_state(ck, *m2, "lenet5");
  io::load_optimizer_state(ck, opt2, "adam");
  one_step(*m, opt, 10);
  one_step(*m2, opt2, 10);
  expect_same_state(m->state_dict(), m2->state_dict());
  expect_error([&] { io::load_optimizer_state(ck, opt2, "sgd"); }, {p, "'adam'", "'sgd'"});
}

// The file layout the header documents, which is what Python relies on.
TEST_F(Checkpoint, FileLayoutIsPlainSafetensors) {
  manual_seed(3);
  auto m = nn::make_model("lenet5");
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  one_step(*m, opt, 1);
  const std::string p = path("ck.safetensors");
  io::save_checkpoint(p, *m, &opt, info_for("lenet5", "sgd"));
  SafetensorsFile f = load_safetensors(p);
  for (const auto& [k, t] : m->state_dict()) EXPECT_TRUE(f.tensors.count(k)) << k;
  EXPECT_TRUE(f.tensors.count("optimizer.state.0.momentum_buffer"));
  EXPECT_EQ(f.tensors.size(), m->state_dict().size() + opt.state_dict().size());
  EXPECT_EQ(f.metadata.at("format"), "reckon.checkpoint");
  EXPECT_EQ(f.metadata.at("format_version"), "1");
  EXPECT_EQ(f.metadata.at("model"), "lenet5");
  EXPECT_EQ(f.metadata.at("step"), "1234");
  EXPECT_EQ(f.metadata.at("rng_state"), "0000000000000001,0000000000000002,ffffffffffffffff,000000000000002a");
  EXPECT_TRUE(nlohmann::json::parse(f.metadata.at("config")).is_object());
}

TEST_F(Checkpoint, PlainStateDictIsWeightsOnly) {
  manual_seed(4);
  auto m = nn::make_model("lenet5");
  std::vector<std::pair<std::string, Tensor>> tensors = m->state_dict().items();
  const std::string p = path("plain.safetensors");
  save_safetensors(p, tensors);
  auto ck = io::read_checkpoint(p);
  EXPECT_FALSE(ck.has_training_state);
  auto m2 = nn::make_model("lenet5");
  io::load_model_state(ck, *m2, "lenet5");
  expect_same_state(m->state_dict(), m2->state_dict());
  optim::SGD opt(m2->parameters(), {.lr = 0.1});
  expect_error([&] { io::load_optimizer_state(ck, opt, "sgd"); }, {p, "only weights"});
}

TEST_F(Checkpoint, BadFilesAreOneLineErrors) {
  manual_seed(5);
  auto m = nn::make_model("lenet5");
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  one_step(*m, opt, 1);
  const std::string good = path("good.safetensors");
  io::save_checkpoint(good, *m, &opt, info_for("lenet5", "sgd"));
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  // Missing.
  expect_error([&] { io::read_checkpoint(path("nope.safetensors")); }, {path("nope.safetensors")});
  // Truncated (in the data, and in the header).
  for (size_t keep : {bytes.size() - 100, size_t(20), size_t(3)}) {
    const std::string p = path("trunc.safetensors");
    std::ofstream(p, std::ios::binary).write(bytes.data(), std::streamsize(keep));
    expect_error([&] { io::read_checkpoint(p); }, {p});
  }
  // Garbage.
  {
    const std::string p = path("garbage.safetensors");
    std::ofstream(p, std::ios::binary) << "this is not a safetensors file at all, just text";
    expect_error([&] { io::read_checkpoint(p); }, {p});
  }
  // A corrupt JSON header of the right length.
  {
    std::string bad = bytes;
    bad[8] = '[';
    const std::string p = path("badjson.safetensors");
    std::ofstream(p, std::ios::binary).write(bad.data(), std::streamsize(bad.size()));
    expect_error([&] { io::read_checkpoint(p); }, {p});
  }
}

TEST_F(Checkpoint, MismatchesNameFileAndKey) {
  manual_seed(6);
  auto m = nn::make_model("lenet5");
  optim::SGD opt(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  one_step(*m, opt, 1);
  const std::string p = path("ck.safetensors");
  io::save_checkpoint(p, *m, &opt, info_for("lenet5", "sgd"));
  auto ck = io::read_checkpoint(p);

  // Another model.
  auto tiny = nn::make_model("tinycnn");
  expect_error([&] { io::load_model_state(ck, *tiny, "tinycnn"); }, {p, "'lenet5'", "'tinycnn'"});

  // Another shape: lenet5 with 5 classes.
  auto m5 = nn::make_model("lenet5", {.num_classes = 5});
  nn::StateDict before = m5->state_dict();
  {
    nn::StateDict snapshot;
    for (const auto& [k, t] : before) {
      Tensor c = Tensor::empty(t.shape(), t.dtype());
      copy_(c, t);
      snapshot.insert(k, c);
    }
    expect_error([&] { io::load_model_state(ck, *m5, "lenet5"); },
                 {p, "'classifier.5.weight'", "[10, 84]", "[5, 84]"});
    expect_same_state(snapshot, m5->state_dict());  // nothing was copied
  }

  // Missing and unexpected keys (a state dict written with one key renamed).
  {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [k, t] : m->state_dict()) tensors.emplace_back(k == "features.3.bias" ? "features.3.bias_x" : k, t);
    const std::string q = path("renamed.safetensors");
    save_safetensors(q, tensors);
    auto ck2 = io::read_checkpoint(q);
    auto m2 = nn::make_model("lenet5");
    expect_error([&] { io::load_model_state(ck2, *m2, "lenet5"); }, {q, "missing", "'features.3.bias'"});
    tensors.emplace_back("extra.weight", Tensor::zeros({2}));
    tensors.erase(tensors.begin() + 3);  // drop features.3.bias_x: only the unexpected one is left
    save_safetensors(q, tensors);
    auto ck3 = io::read_checkpoint(q);
    expect_error([&] { io::load_model_state(ck3, *m2, "lenet5"); }, {q});
  }

  // Optimizer state of a parameter that does not exist / of the wrong shape.
  {
    std::vector<std::pair<std::string, Tensor>> tensors = m->state_dict().items();
    tensors.emplace_back("optimizer.state.99.momentum_buffer", Tensor::zeros({3}));
    std::map<std::string, std::string> meta;
    SafetensorsFile f = load_safetensors(p);
    meta = f.metadata;
    const std::string q = path("badopt.safetensors");
    save_safetensors(q, tensors, meta);
    auto ck4 = io::read_checkpoint(q);
    auto m2 = nn::make_model("lenet5");
    optim::SGD opt2(m2->parameters(), {.lr = 0.1, .momentum = 0.9});
    expect_error([&] { io::load_optimizer_state(ck4, opt2, "sgd"); }, {q, "state.99.momentum_buffer"});
  }
}

TEST_F(Checkpoint, BadMetadataNamesTheKey) {
  manual_seed(7);
  auto m = nn::make_model("lenet5");
  std::vector<std::pair<std::string, Tensor>> tensors = m->state_dict().items();
  auto meta_of = [&] {
    std::map<std::string, std::string> meta{{"format", "reckon.checkpoint"}, {"format_version", "1"},
                                            {"model", "lenet5"},            {"optimizer", "sgd"},
                                            {"step", "5"},                  {"epoch", "0"},
                                            {"batch_in_epoch", "5"},        {"config", "{}"},
                                            {"rng_state", io::rng_state_str({1, 2, 3, 4})}};
    return meta;
  };
  const std::string p = path("meta.safetensors");
  save_safetensors(p, tensors, meta_of());
  EXPECT_NO_THROW(io::read_checkpoint(p));
  struct Case {
    const char* key;
    const char* value;
    const char* needle;
  } cases[] = {{"format", "something.else", "format"},     {"format_version", "2", "format_version"},
               {"step", "12x", "'step'"},                   {"epoch", "-1", "'epoch'"},
               {"rng_state", "1,2,3", "rng_state"},         {"config", "{not json", "'config'"},
               {"config", "[1, 2]", "'config'"},            {"batch_in_epoch", "", "'batch_in_epoch'"}};
  for (const auto& c : cases) {
    SCOPED_TRACE(fmt::format("{} = {}", c.key, c.value));
    auto meta = meta_of();
    meta[c.key] = c.value;
    save_safetensors(p, tensors, meta);
    expect_error([&] { io::read_checkpoint(p); }, {p, c.needle});
  }
  auto meta = meta_of();
  meta.erase("step");
  save_safetensors(p, tensors, meta);
  expect_error([&] { io::read_checkpoint(p); }, {p, "'step'"});
}

TEST_F(Checkpoint, SaveIsAtomicOverAnOldOne) {
  manual_seed(8);
  auto m = nn::make_model("lenet5");
  const std::string p = path("last.safetensors");
  io::save_checkpoint(p, *m, nullptr, info_for("lenet5", ""));
  // A save that fails (bad config) leaves the old file loadable and no temporary behind.
  auto info = info_for("lenet5", "");
  info.config_json = "{oops";
  EXPECT_THROW(io::save_checkpoint(p, *m, nullptr, info), Error);
  EXPECT_NO_THROW(io::read_checkpoint(p));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1);
  EXPECT_EQ(io::parse_rng_state(io::rng_state_str({5, 6, 7, 8})), (std::array<uint64_t, 4>{5, 6, 7, 8}));
}
