// Issue 14's reader classes that a unit test pins down: what sits at a file's name cannot block a
// reader (a FIFO is refused before anything opens it for reading in blocking mode), JSON from a
// file cannot nest deep enough to exhaust the stack, and a safetensors header is capped as the
// format's reference library caps it. The CLI table (test_bad_input_cli.cpp) covers the same
// files through the commands.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "reckon/core/file.h"
#include "reckon/core/json.h"
#include "reckon/data/dataset.h"
#include "reckon/io/checkpoint.h"
#include "reckon/io/safetensors.h"
#include "reckon/ledger/devices.h"
#include "reckon/onnx/import.h"
#include "reckon/onnx/model.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace reckon;

namespace {

std::string fifo(const fs::path& p) {
  EXPECT_EQ(::mkfifo(p.c_str(), 0644), 0) << p;
  return p.string();
}

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

// A safetensors file whose header is `header` (no tensors).
std::string with_header(const fs::path& p, const std::string& header) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xff);
  test_util::write_file(p, bytes + header);
  return p.string();
}

}  // namespace

TEST(HostileInput, AFifoIsRefusedByEveryReaderWithoutBlocking) {
  const fs::path d = test_util::fresh_dir("hostile", "fifo");
  const std::string f = fifo(d / "x");
  // Each of these used to block in open() (or read) until a writer appeared: the test would hang.
  std::string e = test_util::error_of([&] { load_safetensors(f); });
  EXPECT_NE(e.find("not a regular file (a FIFO)"), std::string::npos) << e;
  EXPECT_NE(e.find(f), std::string::npos) << e;
  e = test_util::error_of([&] { io::read_checkpoint(f); });
  EXPECT_NE(e.find("a FIFO"), std::string::npos) << e;
  e = test_util::error_of([&] { onnx::load(f); });
  EXPECT_NE(e.find("[onnx] " + f + ": not a regular file (a FIFO)"), std::string::npos) << e;
  e = test_util::error_of([&] { read_regular_file(d.string(), "t"); });
  EXPECT_NE(e.find("not a regular file (a directory)"), std::string::npos) << e;

  // IDX: the test images as a FIFO, the labels a real file.
  fs::create_directories(d / "idx");
  fifo(d / "idx" / "t10k-images-idx3-ubyte");
  test_util::write_file(d / "idx" / "t10k-labels-idx1-ubyte", test_util::idx_labels(16));
  e = test_util::error_of([&] { data::open_idx((d / "idx").string(), false, 0, "idx"); });
  EXPECT_NE(e.find("t10k-images-idx3-ubyte: not a regular file"), std::string::npos) << e;

  // CIFAR's test batch as a FIFO.
  fs::create_directories(d / "cifar");
  fifo(d / "cifar" / "test_batch.bin");
  e = test_util::error_of([&] { data::open_cifar((d / "cifar").string(), false, false, "cifar10"); });
  EXPECT_NE(e.find("test_batch.bin: not a regular file"), std::string::npos) << e;

  // The calibration cache as a FIFO: no entry (calibrate again), not a hang and not an error.
  fs::create_directories(d / "cache");
  fifo(d / "cache" / "devices.json");
  {
    test_util::ScopedEnv cache("RECKON_CACHE_DIR", (d / "cache").string());
    EXPECT_FALSE(cached_cpu_spec().has_value());
  }
  fs::remove_all(d);
}

TEST(HostileInput, DeeplyNestedJsonIsRefusedBeforeAnythingRecursesIntoIt) {
  // Nesting at the cap parses; one level more is refused, naming what was read.
  EXPECT_NO_THROW(parse_json(nested(kMaxJsonDepth), "x"));
  std::string e = test_util::error_of([&] { parse_json(nested(kMaxJsonDepth + 1), "the thing"); });
  EXPECT_EQ(e, "the thing: JSON nested deeper than 64 levels");
  // A million levels: refused at level 65, so neither the parse, the destructor nor a message
  // printing the value recurses a million times (it used to overflow the stack).
  e = test_util::error_of([&] { parse_json(nested(1'000'000), "deep"); });
  EXPECT_NE(e.find("nested deeper than 64"), std::string::npos) << e;
  e = test_util::error_of([&] { parse_json("{\"a\": [1, 2,, 3]}", "cfg"); });
  EXPECT_NE(e.find("cfg: not valid JSON at byte 12"), std::string::npos) << e;

  const fs::path d = test_util::fresh_dir("hostile", "nesting");
  // In a safetensors header (a metadata value nested a million deep).
  const std::string p = with_header(d / "deep.safetensors", "{\"__metadata__\": {\"a\": " + nested(1'000'000) + "}}");
  e = test_util::error_of([&] { load_safetensors(p); });
  EXPECT_NE(e.find("[safetensors] " + p + ": the header nests JSON deeper than 64 levels"), std::string::npos) << e;

  // In a checkpoint's run config (a JSON string inside the metadata).
  auto model = onnx::make_model("lenet5");
  io::CheckpointInfo info;
  info.model = "lenet5";
  info.config_json = "{\"k\": " + nested(1000) + "}";
  const std::string ck = (d / "last.safetensors").string();
  io::save_checkpoint(ck, *model, nullptr, info);
  e = test_util::error_of([&] { io::read_checkpoint(ck); });
  EXPECT_NE(e.find(ck + ": metadata 'config': JSON nested deeper than 64 levels"), std::string::npos) << e;
  fs::remove_all(d);
}

TEST(HostileInput, ASafetensorsHeaderOverTheFormatsCapIsRefusedBeforeItIsRead) {
  const fs::path d = test_util::fresh_dir("hostile", "cap");
  // Header length 100,000,001 in a file that does hold that many bytes (sparse).
  const std::string p = (d / "big.safetensors").string();
  with_header(p, "");
  std::string bytes = test_util::read_file(p);
  const uint64_t n = 100'000'001;
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xff);
  test_util::write_file(p, bytes);
  fs::resize_file(p, 8 + n);
  std::string e = test_util::error_of([&] { load_safetensors(p); });
  EXPECT_NE(e.find("header length 100000001 (at byte 0) is over the format's limit of 100000000 bytes"),
            std::string::npos)
      << e;
  fs::remove_all(d);
}
