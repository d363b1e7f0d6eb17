// Issue 14's table of bad input through the command line: datasets, checkpoints, ONNX files,
// arguments, output directories and the calibration cache. Each case builds its files in a
// sandbox of its own, runs the reckon binary, and asserts that
//   - the exit status is 1 (2 for a usage error that CLI11 catches, as CLI conventions have it),
//   - stderr holds exactly one line, "reckon: ..." (or CLI11's one usage line for status 2), that
//     names the file or the argument (the case's needles); progress lines ("... what it does",
//     which `ledger` and `plan` print as they work) may come before it,
//   - no file in the sandbox outside the case's --out changed (contents, links, kinds),
//   - the process was not killed (no crash) and did not hang (ctest's timeout).
// A case that expects success (status 0) is a hostile input that must be survived, e.g. a
// damaged calibration cache that is measured again.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "reckon/io/checkpoint.h"
#include "reckon/io/safetensors.h"
#include "reckon/ledger/devices.h"
#include "reckon/train/trainer.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace reckon;
using json = nlohmann::json;

namespace {

// ---- what the cases set up in their sandbox S ----
struct Sandbox {
  fs::path root;
  fs::path operator/(const std::string& name) const { return root / name; }
};
using Setup = std::function<void(const Sandbox&)>;

void put(const fs::path& p, const std::string& bytes) {
  fs::create_directories(p.parent_path());
  test_util::write_file(p, bytes);
}
void fifo(const fs::path& p) {
  fs::create_directories(p.parent_path());
  ASSERT_EQ(::mkfifo(p.c_str(), 0644), 0) << p;
}
// A file outside every --out that no case may touch.
void victim(const Sandbox& s) { put(s / "victim.txt", "precious"); }

// A finished tinycnn run in S/run (last.safetensors with its train state, metrics, events).
void base_run(const Sandbox& s) {
  train::TrainConfig c;
  c.model = "tinycnn";
  c.data = "synthetic:1x28x28:64:10";
  c.epochs = 1;
  c.batch = 32;
  c.threads = 1;
  c.out = (s / "run").string();
  c.progress = 0;
  c.verbose = 0;
  train::train(c);
}
// base_run, then its checkpoint's metadata edited in place.
Setup edited_run(std::function<void(std::map<std::string, std::string>&)> edit) {
  return [edit](const Sandbox& s) {
    base_run(s);
    const std::string p = (s / "run" / "last.safetensors").string();
    SafetensorsFile f = load_safetensors(p);
    edit(f.metadata);
    std::vector<std::pair<std::string, Tensor>> ts(f.tensors.begin(), f.tensors.end());
    save_safetensors(p, ts, f.metadata);
  };
}
Setup edited_train_state(std::function<void(json&)> edit) {
  return edited_run([edit](auto& meta) {
    json st = json::parse(meta.at("train_state"));
    edit(st);
    meta["train_state"] = st.dump();
  });
}
Setup edited_config(std::function<void(json&)> edit) {
  return edited_run([edit](auto& meta) {
    json c = json::parse(meta.at("config"));
    edit(c);
    meta["config"] = c.dump();
  });
}
// base_run's checkpoint with its bytes changed by f.
Setup bytes_of_run(std::function<std::string(std::string)> f) {
  return [f](const Sandbox& s) {
    base_run(s);
    const fs::path p = s / "run" / "last.safetensors";
    test_util::write_file(p, f(test_util::read_file(p)));
  };
}
uint64_t header_len(const std::string& b) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(b[size_t(i)]);
  return n;
}
std::string with_len(std::string b, uint64_t n) {
  for (int i = 0; i < 8; ++i) b[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return b;
}
// An MNIST-layout directory S/NAME of 16 samples with one file's bytes replaced.
Setup mnist_with(const std::string& dir, const std::string& file, std::string bytes) {
  return [=](const Sandbox& s) {
    test_util::write_mnist_dir(s / dir, 16);
    if (file.empty()) return;
    fs::remove(s / dir / file);
    put(s / dir / file, bytes);
  };
}
std::string idx_header(uint32_t magic, std::vector<uint32_t> dims) {
  std::string s = test_util::be32(magic);
  for (uint32_t d : dims) s += test_util::be32(d);
  return s;
}
Setup all(std::vector<Setup> steps) {
  return [steps](const Sandbox& s) {
    for (const auto& f : steps) f(s);
  };
}

// ---- the table ----
struct Case {
  std::string name;
  Setup setup;
  std::vector<std::string> args;     // "{S}" is the sandbox
  int exit = 1;
  std::vector<std::string> needles;  // in the one stderr line ("{S}" is the sandbox)
  bool one_line = true;              // false: an error with a table after its first line
};

const std::string kTrain = "train";
// base with each option in `extra` replacing the option of the same name (CLI11 refuses an
// option given twice) or added after them.
std::vector<std::string> with_options(std::vector<std::string> a, const std::vector<std::string>& extra) {
  for (size_t i = 0; i < extra.size(); ++i) {
    const bool has_value = i + 1 < extra.size() && extra[i + 1].rfind("--", 0) != 0;
    auto it = std::find(a.begin(), a.end(), extra[i]);
    if (it != a.end() && has_value) *(it + 1) = extra[i + 1];
    else {
      a.push_back(extra[i]);
      if (has_value) a.push_back(extra[i + 1]);
    }
    if (has_value) ++i;
  }
  return a;
}
std::vector<std::string> train_args(const std::vector<std::string>& extra) {
  return with_options({"train", "tinycnn", "--data", "synthetic:1x28x28:64:10", "--epochs", "1", "--batch", "32",
                       "--threads", "1", "--quiet", "--out", "{S}/out"},
                      extra);
}
std::vector<std::string> resume_args() { return {"train", "tinycnn", "--resume", "--threads", "1", "--quiet", "--out", "{S}/run"}; }
std::vector<std::string> eval_args(const std::string& ck) {
  return {"eval", "tinycnn", "--checkpoint", ck, "--data", "synthetic:1x28x28:64:10", "--threads", "1"};
}
std::vector<std::string> ledger_args(const std::vector<std::string>& extra) {
  return with_options({"ledger", "tinycnn", "--batch", "8"}, extra);
}

std::vector<Case> cases() {
  const std::string ck = "{S}/run/last.safetensors";
  std::vector<Case> c = {
      // ---- usage errors (CLI11): status 2 ----
      {"UnknownSubcommand", {}, {"trian", "lenet5"}, 2, {"trian"}},
      {"NoSubcommand", {}, {}, 2, {"a command is needed", "train", "predict"}},
      {"UnknownOption", {}, {"train", "tinycnn", "--epoch", "1"}, 2, {"--epoch"}},
      {"BatchNotANumber", {}, {"train", "tinycnn", "--batch", "abc"}, 2, {"--batch", "abc"}},
      {"EpochsFractional", {}, {"train", "tinycnn", "--epochs", "1.5"}, 2, {"--epochs", "1.5"}},
      {"LedgerWithoutBatch", {}, {"ledger", "tinycnn"}, 2, {"--batch"}},
      {"PlanWithoutMemory", {}, {"plan", "tinycnn", "--batch", "8"}, 2, {"--memory"}},
      {"BatchPastInt64", {}, {"train", "tinycnn", "--batch", "99999999999999999999"}, 2, {"--batch", "99999999999999999999 does not fit in a 64-bit integer"}},
      {"SeedPastUint64", {}, {"train", "tinycnn", "--seed", "18446744073709551616"}, 2, {"--seed", "18446744073709551616 does not fit"}},
      {"LrNotANumber", {}, {"train", "tinycnn", "--lr", "fast"}, 2, {"--lr", "fast"}},
      {"SeedNegative", {}, {"train", "tinycnn", "--seed", "-1"}, 2, {"--seed"}},
      {"BenchPrecisionUnknown", {}, {"bench-infer", "tinycnn", "--precision", "fp8"}, 2, {"--precision", "fp8"}},
      {"MissingModel", {}, {"train"}, 2, {"model"}},
      // ---- arguments: status 1, the argument named ----
      {"UnknownModel", {}, {"train", "lenet6", "--data", "synthetic:1x28x28:64", "--out", "{S}/out"}, 1, {"lenet6"}},
      {"BatchZero", {}, train_args({"--batch", "0"}), 1, {"--batch"}},
      {"BatchNegative", {}, train_args({"--batch", "-3"}), 1, {"--batch"}},
      // on the meta device a trillion images is a shape, not an allocation; its step's FLOPs pass 2^63
      {"BatchHugeOnTheLedger", {}, ledger_args({"--batch", "1000000000000"}), 1, {"--batch 1000000000000", "overflows a 64-bit count"}},
      // a batch past the dataset is the whole dataset in one batch (drop_last off), as in PyTorch
      {"BatchHugeInTraining", {}, train_args({"--batch", "4000000000000000000"}), 0, {}},
      {"ClassesZero", {}, ledger_args({"--classes", "0"}), 2, {"--classes"}},
      {"ClassesHuge", {}, ledger_args({"--classes", "9000000000000000000"}), 1, {"--classes"}},
      {"AccumZero", {}, train_args({"--accum", "0"}), 1, {"--accum"}},
      {"AccumHuge", {}, ledger_args({"--accum", "9000000000000000000"}), 1, {"--accum"}},
      {"InputZero", {}, ledger_args({"--input", "0x28x28"}), 1, {"--input", "0x28x28"}},
      {"InputNotAShape", {}, ledger_args({"--input", "28by28"}), 1, {"--input", "28by28"}},
      {"InputTwoDims", {}, ledger_args({"--input", "28x28"}), 1, {"--input"}},
      {"InputHuge", {}, ledger_args({"--input", "3x999999999x999999999"}), 1, {"3x999999999x999999999"}},
      {"ThreadsHuge", {}, train_args({"--threads", "100000"}), 1, {"--threads", "100000"}},
      {"ThreadsNegative", {}, train_args({"--threads", "-2"}), 1, {"--threads"}},
      {"MaxMemoryFraction", {}, train_args({"--max-memory", "0.5"}), 1, {"--max-memory", "0.5"}},
      {"MaxMemoryUnknownUnit", {}, train_args({"--max-memory", "4XB"}), 1, {"--max-memory", "4XB"}},
      {"MaxMemoryTooSmall", {}, train_args({"--max-memory", "1KiB"}), 1, {"--max-memory 1.0 KiB"}, false},  // then the ladder
      {"PlanMemoryNegative", {}, {"plan", "tinycnn", "--batch", "8", "--memory", "-1GiB"}, 1, {"--memory"}},
      {"PlanPrecisionsUnknown", {}, {"plan", "tinycnn", "--batch", "8", "--memory", "1GiB", "--precisions", "fp8"}, 1, {"fp8"}},
      {"OptimizerUnknown", {}, train_args({"--optimizer", "lbfgs"}), 1, {"lbfgs"}},
      {"ScheduleUnknown", {}, train_args({"--schedule", "exp"}), 1, {"exp"}},
      {"PrecisionUnknown", {}, train_args({"--precision", "fp8"}), 1, {"fp8"}},
      {"LrNegative", {}, train_args({"--lr", "-0.1"}), 1, {"--lr"}},
      {"LrNan", {}, train_args({"--lr", "nan"}), 2, {"--lr", "nan is not a finite number"}},
      {"MomentumOverOne", {}, train_args({"--momentum", "1.5"}), 1, {"--momentum"}},
      {"LabelSmoothingOverOne", {}, train_args({"--label-smoothing", "2"}), 1, {"--label-smoothing"}},
      {"WarmupNegative", {}, train_args({"--warmup", "-5"}), 1, {"--warmup"}},
      {"LogEveryZero", {}, train_args({"--log-every", "0"}), 1, {"--log-every"}},
      {"EvalBatchNegative", {}, train_args({"--eval-batch", "-1"}), 1, {"--eval-batch"}},
      {"NormalizeMalformed", {}, train_args({"--normalize", "0.5/"}), 1, {"--normalize"}},
      {"NormalizeWrongChannels", {}, train_args({"--normalize", "0.1,0.2,0.3/0.5,0.5,0.5"}), 1, {"--normalize"}},
      {"AugmentUnknown", {}, train_args({"--augment", "rotate"}), 1, {"rotate"}},
      {"GradScalerUnknown", {}, train_args({"--grad-scaler", "maybe"}), 1, {"maybe"}},
      {"ConvAlgoUnknown", {}, train_args({"--conv-algo", "fft"}), 1, {"fft"}},
      {"DeviceUnknown", {}, ledger_args({"--device", "tpu"}), 1, {"tpu"}},
      {"FreezeUnknownName", {}, ledger_args({"--freeze", "nosuchlayer"}), 1, {"nosuchlayer"}},
      {"QatWithoutCheckpoint", {}, train_args({"--qat"}), 1, {"--qat", "--checkpoint"}},
      {"ExportOpsetTooNew", {}, {"export", "tinycnn", "--opset", "99", "--out", "{S}/out/m.onnx"}, 1, {"--opset"}},
      {"ExportBatchWord", {}, {"export", "tinycnn", "--batch", "many", "--out", "{S}/out/m.onnx"}, 1, {"--batch", "many"}},
      {"QuantizeMethodUnknown", {}, {"quantize", "tinycnn", "--data", "synthetic:1x28x28:64:10", "--method", "magic"}, 1, {"magic"}},
      {"QuantizePercentileOver100", {}, {"quantize", "tinycnn", "--data", "synthetic:1x28x28:64:10", "--method", "percentile=101"}, 1, {"percentile"}},
      {"QuantizeKeepUnknownLayer", base_run,
       {"quantize", "tinycnn", "--checkpoint", ck, "--data", "synthetic:1x28x28:64:10", "--batch", "16", "--keep-fp32", "conv9"}, 1, {"conv9"}},
      {"QuantizeCalibBatchesZero", {}, {"quantize", "tinycnn", "--data", "synthetic:1x28x28:64:10", "--calib-batches", "0"}, 1, {"--calib-batches"}},
      {"BenchIterationsNegative", {}, {"bench-infer", "tinycnn", "--iters", "-1"}, 1, {"--iters"}},
      // ---- datasets ----
      {"DataKindUnknown", {}, train_args({"--data", "imagenet:/x"}), 1, {"imagenet"}},
      {"DataDirMissing", {}, train_args({"--data", "mnist:{S}/nothing"}), 1, {"{S}/nothing"}},
      {"SyntheticZeroShape", {}, train_args({"--data", "synthetic:0x28x28"}), 1, {"synthetic:0x28x28"}},
      {"SyntheticNoSamples", {}, train_args({"--data", "synthetic:1x28x28:0"}), 1, {"synthetic:1x28x28:0"}},
      {"SyntheticHuge", {}, train_args({"--data", "synthetic:3x99999x99999:99999999"}), 1, {"synthetic"}},
      {"IdxBadMagic", mnist_with("m", "train-images-idx3-ubyte", idx_header(0x1234, {16, 28, 28})),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-images-idx3-ubyte", "magic"}},
      {"IdxTruncated", mnist_with("m", "train-images-idx3-ubyte", test_util::idx_images(16).substr(0, 500)),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-images-idx3-ubyte"}},
      {"IdxDimensionsWrap", mnist_with("m", "train-images-idx3-ubyte", idx_header(0x803, {16, 0xffffffffu, 0xffffffffu})),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-images-idx3-ubyte"}},
      {"IdxLabelCountDiffers", mnist_with("m", "train-labels-idx1-ubyte", test_util::idx_labels(15)),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-labels-idx1-ubyte"}},
      {"IdxLabelPastTenClasses", mnist_with("m", "train-labels-idx1-ubyte", test_util::idx_labels(16, 42)),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-labels-idx1-ubyte", "42"}},
      {"IdxGzipCorrupt", mnist_with("m", "train-images-idx3-ubyte", std::string("\x1f\x8b\x08\x00garbagegarbage", 18)),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-images-idx3-ubyte"}},
      {"IdxFileIsAFifo", all({mnist_with("m", "", ""), [](const Sandbox& s) {
                                fs::remove(s / "m" / "train-images-idx3-ubyte");
                                fifo(s / "m" / "train-images-idx3-ubyte");
                              }}),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-images-idx3-ubyte", "not a regular file"}},
      {"IdxFileIsADirectory", all({mnist_with("m", "", ""), [](const Sandbox& s) {
                                     fs::remove(s / "m" / "train-labels-idx1-ubyte");
                                     fs::create_directories(s / "m" / "train-labels-idx1-ubyte");
                                   }}),
       train_args({"--data", "mnist:{S}/m"}), 1, {"{S}/m/train-labels-idx1-ubyte"}},
      {"CifarFileMissing", [](const Sandbox& s) { put(s / "c" / "data_batch_1.bin", std::string(3073, '\1')); },
       train_args({"--data", "cifar10:{S}/c"}), 1, {"data_batch_2.bin"}},
      {"CifarRecordTruncated",
       [](const Sandbox& s) {
         for (int i = 1; i <= 5; ++i) put(s / "c" / ("data_batch_" + std::to_string(i) + ".bin"), std::string(3073, '\1'));
         put(s / "c" / "data_batch_3.bin", std::string(3000, '\1'));
         put(s / "c" / "test_batch.bin", std::string(3073, '\1'));
       },
       train_args({"--data", "cifar10:{S}/c"}), 1, {"{S}/c/data_batch_3.bin"}},
      {"FolderEmpty", [](const Sandbox& s) { fs::create_directories(s / "f"); }, train_args({"--data", "folder:{S}/f"}), 1,
       {"{S}/f"}},
      {"FolderCorruptPng",
       [](const Sandbox& s) {
         put(s / "f" / "a" / "1.png", "\x89PNG\r\n\x1a\nnot really a png");
         put(s / "f" / "b" / "1.png", "\x89PNG\r\n\x1a\nnot really a png");
       },
       train_args({"--data", "folder:{S}/f"}), 1, {"{S}/f/a/1.png"}},
      {"FolderJpegTruncated",
       [](const Sandbox& s) {
         put(s / "f" / "a" / "1.jpg", std::string("\xff\xd8\xff\xe0\x00\x10JFIF", 10));
         put(s / "f" / "b" / "1.jpg", std::string("\xff\xd8\xff\xe0\x00\x10JFIF", 10));
       },
       train_args({"--data", "folder:{S}/f"}), 1, {"{S}/f/a/1.jpg"}},
      // ---- checkpoints ----
      {"EvalCheckpointMissing", {}, eval_args("{S}/none.safetensors"), 1, {"{S}/none.safetensors"}},
      {"EvalCheckpointEmpty", [](const Sandbox& s) { put(s / "e.safetensors", ""); }, eval_args("{S}/e.safetensors"), 1,
       {"{S}/e.safetensors"}},
      {"EvalCheckpointIsAFifo", [](const Sandbox& s) { fifo(s / "f.safetensors"); }, eval_args("{S}/f.safetensors"), 1,
       {"{S}/f.safetensors", "FIFO"}},
      {"EvalCheckpointIsADirectory", [](const Sandbox& s) { fs::create_directories(s / "d.safetensors"); },
       eval_args("{S}/d.safetensors"), 1, {"{S}/d.safetensors"}},
      {"EvalCheckpointIsATorchZip", [](const Sandbox& s) { put(s / "m.pt", std::string("PK\x03\x04\x14\x00\x00\x00", 8) + std::string(600, 'x')); },
       eval_args("{S}/m.pt"), 1, {"{S}/m.pt"}},
      {"HeaderOneByteShort", bytes_of_run([](std::string b) { return with_len(b, header_len(b) - 1); }), eval_args(ck), 1,
       {"{S}/run/last.safetensors"}},
      {"HeaderPastTheEnd", bytes_of_run([](std::string b) { return with_len(b, b.size()); }), eval_args(ck), 1,
       {"{S}/run/last.safetensors", "runs past the end"}},
      {"HeaderOverTheCap", bytes_of_run([](std::string b) { return with_len(b, 200'000'000); }), eval_args(ck), 1,
       {"{S}/run/last.safetensors", "limit"}},
      {"HeaderNotJson", bytes_of_run([](std::string b) { b[9] = '#'; return b; }), eval_args(ck), 1,
       {"{S}/run/last.safetensors", "JSON"}},
      {"HeaderNestedDeep", [](const Sandbox& s) {
         std::string h = "{\"__metadata__\":{\"a\":" + std::string(100000, '[') + std::string(100000, ']') + "}}";
         put(s / "deep.safetensors", with_len(std::string(8, '\0'), h.size()) + h);
       },
       eval_args("{S}/deep.safetensors"), 1, {"{S}/deep.safetensors", "deeper than 64"}},
      {"TensorDataTruncated", bytes_of_run([](std::string b) { return b.substr(0, b.size() - 7); }), eval_args(ck), 1,
       {"{S}/run/last.safetensors"}},
      {"CheckpointOfAnotherModel", base_run, {"eval", "lenet5", "--checkpoint", ck, "--data", "synthetic:1x28x28:64:10"}, 1,
       {"{S}/run/last.safetensors"}},
      {"StateDictMissingTensors",
       [](const Sandbox& s) { save_safetensors((s / "sd.safetensors").string(), {{"conv1.weight", Tensor::ones({2, 2})}}, {}); },
       eval_args("{S}/sd.safetensors"), 1, {"{S}/sd.safetensors"}},
      {"ResumeWithoutCheckpoint", {}, {"train", "tinycnn", "--resume", "--out", "{S}/empty"}, 1, {"{S}/empty"}},
      {"ResumeWeightsOnly",
       [](const Sandbox& s) {
         base_run(s);
         SafetensorsFile f = load_safetensors((s / "run" / "last.safetensors").string());
         std::vector<std::pair<std::string, Tensor>> ts;
         for (auto& [k, t] : f.tensors)
           if (k.rfind("model.", 0) == 0) ts.push_back({k.substr(6), t});
         save_safetensors((s / "run" / "last.safetensors").string(), ts, {});
       },
       resume_args(), 1, {"{S}/run/last.safetensors"}},
      {"ResumeOtherModel", base_run, {"train", "lenet5", "--resume", "--out", "{S}/run"}, 1, {"tinycnn", "lenet5"}},
      {"ResumeEventsFileTraversal", all({victim, edited_train_state([](json& st) { st["events_file"] = "../victim.txt"; })}),
       resume_args(), 1, {"events_file", "../victim.txt"}},
      {"ResumeEventsFileAbsolute",
       all({victim, [](const Sandbox& s) {
              edited_train_state([p = (s / "victim.txt").string()](json& st) { st["events_file"] = p; })(s);
            }}),
       resume_args(), 1, {"events_file", "victim.txt"}},
      {"ResumeMetricsIsALink", all({victim, base_run, [](const Sandbox& s) {
                                      fs::remove(s / "run" / "metrics.csv");
                                      fs::create_symlink(s / "victim.txt", s / "run" / "metrics.csv");
                                    }}),
       resume_args(), 1, {"metrics.csv", "symbolic link"}},
      {"ResumeMetricsIsAFifo", all({base_run, [](const Sandbox& s) {
                                      fs::remove(s / "run" / "metrics.csv");
                                      fifo(s / "run" / "metrics.csv");
                                    }}),
       resume_args(), 1, {"metrics.csv", "not a regular file"}},
      {"ResumeCheckpointIsAFifo", [](const Sandbox& s) { fifo(s / "run" / "last.safetensors"); }, resume_args(), 1,
       {"{S}/run/last.safetensors"}},
      {"ResumeConfigBadType", edited_config([](json& c) { c["batch"] = "thirty-two"; }), resume_args(), 1,
       {"{S}/run/last.safetensors", "batch", "thirty-two"}},
      {"ResumeConfigNotJson", edited_run([](auto& m) { m["config"] = "{batch: 32"; }), resume_args(), 1,
       {"{S}/run/last.safetensors", "config"}},
      {"ResumeConfigNestedDeep",
       edited_run([](auto& m) { m["config"] = "{\"x\":" + std::string(5000, '[') + std::string(5000, ']') + "}"; }),
       resume_args(), 1, {"{S}/run/last.safetensors", "deeper than 64"}},
      {"ResumeTrainStateMissing", edited_run([](auto& m) { m.erase("train_state"); }), resume_args(), 1,
       {"{S}/run/last.safetensors", "train_state"}},
      {"ResumeTrainStateNotJson", edited_run([](auto& m) { m["train_state"] = "[1,2"; }), resume_args(), 1,
       {"{S}/run/last.safetensors", "train_state"}},
      {"ResumeStepNotANumber", edited_run([](auto& m) { m["step"] = "twelve"; }), resume_args(), 1,
       {"{S}/run/last.safetensors", "step"}},
      {"ResumeRngStateBad", edited_run([](auto& m) { m["rng_state"] = "1,2,3"; }), resume_args(), 1,
       {"{S}/run/last.safetensors", "rng_state"}},
      {"ResumeFormatNewer", edited_run([](auto& m) { m["format_version"] = "99"; }), resume_args(), 1,
       {"{S}/run/last.safetensors"}},
      {"ResumeWhileAnotherRunHoldsTheLock", base_run, resume_args(), 1, {"{S}/run", "another run"}},
      // ---- ONNX files ----
      {"OnnxGarbage", [](const Sandbox& s) { put(s / "m.onnx", "this is not a protobuf \x01\x02\xff"); },
       {"ledger", "{S}/m.onnx", "--batch", "1"}, 1, {"{S}/m.onnx"}},
      {"OnnxEmpty", [](const Sandbox& s) { put(s / "m.onnx", ""); }, {"ledger", "{S}/m.onnx", "--batch", "1"}, 1, {"{S}/m.onnx"}},
      {"OnnxMissing", {}, {"ledger", "{S}/none.onnx", "--batch", "1"}, 1, {"{S}/none.onnx"}},
      {"OnnxIsAFifo", [](const Sandbox& s) { fifo(s / "m.onnx"); }, {"ledger", "{S}/m.onnx", "--batch", "1"}, 1,
       {"{S}/m.onnx", "FIFO"}},
      {"OnnxTruncatedExport",
       [](const Sandbox& s) {
         ASSERT_EQ(test_util::run_cli({"export", "tinycnn", "--out", (s / "full.onnx").string()}, s.root).exit_code, 0);
         const std::string b = test_util::read_file(s / "full.onnx");
         put(s / "m.onnx", b.substr(0, b.size() / 2));
         fs::remove(s / "full.onnx");
       },
       {"ledger", "{S}/m.onnx", "--batch", "1"}, 1, {"{S}/m.onnx"}},
      // ---- output directories ----
      {"OutIsAFile", [](const Sandbox& s) { put(s / "out", "a file"); }, train_args({}), 1, {"{S}/out"}},
      {"OutUnderAFile", [](const Sandbox& s) { put(s / "f", "a file"); },
       {"train", "tinycnn", "--data", "synthetic:1x28x28:64:10", "--epochs", "1", "--out", "{S}/f/out"}, 1, {"{S}/f/out"}},
      {"OutMetricsIsALinkOutside", all({victim, [](const Sandbox& s) {
                                          fs::create_directories(s / "out");
                                          fs::create_symlink(s / "victim.txt", s / "out" / "metrics.csv");
                                        }}),
       train_args({}), 1, {"metrics.csv", "symbolic link"}},
      {"OutCheckpointIsADirectory", [](const Sandbox& s) { fs::create_directories(s / "out" / "last.safetensors"); },
       train_args({}), 1, {"last.safetensors"}},
      {"ExportOutDirectoryMissing", {}, {"export", "tinycnn", "--out", "{S}/no/such/dir/m.onnx"}, 1, {"{S}/no/such/dir/m.onnx"}},
      {"ExportOutIsADirectory", [](const Sandbox& s) { fs::create_directories(s / "m.onnx"); },
       {"export", "tinycnn", "--out", "{S}/m.onnx"}, 1, {"{S}/m.onnx"}},
      {"ExportOutIsALinkOutside", all({victim, [](const Sandbox& s) { fs::create_symlink(s / "victim.txt", s / "m.onnx"); }}),
       {"export", "tinycnn", "--out", "{S}/m.onnx"}, 0, {}},  // the link is replaced; its target is untouched
      // ---- the calibration cache: damage is survived (measured again), never an error ----
      {"CacheCorrupt", [](const Sandbox& s) { put(s / "cache" / "devices.json", "{\"cpus\": [1, 2,"); },
       ledger_args({}), 0, {}},
      {"CacheWrongTypes", [](const Sandbox& s) { put(s / "cache" / "devices.json", "{\"version\": 1, \"cpus\": {\"x\": 3}}"); },
       ledger_args({}), 0, {}},
      {"CacheIsAFifo", [](const Sandbox& s) { fifo(s / "cache" / "devices.json"); }, ledger_args({}), 0, {}},
  };
  return c;
}

std::string subst(std::string s, const std::string& root) {
  for (size_t p; (p = s.find("{S}")) != std::string::npos;) s.replace(p, 3, root);
  return s;
}

// Every entry under root except those under `skip`: its kind, a link's target, a file's bytes.
std::map<std::string, std::string> snapshot(const fs::path& root, const fs::path& skip) {
  std::map<std::string, std::string> m;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    const fs::path p = it->path();
    if (!skip.empty() && (p == skip || p.string().rfind(skip.string() + "/", 0) == 0)) {
      if (it->is_directory() && !it->is_symlink()) it.disable_recursion_pending();
      continue;
    }
    const auto st = fs::symlink_status(p, ec);
    std::string v;
    if (fs::is_symlink(st)) v = "link:" + fs::read_symlink(p, ec).string();
    else if (fs::is_regular_file(st)) v = "file:" + test_util::read_file(p);
    else if (fs::is_directory(st)) v = "dir";
    else v = "other:" + std::to_string(int(st.type()));
    m[fs::relative(p, root).string()] = v;
  }
  return m;
}

// The calibration cache each case's sandbox starts with unless the case puts its own there: a
// calibration (a probe of training steps, about 5 s here and a minute and a half under the
// sanitizers) is not what these cases test, and each case calibrating on its own made the
// sanitized suite's bad-input table last half an hour. ctest's prepared cache
// ($RECKON_CACHE_DIR/devices.json) where there is one; else one calibration made in this process,
// in a directory of its own. Its attempts are spent, so that one made while another test ran
// (under load) is used as it is rather than taken again by every case.
const std::string& prepared_cache() {
  static const std::string text = [] {
    fs::path file;
    if (const char* d = std::getenv("RECKON_CACHE_DIR"); d && *d && fs::is_regular_file(fs::path(d) / "devices.json"))
      file = fs::path(d) / "devices.json";
    if (file.empty()) {
      const fs::path dir = test_util::fresh_dir("badcli_cache", "prepared");
      test_util::ScopedEnv env("RECKON_CACHE_DIR", dir.string());
      forget_cpu_calibration();
      device_spec("cpu");
      forget_cpu_calibration();
      file = dir / "devices.json";
    }
    try {
      nlohmann::json j = nlohmann::json::parse(test_util::read_file(file));
      for (auto& [key, entry] : j.at("cpus").items()) entry["attempts"] = kCalibrationAttempts;
      return j.dump(1);
    } catch (const std::exception& e) {
      ADD_FAILURE() << file << ": " << e.what();
      return std::string();
    }
  }();
  return text;
}

class BadInputCli : public ::testing::TestWithParam<Case> {};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

}  // namespace

TEST_P(BadInputCli, Case) {
  const Case& c = GetParam();
  const Sandbox s{test_util::fresh_dir("badcli", c.name)};
  const fs::path io = test_util::fresh_dir("badcli_io", c.name);
  if (c.setup) c.setup(s);
  ASSERT_FALSE(::testing::Test::HasFatalFailure());
  if (std::error_code ec; !fs::exists(fs::symlink_status(s / "cache" / "devices.json", ec)) &&
                          !prepared_cache().empty())
    put(s / "cache" / "devices.json", prepared_cache());
  std::vector<std::string> args;
  fs::path out;
  for (size_t i = 0; i < c.args.size(); ++i) {
    args.push_back(subst(c.args[i], s.root.string()));
    if (i > 0 && c.args[i - 1] == "--out") out = args.back();
  }
  // The run's --out may be written; so may the calibration cache the case points at.
  std::optional<test_util::ScopedEnv> cache_env;
  cache_env.emplace("RECKON_CACHE_DIR", (s / "cache").string());
  const auto before = snapshot(s.root, out);
  test_util::CliResult r;
  if (c.name == "ResumeWhileAnotherRunHoldsTheLock") {
    // A second process holds the directory's lock, as a run in another terminal would.
    const std::string lock = (s / "run" / ".lock").string();
    const std::string cmd = "exec flock -x " + test_util::shell_quote(lock) + " sleep 30";
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !fs::exists(lock); ++i) ::usleep(10000);
    ::usleep(100000);
    r = test_util::run_cli(args, io);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  } else {
    r = test_util::run_cli(args, io);
  }
  cache_env.reset();
  ASSERT_NE(r.exit_code, -1) << "killed by a signal: " << r.err;
  EXPECT_NE(r.exit_code, 128 + SIGSEGV) << r.err;
  EXPECT_EQ(r.exit_code, c.exit) << r.err;
  if (c.exit != 0) {
    std::string err;  // stderr without its progress lines
    for (size_t at = 0; at < r.err.size();) {
      size_t nl = r.err.find('\n', at);
      nl = nl == std::string::npos ? r.err.size() : nl + 1;
      if (r.err.compare(at, 4, "... ") != 0) err += r.err.substr(at, nl - at);
      at = nl;
    }
    if (c.one_line) EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << "not one line:\n" << r.err;
    if (c.exit == 1) EXPECT_EQ(err.rfind("reckon: ", 0), 0u) << r.err;
    for (const auto& n : c.needles) {
      const std::string needle = subst(n, s.root.string());
      EXPECT_NE(r.err.find(needle), std::string::npos) << "'" << needle << "' not in: " << r.err;
    }
  }
  const auto after = snapshot(s.root, out);
  for (const auto& [k, v] : before) {
    auto it = after.find(k);
    if (k.rfind("cache", 0) == 0) continue;  // the cache is the program's to rewrite
    if (it == after.end()) ADD_FAILURE() << k << " was removed";
    else if (it->second != v) ADD_FAILURE() << k << " changed";
  }
  for (const auto& [k, v] : after)
    if (!before.count(k) && k.rfind("cache", 0) != 0) ADD_FAILURE() << k << " was created outside --out";
  fs::remove_all(s.root);
  fs::remove_all(io);
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputCli, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

// The table is the issue's: at least 80 cases.
TEST(BadInputCliTable, HoldsAtLeastEightyCases) { EXPECT_GE(cases().size(), 80u); }
