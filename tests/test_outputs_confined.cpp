// A run writes only inside --out (issue 14's traversal class): a checkpoint whose metadata names
// its TensorBoard file "../x" or "/abs/x" is refused on --resume, and a symbolic link or a FIFO
// named metrics.csv or as the events file in --out is refused, with the file outside unchanged;
// two runs cannot write one --out at once, a save's stale temporary is removed at the next start, and
// a bad setting in a checkpoint names its key.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "reckon/io/files.h"
#include "reckon/io/safetensors.h"
#include "reckon/train/trainer.h"
#include "test_util.h"

using namespace reckon;
namespace fs = std::filesystem;

namespace {

train::TrainConfig short_run(const fs::path& out) {
  train::TrainConfig c;
  c.model = "lenet5";
  c.data = "synthetic:1x28x28:64:4";
  c.epochs = 1;
  c.batch = 16;
  c.threads = 1;
  c.verbose = 0;
  c.out = out.string();
  return c;
}

// The error of resuming run `c` from a copy of its checkpoint `ck` whose metadata `edit` changed
// (the copy in dir/crafted, removed after).
std::string resume_error_with_edited_metadata(const train::TrainConfig& c, const fs::path& ck, const fs::path& dir,
                                              const std::function<void(std::map<std::string, std::string>&)>& edit) {
  SafetensorsFile f = load_safetensors(ck.string());
  edit(f.metadata);
  std::vector<std::pair<std::string, Tensor>> ts(f.tensors.begin(), f.tensors.end());
  const fs::path crafted = dir / "crafted";
  fs::create_directories(crafted);
  save_safetensors((crafted / "last.safetensors").string(), ts, f.metadata);
  train::TrainConfig r = c;
  r.out = crafted.string();
  r.resume = true;
  r.epochs = 2;
  const std::string e = test_util::error_of([&] { train::train(r); });
  fs::remove_all(crafted);
  return e;
}
}  // namespace

TEST(OutputsConfined, ACheckpointsEventsFileNameCannotLeaveOut) {
  const fs::path d = test_util::fresh_dir("confined", "events");
  train::TrainConfig c = short_run(d / "run");
  train::train(c);
  const fs::path ck = d / "run" / "last.safetensors";
  const std::string victim = (d / "victim.txt").string();
  for (const std::string& bad : std::vector<std::string>{"../victim.txt", victim, "sub/../../victim.txt", ".."}) {
    SCOPED_TRACE(bad);
    { std::ofstream(victim) << "precious"; }
    const std::string e = resume_error_with_edited_metadata(c, ck, d, [&](auto& meta) {
      auto st = nlohmann::json::parse(meta.at("train_state"));
      st["events_file"] = bad;
      meta["train_state"] = st.dump();
    });
    EXPECT_NE(e.find("events_file"), std::string::npos) << e;
    EXPECT_NE(e.find("not a plain file name"), std::string::npos) << e;
    EXPECT_EQ(test_util::read_file(victim), "precious");
  }
  fs::remove_all(d);
}

TEST(OutputsConfined, ALinkOrAFifoInOutIsNotWrittenThrough) {
  const fs::path d = test_util::fresh_dir("confined", "links");
  const fs::path victim = d / "victim.txt";
  { std::ofstream(victim) << "precious"; }
  // metrics.csv as a symbolic link to a file outside --out.
  fs::create_directories(d / "run");
  fs::create_symlink(victim, d / "run" / "metrics.csv");
  std::string e = test_util::error_of([&] { train::train(short_run(d / "run")); });
  EXPECT_NE(e.find("metrics.csv"), std::string::npos) << e;
  EXPECT_NE(e.find("symbolic link"), std::string::npos) << e;
  EXPECT_EQ(test_util::read_file(victim), "precious");
  // metrics.csv as a FIFO: an error, not a run blocked forever on the open.
  fs::remove(d / "run" / "metrics.csv");
  ASSERT_EQ(::mkfifo((d / "run" / "metrics.csv").c_str(), 0644), 0);
  e = test_util::error_of([&] { train::train(short_run(d / "run")); });
  EXPECT_NE(e.find("not a regular file"), std::string::npos) << e;
  fs::remove_all(d);
}

