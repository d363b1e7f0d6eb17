// Training end to end, through the `reckon` binary where the user would use it and through
// train::train() where the numbers are compared:
//   - the recipe (the TrainConfig / `reckon train` defaults): lenet5 on Fashion-MNIST reaches
//     at least 88% test accuracy in 5 epochs, and `reckon eval` on its checkpoint agrees;
//   - the same short run with one thread twice gives the same losses, bit for bit;
//   - a run stopped mid-epoch and resumed gives the identical loss curve, weights, optimizer
//     state and metrics rows as one that never stopped, also when the process "died" after
//     writing rows past its last checkpoint;
//   - every bad input of the issue (unknown model, a model that does not fit the images, a
//     missing / truncated / corrupt / wrong-magic dataset file, a label out of range, a
//     missing / truncated / corrupt / mismatched checkpoint, bad option values) exits with
//     status 1 and one line on stderr naming the file or argument.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "reckon/data/dataset.h"
#include "reckon/io/checkpoint.h"
#include "reckon/io/npy.h"
#include "reckon/io/safetensors.h"
#include "reckon/ledger/ledger.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/functional.h"
#include "reckon/ops/node.h"
#include "reckon/train/eval.h"
#include "reckon/train/trainer.h"
#include "test_util.h"

using namespace reckon;
namespace fs = std::filesystem;

namespace {

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

using test_util::read_file;
using test_util::write_file;
fs::path test_dir(const std::string& name) { return test_util::fresh_dir("train", name); }

// ---- running the binary (test_util.h) ----
using test_util::CliResult;
using test_util::reckon_binary;
using test_util::run_cli;
using test_util::shell_quote;

// The command failed cleanly: status 1, exactly one line on stderr holding every needle.
void expect_one_line_error(const std::vector<std::string>& args, const fs::path& dir,
                           std::initializer_list<std::string> needles) {
  SCOPED_TRACE("reckon " + [&] {
    std::string s;
    for (const auto& a : args) s += a + " ";
    return s;
  }());
  CliResult r = run_cli(args, dir);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_FALSE(r.err.empty());
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("reckon: ", 0), 0u) << r.err;
  for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << "'" << n << "' not in: " << r.err;
}

// ---- IDX files ----

using test_util::idx_images;
using test_util::idx_labels;
using test_util::write_mnist_dir;

// ---- metrics files ----

using test_util::expect_same_tensors;
using test_util::metrics_numbers;
using test_util::same_bits;

// The accuracy column of a run's metrics.jsonl rows of one kind ("test", "val"), in order.
std::vector<double> metrics_accuracies(const fs::path& jsonl, const std::string& kind) {
  std::vector<double> v;
  std::stringstream in(read_file(jsonl));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == kind) v.push_back(j["accuracy"].get<double>());
  }
  return v;
}

void expect_same_losses(const std::vector<float>& a, size_t from, const std::vector<float>& b) {
  ASSERT_LE(from + b.size(), a.size());
  for (size_t i = 0; i < b.size(); ++i)
    ASSERT_EQ(std::memcmp(&a[from + i], &b[i], sizeof(float)), 0)
        << "step " << from + i + 1 << ": " << a[from + i] << " vs " << b[i];
}

}  // namespace

