// Crash consistency of checkpoints, as a test (issue 14): every step of a save fails or is killed
// in turn (io::inject_save_fault numbers them: the temporary file, each write, the fsync, the
// close, the rename, the directory's fsync), and after each the previous checkpoint is still
// there, bit-identical, no temporary file is left (or the next run removes it), and --resume
// continues to the very weights of an uninterrupted run.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "reckon/io/checkpoint.h"
#include "reckon/io/safetensors.h"
#include "reckon/onnx/import.h"
#include "reckon/optim/factory.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace reckon;

namespace {

std::vector<std::string> dir_names(const fs::path& d) {
  std::vector<std::string> r;
  for (const auto& e : fs::directory_iterator(d)) r.push_back(e.path().filename().string());
  std::sort(r.begin(), r.end());
  return r;
}

}  // namespace

// In one process: each fault point of a save fails with a full disk (ENOSPC), an I/O error (EIO)
// or a read-only file system (EROFS) in turn. The save throws one line naming the file and the
// system's reason; the checkpoint it was replacing is unchanged byte for byte, and nothing else
// is left in the directory. (A failure of the directory's fsync comes after the rename: the new
// file is complete and in place, and the save still reports that it may not be durable.)
TEST(CrashConsistency, EveryFailingStepOfASaveKeepsThePreviousCheckpoint) {
  const fs::path d = test_util::fresh_dir("crash", "fail");
  auto model = onnx::make_model("tinycnn");
  auto opt = optim::make_optimizer(optim::OptimizerSpec{.name = "sgd", .momentum = 0.9}, model->parameters());
  io::CheckpointInfo info;
  info.model = "tinycnn";
  info.optimizer = "sgd";
  const std::string path = (d / "last.safetensors").string();
  io::save_checkpoint(path, *model, opt.get(), info);
  const std::string before = test_util::read_file(path);

  // A different checkpoint to write over it; counting its fault points on the way.
  info.progress.step = 7;
  const std::string other = (d / "other.safetensors").string();
  const int64_t p0 = fault_points_passed();
  io::save_checkpoint(other, *model, opt.get(), info);
  const int64_t points = fault_points_passed() - p0;
  const std::string after = test_util::read_file(other);
  fs::remove(other);
  ASSERT_NE(before, after);
  // tinycnn: the temporary file, 2 header writes, one write per tensor, fsync, close, rename, dir fsync.
  EXPECT_GE(points, 8);

  for (int err : {ENOSPC, EIO, EROFS}) {
    for (int64_t k = 1; k <= points; ++k) {
      SCOPED_TRACE(std::string(std::strerror(err)) + " at fault point " + std::to_string(k));
      inject_save_fault(k, false, err);
      const std::string e = test_util::error_of([&] { io::save_checkpoint(path, *model, opt.get(), info); });
      inject_save_fault(0, false, 0);
      EXPECT_NE(e.find(path), std::string::npos) << e;
      EXPECT_NE(e.find(std::strerror(err)), std::string::npos) << e;
      EXPECT_EQ(e.find('\n'), std::string::npos) << e;
      EXPECT_EQ(dir_names(d), std::vector<std::string>{"last.safetensors"});
      const std::string now = test_util::read_file(path);
      if (k < points) {
        EXPECT_TRUE(now == before) << "the previous checkpoint changed";
      } else {
        EXPECT_TRUE(now == after) << "past the rename the new checkpoint is complete";
        test_util::write_file(path, before);
      }
      io::Checkpoint ck = io::read_checkpoint(path);
      EXPECT_EQ(ck.info.progress.step, 0);
    }
  }
  // With no fault the same save goes through.
  io::save_checkpoint(path, *model, opt.get(), info);
  EXPECT_TRUE(test_util::read_file(path) == after);
  fs::remove_all(d);
}

// A real run killed (SIGKILL) at each fault point of its saves in turn: what is on disk after
// the kill loads (the checkpoint before, or none before the first save), and --resume ends with
// the weights and metrics of a run never killed, bit for bit.
TEST(CrashConsistency, ARunKilledAtEveryStepOfItsSavesResumesToTheSameWeights) {
  const fs::path d = test_util::fresh_dir("crash", "kill");
  auto args = [&](const fs::path& out) {
    return std::vector<std::string>{"train", "tinycnn", "--data", "synthetic:1x28x28:192:10", "--epochs", "1",
                                    "--batch", "32", "--threads", "1", "--checkpoint-every", "4", "--out",
                                    out.string()};
  };
  test_util::CliResult full = test_util::run_cli(args(d / "full"), d);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const int64_t full_step = io::read_checkpoint((d / "full" / "last.safetensors").string()).info.progress.step;

  int kills = 0;
  for (int64_t k = 1;; ++k) {
    SCOPED_TRACE("killed at fault point " + std::to_string(k));
    const fs::path out = d / ("k" + std::to_string(k));
    ASSERT_EQ(::setenv("RECKON_FAULT", (std::to_string(k) + ":kill").c_str(), 1), 0);
    test_util::CliResult r = test_util::run_cli(args(out), d);
    ::unsetenv("RECKON_FAULT");
    if (r.exit_code == 0) break;  // k is past the run's last fault point: every one was tried
    ASSERT_TRUE(r.exit_code == 128 + SIGKILL || r.exit_code == -1) << "not killed: " << r.exit_code << " " << r.err;
    ++kills;
    const fs::path ck = out / "last.safetensors";
    if (fs::exists(ck)) {
      io::Checkpoint c = io::read_checkpoint(ck.string());  // throws (fails the test) if torn
      EXPECT_LE(c.info.progress.step, full_step);  // the final one when killed after its rename
    }
    test_util::CliResult rest =
        fs::exists(ck) ? test_util::run_cli({"train", "tinycnn", "--resume", "--threads", "1", "--out", out.string()}, d)
                       : test_util::run_cli(args(out), d);
    ASSERT_EQ(rest.exit_code, 0) << rest.err;
    test_util::expect_same_tensors(d / "full" / "last.safetensors", ck);
    EXPECT_EQ(test_util::metrics_numbers(d / "full" / "metrics.csv"), test_util::metrics_numbers(out / "metrics.csv"));
    for (const std::string& name : dir_names(out)) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;
    fs::remove_all(out);
  }
  std::printf("[crash] a run killed at each of %d fault points of its saves resumed to the same weights\n", kills);
  // 192 images in batches of 32, 1 epoch: 6 steps, saves at step 4 and at the end.
  EXPECT_GE(kills, 2 * 8) << "fewer fault points than two saves have";
  fs::remove_all(d);
}