// Two runs in one --out: the second is refused while the first holds the directory's lock (a
// second process, as two terminals would be), and runs once it is released.
TEST(OutputsConfined, TwoRunsCannotWriteOneOutAtOnce) {
  const fs::path d = test_util::fresh_dir("confined", "lock");
  fs::create_directories(d / "run");
  {
    io::DirLock held((d / "run").string(), "test");
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // the second run, in another process: flock is per open file, as between runs
      int code = 3;
      try {
        train::train(short_run(d / "run"));
        code = 0;
      } catch (const Error& e) {
        code = std::string(e.what()).find("another run is writing in this directory") != std::string::npos ? 1 : 2;
      }
      ::_exit(code);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 1) << "the second run was not refused with the lock's message";
    EXPECT_FALSE(fs::exists(d / "run" / "last.safetensors"));
  }
  EXPECT_NO_THROW(train::train(short_run(d / "run")));
  EXPECT_TRUE(fs::exists(d / "run" / "last.safetensors"));
  fs::remove_all(d);
}

// What a kill inside a save leaves (".last.safetensors.tmp-XXXXXX") is removed at the next start;
// a link with such a name, and other dot files, are left alone.
TEST(OutputsConfined, AnInterruptedSavesTemporaryIsRemovedAtTheNextStart) {
  const fs::path d = test_util::fresh_dir("confined", "tmp");
  const fs::path run = d / "run";
  fs::create_directories(run);
  std::ofstream(run / ".last.safetensors.tmp-a1B2c3") << "half a checkpoint";
  std::ofstream(run / ".model.int8.onnx.tmp4242") << "half a model";
  std::ofstream(run / ".keep") << "mine";
  std::ofstream(d / "target") << "outside";
  fs::create_symlink(d / "target", run / ".x.tmp-zzzzzz");
  train::train(short_run(run));
  EXPECT_FALSE(fs::exists(run / ".last.safetensors.tmp-a1B2c3"));
  EXPECT_FALSE(fs::exists(run / ".model.int8.onnx.tmp4242"));
  EXPECT_TRUE(fs::exists(run / ".keep"));
  EXPECT_TRUE(fs::is_symlink(run / ".x.tmp-zzzzzz"));
  EXPECT_TRUE(fs::exists(d / "target"));
  fs::remove_all(d);
}

// A bad setting in a checkpoint's config is an error naming the file, the key and what it holds
// (it was nlohmann's "[json.exception.type_error.302] ..."), and a missing one names the key.
TEST(OutputsConfined, ABadSettingInACheckpointNamesTheKey) {
  const fs::path d = test_util::fresh_dir("confined", "config");
  train::TrainConfig c = short_run(d / "run");
  train::train(c);
  const fs::path ck = d / "run" / "last.safetensors";
  for (int variant = 0; variant < 2; ++variant) {
    const std::string e = resume_error_with_edited_metadata(c, ck, d, [&](auto& meta) {
      auto cfg = nlohmann::json::parse(meta.at("config"));
      if (variant == 0) cfg["lr"] = "fast";
      else cfg.erase("momentum");
      meta["config"] = cfg.dump();
    });
    EXPECT_NE(e.find((d / "crafted" / "last.safetensors").string()), std::string::npos) << e;
    if (variant == 0) EXPECT_NE(e.find("setting 'lr' is \"fast\" (string), not the number"), std::string::npos) << e;
    else EXPECT_NE(e.find("lacks the training setting 'momentum'"), std::string::npos) << e;
    EXPECT_EQ(e.find("json.exception"), std::string::npos) << e;
  }
  fs::remove_all(d);
}