// The recipe, as the README runs it: `reckon train lenet5 --data fashion-mnist --epochs 5`, here on one thread,
// with every other setting at its default. Run once; several things are checked on it.
TEST(TrainRecipe, LeNet5FashionMnistReaches88PercentIn5Epochs) {
  ASSERT_TRUE(fs::exists(fs::path(kFashionDir) / "train-images-idx3-ubyte.gz"))
      << "Fashion-MNIST is missing: apt-get install dataset-fashion-mnist (make test does it)";
  ASSERT_TRUE(fs::exists(reckon_binary())) << "build the reckon binary next to reckon_tests";
  fs::path d = test_dir("recipe");
  fs::path out = d / "run";
  // One thread: the run is bit-reproducible, and it keeps its pace when ctest runs other tests
  // beside it on a 2-core machine (OpenMP threads on busy cores wait for each other).
  CliResult r = run_cli(
      {"train", "lenet5", "--data", "fashion-mnist", "--epochs", "5", "--threads", "1", "--out", out.string()}, d);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::cout << r.err << r.out;
  std::smatch m;
  // The results on stdout, three lines (the accuracy, the ledger's prediction against what the run
  // measured, where the files are); the log on stderr.
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(^final test accuracy ([0-9.]+)%)"))) << r.out;
  double acc = std::stod(m[1]) / 100;
  EXPECT_GE(acc, 0.88) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3) << r.out;
  EXPECT_NE(r.out.find("predicted against measured: step "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find((out / "last.safetensors").string()), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("61706 parameters"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("M forward MACs per image"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("epoch 5/5  train loss"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("sgd lr 0.05 (momentum 0.9, weight decay 0.0005)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(lr 0.05 and weight decay 0.0005 are sgd's defaults"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\r'), 0) << "no progress bar when stderr is not a terminal";

  // The metrics files: 5 test rows, the last one the printed accuracy.
  std::string jl = read_file(out / "metrics.jsonl");
  std::stringstream lines(jl);
  std::string line;
  int tests = 0;
  double last_test_acc = -1;
  int64_t last_step = 0;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["kind"] == "test") {
      ++tests;
      last_test_acc = j["accuracy"].get<double>();
    }
    last_step = j["step"].get<int64_t>();
  }
  EXPECT_EQ(tests, 5);
  EXPECT_EQ(last_step, 5 * 938);
  EXPECT_NEAR(last_test_acc, acc, 0.00006);

  // The checkpoint: at the end of the run, and `reckon eval` on it gives the same figures.
  io::Checkpoint ck = io::read_checkpoint((out / "last.safetensors").string());
  EXPECT_EQ(ck.info.progress.epoch, 5);
  EXPECT_EQ(ck.info.progress.step, 5 * 938);
  CliResult ev = run_cli({"eval", "lenet5", "--checkpoint", (out / "last.safetensors").string(), "--data",
                          "fashion-mnist", "--json"},
                         d);
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  auto j = nlohmann::json::parse(ev.out);
  EXPECT_DOUBLE_EQ(j["accuracy"].get<double>(), last_test_acc);
  EXPECT_EQ(j["samples"], 10000);
  ASSERT_EQ(j["confusion"].size(), 10u);
  int64_t diag = 0, total = 0;
  for (size_t t = 0; t < 10; ++t)
    for (size_t p = 0; p < 10; ++p) {
      total += j["confusion"][t][p].get<int64_t>();
      if (t == p) diag += j["confusion"][t][p].get<int64_t>();
    }
  EXPECT_EQ(total, 10000);
  EXPECT_EQ(double(diag) / 10000, j["accuracy"].get<double>());
  EXPECT_EQ(j["classes"][0], "T-shirt/top");
  // The human-readable form names the classes.
  CliResult evt = run_cli({"eval", "lenet5", "--checkpoint", (out / "last.safetensors").string()}, d);
  ASSERT_EQ(evt.exit_code, 0) << evt.err;
  EXPECT_NE(evt.out.find("top-1 accuracy"), std::string::npos);
  EXPECT_NE(evt.out.find("Ankle boot"), std::string::npos) << evt.out;
  EXPECT_NE(evt.out.find("normalize: the checkpoint's: mean [0.28"), std::string::npos) << evt.out;
  fs::remove_all(d);
}

TEST(Trainer, OneThreadTwiceSameLosses) {
  fs::path d = test_dir("twice");
  std::vector<float> runs[2];
  for (int i = 0; i < 2; ++i) {
    train::TrainConfig c;  // the recipe, cut short
    c.threads = 1;
    c.stop_after = 120;
    c.out = (d / ("run" + std::to_string(i))).string();
    c.verbose = 0;
    train::TrainResult r = train::train(c);
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.steps, 120);
    runs[i] = r.losses;
  }
  ASSERT_EQ(runs[0].size(), 120u);
  expect_same_losses(runs[0], 0, runs[1]);
  EXPECT_LT(runs[0].back(), runs[0].front());  // and it learns
  expect_same_tensors(d / "run0" / "last.safetensors", d / "run1" / "last.safetensors");
  fs::remove_all(d);
}

// The ledger's prediction before the first step draws no random number the run needs: with
// dropout (mobilenet_v2's classifier draws a seed per step) the losses and the generator's state
// at the end are the same with and without it.
TEST(Trainer, ThePredictionLeavesTheRunsRandomNumbersAlone) {
  fs::path d = test_dir("predict-rng");
  auto config = [&](const std::string& name, bool predict) {
    train::TrainConfig c;
    c.model = "mobilenet_v2";
    c.data = "synthetic:3x32x32:64:10";
    c.epochs = 1;
    c.batch = 16;
    c.threads = 1;
    c.no_predict = !predict;
    c.out = (d / name).string();
    c.verbose = 0;
    return c;
  };
  const train::TrainResult with = train::train(config("with", true)), without = train::train(config("without", false));
  EXPECT_GT(with.predicted_process_peak_bytes, 0);
  EXPECT_EQ(without.predicted_process_peak_bytes, 0);
  ASSERT_EQ(with.losses.size(), 4u);
  EXPECT_EQ(with.losses, without.losses);
  EXPECT_EQ(with.rng_state, without.rng_state);
  fs::remove_all(d);
}

// tinycnn (BatchNorm buffers) with AdamW (step counts), augmentation and dropout-free layers,
// 10 batches an epoch, 3 epochs.
TEST(Trainer, ResumeMidEpochGivesTheIdenticalCurve) {
  fs::path d = test_dir("resume");
  auto config = [&](const std::string& name) {
    train::TrainConfig c;
    c.model = "tinycnn";
    c.data = "synthetic:1x28x28:640:10";
    c.epochs = 3;
    c.batch = 64;
    c.optimizer = "adamw";
    c.lr = 3e-3;
    c.weight_decay = 0.01;
    c.warmup = 5;
    c.augment = "crop:2,flip";
    c.threads = 1;
    c.log_every = 1;
    c.checkpoint_every = 4;
    c.out = (d / name).string();
    c.verbose = 0;
    return c;
  };
  // A: never stopped.
  train::TrainResult a = train::train(config("a"));
  ASSERT_EQ(a.losses.size(), 30u);
  ASSERT_FALSE(a.stopped);

  // B: stopped mid-epoch 2 (step 14 = batch 4 of 10), then resumed.
  auto cb = config("b");
  cb.stop_after = 14;
  train::TrainResult b1 = train::train(cb);
  EXPECT_TRUE(b1.stopped);
  expect_same_losses(a.losses, 0, b1.losses);
  cb.stop_after = 0;
  cb.resume = true;
  cb.lr = 99;      // ignored on resume: the checkpoint's settings rule,
  cb.epochs = 7;   // the number of epochs (and so the schedule) too
  train::TrainResult b2 = train::train(cb);
  EXPECT_EQ(b2.first_step, 14);
  ASSERT_EQ(b2.losses.size(), 16u);
  expect_same_losses(a.losses, 14, b2.losses);
  EXPECT_EQ(b2.final_eval.accuracy, a.final_eval.accuracy);
  EXPECT_EQ(b2.rng_state, a.rng_state);
  expect_same_tensors(d / "a" / "last.safetensors", d / "b" / "last.safetensors");
  EXPECT_EQ(metrics_numbers(d / "a" / "metrics.csv"), metrics_numbers(d / "b" / "metrics.csv"));

  // C: stopped at the very end of epoch 1 (before its evaluation), went on to step 17 and
  // "died" there, leaving rows and events past the checkpoint of step 10 that is then put back.
  auto cc = config("c");
  cc.stop_after = 10;
  train::train(cc);
  fs::copy_file(d / "c" / "last.safetensors", d / "step10.safetensors");
  cc.resume = true;
  cc.stop_after = 17;
  train::train(cc);
  fs::copy_file(d / "step10.safetensors", d / "c" / "last.safetensors", fs::copy_options::overwrite_existing);
  cc.stop_after = 0;
  train::TrainResult c3 = train::train(cc);
  EXPECT_EQ(c3.first_step, 10);
  expect_same_losses(a.losses, 10, c3.losses);
  expect_same_tensors(d / "a" / "last.safetensors", d / "c" / "last.safetensors");
  EXPECT_EQ(metrics_numbers(d / "a" / "metrics.csv"), metrics_numbers(d / "c" / "metrics.csv"));
  // The jsonl file too: the same rows, one per line, no leftovers of the "dead" run.
  auto count_lines = [](const std::string& s) { return std::count(s.begin(), s.end(), '\n'); };
  EXPECT_EQ(count_lines(read_file(d / "a" / "metrics.jsonl")), count_lines(read_file(d / "c" / "metrics.jsonl")));
  int events = 0;
  for (const auto& e : fs::directory_iterator(d / "c"))
    events += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  EXPECT_EQ(events, 1);  // appended to, not a new file per resume

  // Resuming a finished run trains nothing and reports the final evaluation.
  train::TrainResult done = train::train(cc);
  EXPECT_TRUE(done.losses.empty());
  EXPECT_EQ(done.final_eval.accuracy, a.final_eval.accuracy);
  fs::remove_all(d);
}

// The process killed (SIGKILL) at whatever moment it is in, or interrupted (SIGINT: it stops
// at the next step and writes a checkpoint), leaves a loadable checkpoint from which --resume
// ends with the very weights of an uninterrupted run.
TEST(TrainCli, KilledOrInterruptedRunsResumeToTheSameWeights) {
  fs::path d = test_dir("kill");
  auto args = [&](const fs::path& out) {
    return std::vector<std::string>{"train", "tinycnn", "--data", "synthetic:1x28x28:640:10", "--epochs", "3",
                                    "--batch", "32", "--threads", "1", "--checkpoint-every", "1", "--out",
                                    out.string()};
  };
  CliResult full = run_cli(args(d / "full"), d);
  ASSERT_EQ(full.exit_code, 0) << full.err;

  for (int sig : {SIGKILL, SIGINT}) {
    SCOPED_TRACE(sig == SIGKILL ? "SIGKILL" : "SIGINT");
    fs::path out = d / (sig == SIGKILL ? "killed" : "interrupted");
    const fs::path ckpt = out / "last.safetensors";
    std::vector<std::string> a = args(out);
    a.insert(a.begin(), reckon_binary());
    std::vector<char*> argv;
    for (auto& s : a) argv.push_back(s.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      if (!std::freopen("/dev/null", "w", stdout)) ::_exit(126);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    // Wait for a checkpoint past step 5, then strike.
    int status = 0;
    bool exited = false;
    for (int i = 0; i < 6000 && !exited; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      if (::waitpid(pid, &status, WNOHANG) == pid) exited = true;
      try {
        if (fs::exists(ckpt) && io::read_checkpoint(ckpt.string()).info.progress.step >= 5) break;
      } catch (const Error&) {
        // never: the rename is atomic; the assertion below says so
        ADD_FAILURE() << "a checkpoint that does not load while the run writes it";
      }
    }
    ASSERT_FALSE(exited) << "the run ended before it could be interrupted";
    ::kill(pid, sig);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (sig == SIGKILL) {
      EXPECT_TRUE(WIFSIGNALED(status));
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status;
    }
    io::Checkpoint ck = io::read_checkpoint(ckpt.string());
    EXPECT_GE(ck.info.progress.step, 5);
    EXPECT_LT(ck.info.progress.step, 60);
    CliResult rest = run_cli({"train", "tinycnn", "--resume", "--threads", "1", "--out", out.string()}, d);
    ASSERT_EQ(rest.exit_code, 0) << rest.err;
    // The log only: no warning, nothing ignored.
    EXPECT_EQ(rest.err.find("warning"), std::string::npos) << rest.err;
    EXPECT_EQ(rest.err.find("reckon train:"), std::string::npos) << rest.err;
    EXPECT_EQ(rest.err.find("reckon:"), std::string::npos) << rest.err;
    expect_same_tensors(d / "full" / "last.safetensors", ckpt);
    EXPECT_EQ(metrics_numbers(d / "full" / "metrics.csv"), metrics_numbers(out / "metrics.csv"));
  }
  fs::remove_all(d);
}

TEST(Trainer, ScheduleAndConfigErrors) {
  fs::path d = test_dir("config");
  auto base = [&] {
    train::TrainConfig c;
    c.data = "synthetic:1x28x28:64";
    c.out = (d / "run").string();
    c.verbose = 0;
    return c;
  };
  auto expect_msg = [](const train::TrainConfig& c, const std::string& needle) {
    try {
      train::train(c);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    }
  };
  auto c = base();
  c.epochs = 0;
  expect_msg(c, "--epochs");
  c = base();
  c.lr = -1;
  expect_msg(c, "--lr");
  c = base();
  c.optimizer = "rmsprop";
  expect_msg(c, "--optimizer 'rmsprop'");
  c = base();
  c.schedule = "linear";
  expect_msg(c, "--schedule 'linear'");
  c = base();
  c.normalize = "0.5/0.5,0.5";
  expect_msg(c, "--normalize");
  c = base();
  c.augment = "rotate";
  expect_msg(c, "--augment");
  c = base();
  c.model = "lenet5";
  c.data = "synthetic:3x32x32:64";  // 16 x 6 x 6 features reach a Linear made for 16 x 5 x 5
  expect_msg(c, "model lenet5 does not fit [3, 32, 32] images");
  fs::remove_all(d);
}

TEST(TrainCli, BadModelOrShape) {
  fs::path d = test_dir("cli_model");
  expect_one_line_error({"train", "nosuchnet", "--data", "synthetic:1x28x28:64", "--out", (d / "r").string()}, d,
                        {"nosuchnet", "lenet5"});
  expect_one_line_error({"train", "alexnet", "--data", "fashion-mnist", "--out", (d / "r").string()}, d,
                        {"alexnet", "[1, 28, 28]"});
  expect_one_line_error({"eval", "nosuchnet", "--checkpoint", (d / "x.safetensors").string()}, d, {"x.safetensors"});
  expect_one_line_error({"train", "lenet5", "--data", "synthetic:1x28x28:64", "--optimizer", "rmsprop", "--out",
                         (d / "r").string()},
                        d, {"--optimizer", "rmsprop"});
  expect_one_line_error({"train", "lenet5", "--data", "synthetic:1x28x28:64", "--normalize", "x/y", "--out",
                         (d / "r").string()},
                        d, {"--normalize"});
  fs::remove_all(d);
}

TEST(TrainCli, BadDatasets) {
  fs::path d = test_dir("cli_data");
  auto train_on = [&](const std::string& spec) {
    return std::vector<std::string>{"train", "lenet5", "--data", spec, "--epochs", "1", "--out", (d / "r").string()};
  };
  // Missing directory, unknown kind, malformed synthetic spec.
  expect_one_line_error(train_on("mnist:" + (d / "nowhere").string()), d, {(d / "nowhere").string()});
  expect_one_line_error(train_on("imagenet:/x"), d, {"imagenet"});
  expect_one_line_error(train_on("synthetic:axbxc"), d, {"synthetic:axbxc"});
  // Wrong magic.
  fs::path m = d / "magic";
  write_mnist_dir(m, 16);
  write_file(m / "train-images-idx3-ubyte", idx_images(16, 0x00000903));
  expect_one_line_error(train_on("mnist:" + m.string()), d, {(m / "train-images-idx3-ubyte").string()});
  // Truncated images.
  fs::path t = d / "trunc";
  write_mnist_dir(t, 16);
  std::string img = idx_images(16);
  write_file(t / "t10k-images-idx3-ubyte", img.substr(0, img.size() - 100));
  expect_one_line_error(train_on("mnist:" + t.string()), d, {(t / "t10k-images-idx3-ubyte").string()});
  // A label out of range (mnist has 10 classes).
  fs::path l = d / "label";
  write_mnist_dir(l, 16);
  write_file(l / "train-labels-idx1-ubyte", idx_labels(16, 12));
  expect_one_line_error(train_on("mnist:" + l.string()), d, {(l / "train-labels-idx1-ubyte").string(), "12"});
  // A corrupt gzip file.
  fs::path g = d / "gzip";
  write_mnist_dir(g, 16);
  fs::remove(g / "train-images-idx3-ubyte");
  write_file(g / "train-images-idx3-ubyte.gz", std::string("\x1f\x8b\x08\x00garbage garbage garbage", 27));
  expect_one_line_error(train_on("mnist:" + g.string()), d, {"train-images-idx3-ubyte.gz"});
  // Labels and images that disagree in count.
  fs::path n = d / "count";
  write_mnist_dir(n, 16);
  write_file(n / "train-labels-idx1-ubyte", idx_labels(15));
  expect_one_line_error(train_on("mnist:" + n.string()), d, {(n / "train-labels-idx1-ubyte").string()});
  // And the valid directory trains.
  fs::path ok = d / "ok";
  write_mnist_dir(ok, 16);
  CliResult r = run_cli(train_on("mnist:" + ok.string()), d);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  fs::remove_all(d);
}

TEST(TrainCli, BadCheckpoints) {
  fs::path d = test_dir("cli_ckpt");
  // A real checkpoint to spoil: lenet5, 10 classes, a few steps.
  fs::path run = d / "run";
  CliResult r = run_cli({"train", "lenet5", "--data", "synthetic:1x28x28:128", "--epochs", "1", "--batch", "32",
                         "--out", run.string(), "--threads", "1"},
                        d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path good = run / "last.safetensors";
  std::string bytes = read_file(good);
  auto eval_of = [&](const fs::path& ck, const std::string& model = "lenet5",
                     const std::string& data = "synthetic:1x28x28:128") {
    return std::vector<std::string>{"eval", model, "--checkpoint", ck.string(), "--data", data};
  };
  CliResult ok = run_cli(eval_of(good), d);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;

  expect_one_line_error(eval_of(d / "missing.safetensors"), d, {(d / "missing.safetensors").string()});
  fs::path trunc = d / "trunc.safetensors";
  write_file(trunc, bytes.substr(0, bytes.size() / 2));
  expect_one_line_error(eval_of(trunc), d, {trunc.string()});
  fs::path garbage = d / "garbage.safetensors";
  write_file(garbage, std::string(64, '\x7f'));
  expect_one_line_error(eval_of(garbage), d, {garbage.string()});
  fs::path empty = d / "empty.safetensors";
  write_file(empty, "");
  expect_one_line_error(eval_of(empty), d, {empty.string()});
  // Another model's checkpoint; the right model but another number of classes.
  expect_one_line_error(eval_of(good, "tinycnn"), d, {good.string(), "'lenet5'", "'tinycnn'"});
  expect_one_line_error(eval_of(good, "lenet5", "synthetic:1x28x28:128:5"), d,
                        {good.string(), "'classifier.5.weight'", "[10, 84]", "[5, 84]"});
  // --resume: nothing to resume, another model in the directory, a corrupt last.safetensors.
  expect_one_line_error({"train", "lenet5", "--resume", "--out", (d / "empty_run").string()}, d,
                        {"--resume", (d / "empty_run" / "last.safetensors").string()});
  expect_one_line_error({"train", "tinycnn", "--resume", "--out", run.string()}, d, {good.string(), "'lenet5'"});
  write_file(good, bytes.substr(0, 200));
  expect_one_line_error({"train", "lenet5", "--resume", "--out", run.string()}, d, {good.string()});
  fs::remove_all(d);
}

// ---- mixed precision, accumulation, recomputation, a memory budget ----

// The issue's check: bf16 reaches the fp32 accuracy within half a point, same seeds and epochs.
// Averaged over two seeds: one run's accuracy moves by a few tenths with the kernels' rounding
// (on a cpu with AMX, oneDNN's amx_bf16 kernels gave seed 0 89.60% against fp32's 90.34%, and
// seeds 1 and 2 90.30% and 90.08% against 90.13% and 90.13%).
TEST(TrainRecipe, LeNet5Bf16WithinHalfAPointOfFp32) {
  ASSERT_TRUE(fs::exists(fs::path(kFashionDir) / "train-images-idx3-ubyte.gz"));
  fs::path d = test_dir("bf16_recipe");
  double acc[2] = {0, 0};
  const char* precisions[2] = {"fp32", "bf16"};
  for (int i = 0; i < 2; ++i)
    for (uint64_t seed : {0, 1}) {
      train::TrainConfig c;  // the README's recipe: lenet5, 5 epochs
      c.threads = 1;
      c.seed = seed;
      c.precision = precisions[i];
      c.out = (d / fmt::format("{}_{}", precisions[i], seed)).string();
      c.verbose = 0;
      train::TrainResult r = train::train(c);
      acc[i] += r.final_eval.accuracy / 2;
      std::cout << precisions[i] << " seed " << seed << ": test accuracy " << 100 * r.final_eval.accuracy << "%\n";
    }
  EXPECT_GE(acc[0], 0.88);
  EXPECT_LE(std::abs(acc[1] - acc[0]), 0.005) << "fp32 " << acc[0] << " bf16 " << acc[1];
  fs::remove_all(d);
}

// fp16 with the loss scaler, accumulation with a short last window, and recomputation, stopped
// and resumed: the same curve, weights, scaler state and metrics as a run that never stopped.
TEST(Trainer, Fp16AccumulationRecomputeResumeGivesTheIdenticalCurve) {
  fs::path d = test_dir("amp_resume");
  auto config = [&](const std::string& name) {
    train::TrainConfig c;
    c.model = "tinycnn";
    c.data = "synthetic:1x28x28:640:10";  // 10 micro-batches of 64: windows of 3, 3, 3, 1
    c.epochs = 2;
    c.batch = 64;
    c.accum = 3;
    c.precision = "fp16";
    c.recompute = true;
    c.lr = 0.02;
    c.threads = 1;
    c.log_every = 1;
    c.out = (d / name).string();
    c.verbose = 0;
    return c;
  };
  train::TrainResult a = train::train(config("a"));
  ASSERT_EQ(a.losses.size(), 8u) << "4 optimizer steps per epoch";
  EXPECT_GT(a.loss_scale, 0.0) << "fp16 turns the scaler on";
  for (float l : a.losses) EXPECT_TRUE(std::isfinite(l));
  auto cb = config("b");
  cb.stop_after = 3;
  train::TrainResult b1 = train::train(cb);
  EXPECT_TRUE(b1.stopped);
  cb.stop_after = 0;
  cb.resume = true;
  cb.accum = 1;  // ignored on resume: the checkpoint's settings rule
  cb.precision = "fp32";
  train::TrainResult b2 = train::train(cb);
  EXPECT_EQ(b2.first_step, 3);
  expect_same_losses(a.losses, 3, b2.losses);
  EXPECT_EQ(b2.loss_scale, a.loss_scale);
  EXPECT_EQ(b2.skipped_steps, a.skipped_steps) << "the count carries over the resume";
  expect_same_tensors(d / "a" / "last.safetensors", d / "b" / "last.safetensors");
  EXPECT_EQ(metrics_numbers(d / "a" / "metrics.csv"), metrics_numbers(d / "b" / "metrics.csv"));
  EXPECT_NE(read_file(d / "a" / "metrics.csv").find("loss_scale"), std::string::npos);
  fs::remove_all(d);
}

TEST(TrainCli, MaxMemoryPlansTheRunOrRefusesItWithTheLadder) {
  fs::path d = test_dir("cli_budget");
  const std::vector<std::string> base = {"train", "tinycnn", "--data", "synthetic:1x28x28:512:10", "--epochs", "1",
                                         "--batch", "256", "--threads", "1"};
  // The step as asked (fp32, batch 256) and a budget below it.
  LedgerConfig lc;
  lc.batch = 256;
  const int64_t full = ledger("tinycnn", lc).memory.peak_bytes;
  auto args = base;
  for (const std::string& a : std::vector<std::string>{"--max-memory", std::to_string(full * 6 / 10), "--out", (d / "fit").string()})
    args.push_back(a);
  CliResult fit = run_cli(args, d);
  ASSERT_EQ(fit.exit_code, 0) << fit.out << fit.err;
  EXPECT_NE(fit.err.find("recommended"), std::string::npos) << fit.err;
  EXPECT_NE(fit.out.find("final test accuracy"), std::string::npos) << fit.out;
  // The plan it applied keeps the effective batch of 256, and the whole run (training steps
  // and evaluation) stays within the budget.
  EXPECT_NE(fit.err.find("= effective batch 256"), std::string::npos) << fit.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(fit.out, m, std::regex(R"(peak tracked memory ([0-9.]+) MiB)"))) << fit.out;
  EXPECT_LE(std::stod(m[1]) * (1 << 20), double(full * 6 / 10)) << fit.out;

  args = base;
  for (const std::string& a : std::vector<std::string>{"--max-memory", "64KiB", "--out", (d / "nofit").string()})
    args.push_back(a);
  CliResult no = run_cli(args, d);
  EXPECT_EQ(no.exit_code, 1);
  EXPECT_NE(no.err.find("cannot fit"), std::string::npos) << no.err;
  EXPECT_GE(std::count(no.err.begin(), no.err.end(), '\n'), 4) << "the ladder, one rung per line:\n" << no.err;
  EXPECT_FALSE(fs::exists(d / "nofit" / "last.safetensors")) << "it stops before it starts";

  expect_one_line_error({"train", "tinycnn", "--data", "synthetic:1x28x28:64", "--max-memory", "lots", "--out",
                         (d / "r").string()},
                        d, {"--max-memory", "lots"});
  // A fraction of a byte (no unit) was a budget of 0, that is none, taken silently.
  expect_one_line_error({"train", "tinycnn", "--data", "synthetic:1x28x28:64", "--max-memory", "0.5", "--out",
                         (d / "r").string()},
                        d, {"--max-memory", "'0.5' is a fraction of a byte"});
  expect_one_line_error({"train", "tinycnn", "--data", "synthetic:1x28x28:64", "--precision", "fp8", "--out",
                         (d / "r").string()},
                        d, {"--precision", "fp8"});
  // --conv-algo direct: the run says so (and the plan's direct rungs pass it on).
  CliResult direct = run_cli({"train", "tinycnn", "--data", "synthetic:1x28x28:64:10", "--epochs", "1", "--batch", "32",
                              "--threads", "1", "--conv-algo", "direct", "--out", (d / "direct").string()},
                             d);
  ASSERT_EQ(direct.exit_code, 0) << direct.out << direct.err;
  EXPECT_NE(direct.err.find("convolutions direct"), std::string::npos) << direct.err;
  EXPECT_EQ(fit.err.find("convolutions direct"), std::string::npos) << fit.err;
  expect_one_line_error({"train", "tinycnn", "--data", "synthetic:1x28x28:64", "--conv-algo", "fft", "--out",
                         (d / "r").string()},
                        d, {"--conv-algo", "fft"});
  expect_one_line_error({"train", "tinycnn", "--data", "synthetic:1x28x28:64", "--accum", "0", "--out",
                         (d / "r").string()},
                        d, {"--accum"});
  expect_one_line_error({"train", "tinycnn", "--data", "synthetic:1x28x28:64", "--grad-scaler", "sometimes",
                         "--out", (d / "r").string()},
                        d, {"--grad-scaler", "sometimes"});
  fs::remove_all(d);
}

// ---- a PyTorch user's conventions (issue 17) ----

// Adam without --lr is PyTorch's Adam (lr 1e-3), not the SGD recipe's lr 0.05 (with which it stayed
// at 10%); the header says where the figures came from, and the checkpoint keeps them.
TEST(TrainCli, AdamDefaultsReach85PercentOnLenet5In2Epochs) {
  ASSERT_TRUE(fs::exists(fs::path(kFashionDir) / "train-images-idx3-ubyte.gz"));
  fs::path d = test_dir("adam_defaults");
  CliResult r = run_cli({"train", "lenet5", "--optimizer", "adam", "--epochs", "2", "--threads", "1", "--out",
                         (d / "run").string()},
                        d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("adam lr 0.001 (momentum 0, weight decay 0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(lr 0.001 and weight decay 0 are adam's defaults; --lr and --weight-decay set them)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(final test accuracy ([0-9.]+)%)"))) << r.out;
  EXPECT_GE(std::stod(m[1]), 85.0) << r.out;
  io::Checkpoint ck = io::read_checkpoint((d / "run" / "last.safetensors").string());
  auto cfg = nlohmann::json::parse(ck.info.config_json);
  EXPECT_EQ(cfg["lr"].get<double>(), 0.001);
  EXPECT_EQ(cfg["weight_decay"].get<double>(), 0.0);
  // One given, the other the optimizer's: AdamW's weight decay is 0.01.
  CliResult w = run_cli({"train", "lenet5", "--optimizer", "adamw", "--lr", "0.002", "--epochs", "1", "--stop-after",
                         "1", "--threads", "1", "--out", (d / "w").string()},
                        d);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  EXPECT_NE(w.err.find("adamw lr 0.002 (momentum 0, weight decay 0.01)"), std::string::npos) << w.err;
  EXPECT_NE(w.err.find("(weight decay 0.01 is adamw's default;"), std::string::npos) << w.err;
  // A NaN or an infinity is not a learning rate (nor "unset").
  CliResult nan = run_cli({"train", "lenet5", "--lr", "nan", "--out", (d / "n").string()}, d);
  EXPECT_EQ(nan.exit_code, 2) << nan.err;
  EXPECT_NE(nan.err.find("--lr"), std::string::npos) << nan.err;
  EXPECT_NE(nan.err.find("nan is not a finite number"), std::string::npos) << nan.err;
  CliResult inf = run_cli({"train", "lenet5", "--weight-decay", "inf", "--out", (d / "n").string()}, d);
  EXPECT_EQ(inf.exit_code, 2) << inf.err;
  EXPECT_NE(inf.err.find("--weight-decay"), std::string::npos) << inf.err;
  fs::remove_all(d);
}

// AdamW at the SGD recipe's lr learns nothing: after the first epoch the run says so, with the
// figures and a learning rate to try, and goes on.
TEST(TrainCli, AFirstEpochAtChanceSaysSoAndSuggestsTheLearningRate) {
  ASSERT_TRUE(fs::exists(fs::path(kFashionDir) / "train-images-idx3-ubyte.gz"));
  fs::path d = test_dir("chance");
  CliResult r = run_cli({"train", "lenet5", "--optimizer", "adamw", "--lr", "0.05", "--epochs", "1", "--threads", "1",
                         "--out", (d / "run").string()},
                        d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: epoch 1 ended at chance (train loss 2.3"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ln 10 = 2.3026"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("lr 0.05 is likely too high for adamw; try --lr 0.001"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("warning"), std::string::npos) << "warnings are log, not results: " << r.out;
  fs::remove_all(d);
}

// `--init` (the same as --checkpoint) from a state dict PyTorch wrote through safetensors, its keys
// under DataParallel's "module.": the prefix is stripped and said so, and the run starts from those
// weights. A key that does not fit lists the missing and the unexpected ones together; a torch.save
// file is named for what it is and never unpickled.
TEST(TrainCli, InitFromAPyTorchStateDict) {
  fs::path d = test_dir("init_torch");
  const fs::path wrapped = d / "wrapped.safetensors", renamed = d / "renamed.safetensors", zip = d / "model.pt",
                 legacy = d / "legacy.pt";
  const std::string py = fmt::format(
      "import sys, torch; sys.path.insert(0, '{}/scripts'); import torch_models\n"
      "from safetensors.torch import save_file\n"
      "torch.manual_seed(7); m = torch_models.build('lenet5')\n"
      "sd = torch.nn.DataParallel(m).state_dict()\n"
      "save_file({{k: v.contiguous() for k, v in sd.items()}}, '{}')\n"
      "sd2 = {{('classifier.5.w' if k == 'classifier.5.weight' else k): v.contiguous() for k, v in m.state_dict().items()}}\n"
      "save_file(sd2, '{}')\n"
      "torch.save(m.state_dict(), '{}')\n"
      "torch.save(m.state_dict(), '{}', _use_new_zipfile_serialization=False)\n",
      RECKON_SOURCE_DIR, wrapped.string(), renamed.string(), zip.string(), legacy.string());
  ASSERT_EQ(test_util::run_shell(test_util::python() + " -c " + shell_quote(py)), 0)
      << "needs torch and safetensors (make pydeps)";

  // A tiny learning rate and one step: the weights written are PyTorch's.
  CliResult r = run_cli({"train", "lenet5", "--init", wrapped.string(), "--data", "synthetic:1x28x28:64:10",
                         "--epochs", "1", "--batch", "32", "--stop-after", "1", "--lr", "1e-30", "--weight-decay", "0",
                         "--momentum", "0", "--threads", "1", "--out", (d / "run").string()},
                        d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("weights from " + wrapped.string() +
                       " (the prefix 'module.' (torch.nn.DataParallel's) stripped from its 10 keys)"),
            std::string::npos)
      << r.err;
  {
    SafetensorsFile torch_file = load_safetensors(wrapped.string());
    io::Checkpoint ck = io::read_checkpoint((d / "run" / "last.safetensors").string());
    ASSERT_EQ(ck.model_state.size(), 10u);
    for (const auto& [k, t] : ck.model_state) {
      const auto it = std::find_if(torch_file.tensors.begin(), torch_file.tensors.end(),
                                   [&](const auto& kv) { return kv.first == "module." + k; });
      ASSERT_NE(it, torch_file.tensors.end()) << k;
      ASSERT_EQ(t.numel(), it->second.numel()) << k;
      EXPECT_EQ(std::memcmp(t.data<float>(), it->second.data<float>(), size_t(t.numel()) * sizeof(float)), 0) << k;
    }
  }
  // --init and --checkpoint are one setting.
  CliResult both = run_cli({"train", "lenet5", "--init", wrapped.string(), "--checkpoint", wrapped.string()}, d);
  EXPECT_EQ(both.exit_code, 2) << both.err;
  // The renamed key: the missing one and the unexpected one that explains it, in one line.
  expect_one_line_error({"train", "lenet5", "--init", renamed.string(), "--data", "synthetic:1x28x28:64:10", "--out",
                         (d / "r2").string()},
                        d,
                        {renamed.string(), "missing tensor 'classifier.5.weight' of lenet5",
                         "unexpected tensor 'classifier.5.w'"});
  // torch.save's files, both formats: named, with the conversion, by train and by eval.
  expect_one_line_error({"train", "lenet5", "--init", zip.string(), "--data", "synthetic:1x28x28:64:10", "--out",
                         (d / "r3").string()},
                        d, {zip.string(), "a zip archive (PyTorch's .pt/.pth format", "never unpickles",
                            "safetensors.torch import save_file"});
  expect_one_line_error({"eval", "lenet5", "--checkpoint", legacy.string(), "--data", "synthetic:1x28x28:64:10"}, d,
                        {legacy.string(), "a Python pickle (PyTorch's legacy .pt format)", "never unpickles"});
  // eval on the PyTorch file: the weights' note, and the normalisation it chose and why.
  CliResult ev = run_cli({"eval", "lenet5", "--checkpoint", wrapped.string(), "--data", "synthetic:1x28x28:64:10"}, d);
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  EXPECT_NE(ev.err.find("stripped from its 10 keys"), std::string::npos) << ev.err;
  EXPECT_NE(ev.out.find("normalize: the training split's mean ["), std::string::npos) << ev.out;
  EXPECT_NE(ev.out.find("(" + wrapped.string() + " holds none; --normalize none or"), std::string::npos) << ev.out;
  fs::remove_all(d);
}

// --version, the commands' list when none or an unknown one is given (exit 2), and the zoo as JSON.
TEST(TrainCli, VersionCommandsAndModelsJson) {
  fs::path d = test_dir("version");
  CliResult v = run_cli({"--version"}, d);
  EXPECT_EQ(v.exit_code, 0) << v.err;
  EXPECT_TRUE(std::regex_search(v.out, std::regex(R"(^reckon [0-9]+\.[0-9]+\.[0-9]+ \(\w+ build(, sanitized \([\w,]+\))?; oneDNN [0-9]+\.[0-9]+\.[0-9]+; cuda (no|yes: .*)\)\n$)")))
      << v.out;
  for (const std::vector<std::string>& args : {std::vector<std::string>{}, std::vector<std::string>{"frobnicate"}}) {
    CliResult r = run_cli(args, d);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    for (const char* c : {"train", "eval", "ledger", "plan", "models"})
      EXPECT_NE(r.err.find(c), std::string::npos) << c << " not in: " << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
  CliResult m = run_cli({"models", "--json"}, d);
  ASSERT_EQ(m.exit_code, 0) << m.err;
  auto j = nlohmann::json::parse(m.out);
  ASSERT_TRUE(j.is_array());
  EXPECT_GE(j.size(), 11u);
  bool lenet = false;
  for (const auto& e : j)
    if (e["name"] == "lenet5") {
      lenet = true;
      EXPECT_EQ(e["parameters"], 61706);
      EXPECT_EQ(e["input"], nlohmann::json::array({1, 28, 28}));
      EXPECT_GT(e["forward_macs_per_image"].get<int64_t>(), 0);
    }
  EXPECT_TRUE(lenet) << m.out;
  fs::remove_all(d);
}

// `--resume --epochs N` extends a finished run: the schedule is re-planned (and said so), the
// metrics go on. With a constant schedule, 1 epoch then extended to 2 gives the weights of a
// 2-epoch run, bit for bit; fewer epochs than the run has done is refused.
TEST(TrainCli, ResumeWithEpochsExtendsAFinishedRun) {
  fs::path d = test_dir("extend");
  auto args = [&](const std::string& out, const std::string& epochs) {
    return std::vector<std::string>{"train", "tinycnn", "--data", "synthetic:1x28x28:256:10", "--epochs", epochs,
                                    "--batch", "32", "--schedule", "none", "--threads", "1", "--out", (d / out).string()};
  };
  ASSERT_EQ(run_cli(args("two", "2"), d).exit_code, 0);
  ASSERT_EQ(run_cli(args("one", "1"), d).exit_code, 0);
  CliResult r = run_cli({"train", "tinycnn", "--resume", "--epochs", "2", "--threads", "1", "--out",
                         (d / "one").string()},
                        d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("--epochs 2: the run goes from 1 to 2 epochs; the none schedule is re-planned over 16 steps"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("ignoring"), std::string::npos) << r.err;
  test_util::expect_same_tensors(d / "one" / "last.safetensors", d / "two" / "last.safetensors");
  io::Checkpoint ck = io::read_checkpoint((d / "one" / "last.safetensors").string());
  EXPECT_EQ(ck.info.progress.epoch, 2);
  EXPECT_EQ(nlohmann::json::parse(ck.info.config_json)["epochs"], 2);
  EXPECT_EQ(test_util::metrics_numbers(d / "one" / "metrics.csv"), test_util::metrics_numbers(d / "two" / "metrics.csv"));
  EXPECT_EQ(metrics_accuracies(d / "one" / "metrics.jsonl", "test").size(), 2u);
  // The cosine schedule: re-planned, the lr it now has at the resume step said beside the old one.
  ASSERT_EQ(run_cli({"train", "tinycnn", "--data", "synthetic:1x28x28:256:10", "--epochs", "1", "--batch", "32",
                     "--threads", "1", "--out", (d / "cos").string()},
                    d)
                .exit_code,
            0);
  CliResult c = run_cli({"train", "tinycnn", "--resume", "--epochs", "3", "--out", (d / "cos").string()}, d);
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.err.find("the cosine schedule is re-planned over 24 steps (lr at step 8 now 0.0375, was 0)"),
            std::string::npos)
      << c.err;
  expect_one_line_error({"train", "tinycnn", "--resume", "--epochs", "2", "--out", (d / "cos").string()}, d,
                        {"--resume --epochs 2", "3 epochs in already"});
  fs::remove_all(d);
}

// `reckon predict` on PNG files of Fashion-MNIST's test images gives the probabilities of `reckon
// eval`'s logits for the same images (softmax of --dump-outputs), with the checkpoint's class
// names; an image twice the size (each pixel doubled, which bilinear halving with half-pixel
// centres undoes exactly) and an RGB copy (luma of equal R, G, B) give the same figures.
TEST(TrainCli, PredictAgreesWithEvalOnImageFiles) {
  ASSERT_TRUE(fs::exists(fs::path(kFashionDir) / "train-images-idx3-ubyte.gz"));
  fs::path d = test_dir("predict");
  CliResult t = run_cli({"train", "lenet5", "--stop-after", "150", "--threads", "1", "--out", (d / "run").string()}, d);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  const std::string ck = (d / "run" / "last.safetensors").string();
  CliResult ev = run_cli({"eval", "lenet5", "--checkpoint", ck, "--dump-outputs", (d / "logits.npy").string()}, d);
  ASSERT_EQ(ev.exit_code, 0) << ev.err;
  const Tensor logits = io::read_npy((d / "logits.npy").string());
  constexpr int kImages = 12;
  auto test = data::open_dataset("fashion-mnist", false);
  const std::vector<std::string> names = test->class_names();
  std::vector<float> x(28 * 28);
  int64_t label = 0;
  for (int i = 0; i < kImages; ++i) {
    test->get(i, x.data(), &label);
    std::vector<uint8_t> gray(x.size()), big(4 * x.size()), rgb(3 * x.size());
    for (size_t k = 0; k < x.size(); ++k) gray[k] = uint8_t(std::lround(x[k] * 255));
    for (int r = 0; r < 56; ++r)
      for (int c = 0; c < 56; ++c) big[size_t(r * 56 + c)] = gray[size_t((r / 2) * 28 + c / 2)];
    for (size_t k = 0; k < x.size(); ++k) rgb[3 * k] = rgb[3 * k + 1] = rgb[3 * k + 2] = gray[k];
    test_util::write_png(fmt::format("{}/imgs/{:02d}.png", d.string(), i), 28, 28, 1, gray);
    if (i == 0) {
      test_util::write_png((d / "big.png").string(), 56, 56, 1, big);
      test_util::write_png((d / "rgb.png").string(), 28, 28, 3, rgb);
    }
  }
  write_file(d / "imgs" / "notes.txt", "not an image: skipped in a directory");
  CliResult p = run_cli({"predict", "lenet5", "--checkpoint", ck, (d / "imgs").string(), (d / "big.png").string(),
                         (d / "rgb.png").string(), "--top", "10", "--json"},
                        d);
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_NE(p.err.find("input [1, 28, 28]; normalize: the checkpoint's: mean [0.28"), std::string::npos) << p.err;
  auto j = nlohmann::json::parse(p.out);
  ASSERT_EQ(j.size(), size_t(kImages + 2));
  auto probs = [&](const nlohmann::json& e) {
    std::vector<double> v(10, -1);
    for (const auto& c : e["top"]) {
      v[c["class"].get<size_t>()] = c["probability"].get<double>();
      EXPECT_EQ(c["name"], names[c["class"].get<size_t>()]);
    }
    return v;
  };
  for (int i = 0; i < kImages; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(j[size_t(i)]["file"], fmt::format("{}/imgs/{:02d}.png", d.string(), i));
    const float* l = logits.data<float>() + i * 10;
    double m = *std::max_element(l, l + 10), z = 0;
    for (int k = 0; k < 10; ++k) z += std::exp(double(l[k]) - m);
    const std::vector<double> got = probs(j[size_t(i)]);
    for (int k = 0; k < 10; ++k) EXPECT_NEAR(got[size_t(k)], std::exp(double(l[k]) - m) / z, 1e-5) << k;
    EXPECT_EQ(j[size_t(i)]["top"][0]["class"], std::max_element(l, l + 10) - l);
  }
  const std::vector<double> p0 = probs(j[0]), pbig = probs(j[kImages]), prgb = probs(j[kImages + 1]);
  EXPECT_EQ(j[kImages]["width"], 56);
  EXPECT_EQ(j[kImages + 1]["channels"], 3);
  for (int k = 0; k < 10; ++k) {
    EXPECT_NEAR(pbig[size_t(k)], p0[size_t(k)], 1e-6) << k;
    EXPECT_NEAR(prgb[size_t(k)], p0[size_t(k)], 1e-6) << k;
  }
  // The text form: each file, then its top classes by name.
  CliResult text = run_cli({"predict", "lenet5", "--checkpoint", ck, (d / "rgb.png").string(), "--top", "2"}, d);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), '\n'), 3) << text.out;
  EXPECT_NE(text.out.find("  1. " + j[kImages + 1]["top"][0]["name"].get<std::string>()), std::string::npos)
      << text.out;
  // Bad input: a file that is not an image, a directory without images, no checkpoint for a zoo model.
  expect_one_line_error({"predict", "lenet5", "--checkpoint", ck, (d / "imgs" / "notes.txt").string()}, d,
                        {(d / "imgs" / "notes.txt").string()});
  fs::create_directories(d / "none");
  expect_one_line_error({"predict", "lenet5", "--checkpoint", ck, (d / "none").string()}, d,
                        {(d / "none").string(), "no .png, .jpg or .jpeg"});
  expect_one_line_error({"predict", "lenet5", (d / "rgb.png").string()}, d, {"--checkpoint"});
  fs::remove_all(d);
}

// --val-split: a seeded hold-out evaluated each epoch (metrics "val" rows, the log line),
// best.safetensors at the best epoch; --early-stop N ends a run that stopped gaining, and a
// resume of it trains no further.
TEST(TrainCli, ValidationSplitBestCheckpointAndEarlyStop) {
  fs::path d = test_dir("val_split");
  const fs::path out = d / "run";
  CliResult r = run_cli({"train", "tinycnn", "--data", "synthetic:1x28x28:512:10", "--epochs", "3", "--batch", "32",
                         "--val-split", "0.25", "--threads", "1", "--out", out.string()},
                        d);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("validation: 128 of the 512 training samples held out (--val-split 0.25, by seed 0)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("data synthetic:1x28x28:512:10: 384 training / 512 test samples"), std::string::npos) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(best validation accuracy ([0-9.]+)% at epoch ([0-9]+): )")))
      << r.out;
  const double best = std::stod(m[1]);
  const int best_epoch = std::stoi(m[2]);
  std::vector<double> val = metrics_accuracies(out / "metrics.jsonl", "val");
  for (double& a : val) a *= 100;
  ASSERT_EQ(val.size(), 3u);
  EXPECT_NEAR(*std::max_element(val.begin(), val.end()), best, 0.006);
  EXPECT_EQ(std::max_element(val.begin(), val.end()) - val.begin() + 1, best_epoch);
  io::Checkpoint bk = io::read_checkpoint((out / "best.safetensors").string());
  EXPECT_EQ(bk.info.progress.epoch, best_epoch);
  EXPECT_EQ(nlohmann::json::parse(bk.info.config_json)["val_split"], 0.25);

  // A learning rate too small to change anything (lenet5: no batch norm, whose statistics would
  // move): no gain after epoch 1, stopped after epoch 2 of 5.
  const fs::path es = d / "early";
  CliResult e = run_cli({"train", "lenet5", "--data", "synthetic:1x28x28:256:10", "--epochs", "5", "--batch", "32",
                         "--val-split", "0.25", "--early-stop", "1", "--lr", "1e-12", "--threads", "1", "--out",
                         es.string()},
                        d);
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.err.find("early stop: no gain in validation accuracy for 1 epochs (best"), std::string::npos) << e.err;
  EXPECT_NE(e.out.find("at epoch 1 (stopped early)"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("after 2 epochs"), std::string::npos) << e.out;
  EXPECT_EQ(io::read_checkpoint((es / "last.safetensors").string()).info.progress.epoch, 2);
  EXPECT_EQ(io::read_checkpoint((es / "best.safetensors").string()).info.progress.epoch, 1);
  CliResult again = run_cli({"train", "lenet5", "--resume", "--threads", "1", "--out", es.string()}, d);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("epoch 3/5"), std::string::npos) << again.err;
  EXPECT_EQ(io::read_checkpoint((es / "last.safetensors").string()).info.progress.epoch, 2);
  expect_one_line_error({"train", "tinycnn", "--early-stop", "2", "--out", (d / "x").string()}, d,
                        {"--early-stop", "--val-split"});
  expect_one_line_error({"train", "tinycnn", "--val-split", "1", "--out", (d / "x").string()}, d, {"--val-split"});
  fs::remove_all(d);
}

// An evaluation's last, shorter batch runs zero-padded through the engine built for the full batch
// (one copy of the weights in the engine's layouts, not two): its rows are those the full batch
// gives for the same images, bit for bit, and the eager forward's within float tolerance.
TEST(BatchEngines, AShortBatchRunsPaddedThroughTheFullBatchsEngine) {
  manual_seed(3);
  auto model = onnx::make_model("tinycnn", {.num_classes = 10, .in_channels = 3});
  model->eval();
  Generator g(11);
  Tensor full = Tensor::empty({8, 3, 32, 32});
  fill_uniform_(full, -1.0, 1.0, g);
  Tensor part = contiguous(narrow(full, 0, 0, 3));
  train::BatchEngines engines(*model);
  const Tensor y_full = engines.run(full), y_part = engines.run(part);
  ASSERT_EQ(y_part.shape(), (Shape{3, 10}));
  for (int64_t i = 0; i < 3 * 10; ++i) EXPECT_EQ(y_part.get(i), y_full.get(i)) << i;
  Tensor eager;
  {
    NoGrad ng;
    eager = (*model)(part);
  }
  for (int64_t i = 0; i < 3 * 10; ++i) EXPECT_NEAR(y_part.get(i), eager.get(i), 1e-4) << i;
}
