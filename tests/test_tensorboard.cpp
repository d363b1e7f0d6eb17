// TensorBoard event files and metrics files read back. The reader here is the tests' own: it
// walks the TFRecord framing, checks both masked CRC-32Cs of every record with a bitwise
// CRC-32C written independently of the library's table-driven one, and decodes the protobuf
// fields of tensorflow.Event / Summary / Summary.Value by their numbers. A file from a short
// training run is read the same way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "reckon/io/metrics.h"
#include "reckon/io/tensorboard.h"
#include "reckon/train/trainer.h"

using namespace reckon;
namespace fs = std::filesystem;

namespace {

// ---- the tests' reader ----

uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
  }
  return ~crc;
}
uint32_t masked(const uint8_t* p, size_t n) {
  uint32_t c = crc32c_bitwise(p, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

struct Event {
  double wall_time = -1;
  int64_t step = 0;
  bool has_step = false;
  std::string file_version;
  std::vector<std::pair<std::string, float>> scalars;  // Summary.Value (tag, simple_value)
};

struct Proto {
  const uint8_t* p;
  const uint8_t* end;
  bool done() const { return p >= end; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) throw std::runtime_error("truncated varint");
      uint8_t b = *p++;
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw std::runtime_error("varint too long");
  }
  template <class T>
  T fixed() {
    if (end - p < ptrdiff_t(sizeof(T))) throw std::runtime_error("truncated fixed field");
    T v;
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
    return v;
  }
  std::string bytes() {
    uint64_t n = varint();
    if (uint64_t(end - p) < n) throw std::runtime_error("truncated length-delimited field");
    std::string s(reinterpret_cast<const char*>(p), size_t(n));
    p += n;
    return s;
  }
  void skip(int wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: fixed<uint64_t>(); break;
      case 2: bytes(); break;
      case 5: fixed<uint32_t>(); break;
      default: throw std::runtime_error("unknown wire type " + std::to_string(wire));
    }
  }
};

Event decode_event(const std::string& data) {
  Event e;
  Proto pr{reinterpret_cast<const uint8_t*>(data.data()), reinterpret_cast<const uint8_t*>(data.data()) + data.size()};
  while (!pr.done()) {
    uint64_t key = pr.varint();
    int field = int(key >> 3), wire = int(key & 7);
    if (field == 1 && wire == 1) {
      e.wall_time = pr.fixed<double>();
    } else if (field == 2 && wire == 0) {
      e.step = int64_t(pr.varint());
      e.has_step = true;
    } else if (field == 3 && wire == 2) {
      e.file_version = pr.bytes();
    } else if (field == 5 && wire == 2) {
      std::string summary = pr.bytes();
      Proto s{reinterpret_cast<const uint8_t*>(summary.data()),
              reinterpret_cast<const uint8_t*>(summary.data()) + summary.size()};
      while (!s.done()) {
        uint64_t k = s.varint();
        if ((k >> 3) == 1 && (k & 7) == 2) {
          std::string value = s.bytes();
          Proto v{reinterpret_cast<const uint8_t*>(value.data()),
                  reinterpret_cast<const uint8_t*>(value.data()) + value.size()};
          std::string tag;
          float simple = std::nanf("");
          while (!v.done()) {
            uint64_t vk = v.varint();
            if ((vk >> 3) == 1 && (vk & 7) == 2)
              tag = v.bytes();
            else if ((vk >> 3) == 2 && (vk & 7) == 5)
              simple = v.fixed<float>();
            else
              v.skip(int(vk & 7));
          }
          e.scalars.emplace_back(tag, simple);
        } else {
          s.skip(int(k & 7));
        }
      }
    } else {
      pr.skip(wire);
    }
  }
  return e;
}

// Reads every record; throws (naming the offset) on a bad length CRC, data CRC or truncation.
std::vector<Event> read_events(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto* b = reinterpret_cast<const uint8_t*>(all.data());
  std::vector<Event> out;
  size_t off = 0;
  while (off < all.size()) {
    if (all.size() - off < 12) throw std::runtime_error("truncated header at " + std::to_string(off));
    uint64_t len;
    uint32_t len_crc;
    std::memcpy(&len, b + off, 8);
    std::memcpy(&len_crc, b + off + 8, 4);
    if (len_crc != masked(b + off, 8)) throw std::runtime_error("bad length crc at " + std::to_string(off));
    if (all.size() - off - 12 < len + 4) throw std::runtime_error("truncated record at " + std::to_string(off));
    uint32_t data_crc;
    std::memcpy(&data_crc, b + off + 12 + len, 4);
    if (data_crc != masked(b + off + 12, size_t(len))) throw std::runtime_error("bad data crc at " + std::to_string(off));
    out.push_back(decode_event(all.substr(off + 12, size_t(len))));
    off += 12 + len + 4;
  }
  return out;
}

class TensorBoard : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / ("reckon_tb_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

std::string read_file(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(Crc32c, KnownVectors) {
  // The CRC-32C check value and RFC 3720's 32 zero bytes.
  const char* s = "123456789";
  EXPECT_EQ(io::crc32c(s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_bitwise(reinterpret_cast<const uint8_t*>(s), 9), 0xE3069283u);
  uint8_t zeros[32] = {};
  EXPECT_EQ(io::crc32c(zeros, 32), 0x8A9136AAu);
  // Continuing a CRC equals one pass.
  EXPECT_EQ(io::crc32c(s + 4, 5, io::crc32c(s, 4)), 0xE3069283u);
}

TEST_F(TensorBoard, WriterRecordsReadBack) {
  std::string path;
  {
    io::EventWriter w(dir_.string());
    path = w.path();
    EXPECT_EQ(fs::path(path).filename().string().rfind("events.out.tfevents.", 0), 0u);
    w.add_scalar("train/loss", 2.5f, 1, 1000.25);
    w.add_scalar("train/accuracy", 0.125f, 1, 1000.5);
    w.add_scalar("train/lr", 0.05f, 300, 1001.0);
    w.add_scalar("test/accuracy", 0.875f, 1LL << 40, 1002.0);  // a step that needs a long varint
    w.flush();
    EXPECT_EQ(w.bytes(), int64_t(fs::file_size(path)));
  }
  auto ev = read_events(path);
  ASSERT_EQ(ev.size(), 5u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  EXPECT_GT(ev[0].wall_time, 1.6e9);  // now, in unix seconds
  EXPECT_TRUE(ev[0].scalars.empty());
  struct Want {
    const char* tag;
    float value;
    int64_t step;
    double wall;
  } want[] = {{"train/loss", 2.5f, 1, 1000.25},
              {"train/accuracy", 0.125f, 1, 1000.5},
              {"train/lr", 0.05f, 300, 1001.0},
              {"test/accuracy", 0.875f, 1LL << 40, 1002.0}};
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(want[i].tag);
    const Event& e = ev[i + 1];
    ASSERT_EQ(e.scalars.size(), 1u);
    EXPECT_EQ(e.scalars[0].first, want[i].tag);
    EXPECT_EQ(e.scalars[0].second, want[i].value);  // bit-exact floats
    EXPECT_TRUE(e.has_step);
    EXPECT_EQ(e.step, want[i].step);
    EXPECT_EQ(e.wall_time, want[i].wall);
  }
}

TEST_F(TensorBoard, ReaderCatchesCorruption) {
  std::string path;
  {
    io::EventWriter w(dir_.string());
    path = w.path();
    w.add_scalar("a", 1.0f, 1, 5.0);
  }
  std::string bytes = read_file(path);
  // One flipped bit in the last record's data, in the first record's length, in its length CRC.
  for (size_t pos : {bytes.size() - 6, size_t(0), size_t(9)}) {
    std::string bad = bytes;
    bad[pos] = char(bad[pos] ^ 0x10);
    std::ofstream(path, std::ios::binary).write(bad.data(), std::streamsize(bad.size()));
    EXPECT_THROW(read_events(path), std::runtime_error) << "flipped byte " << pos;
  }
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() - 3));
  EXPECT_THROW(read_events(path), std::runtime_error);
}

TEST_F(TensorBoard, ResumeCutsAndAppends) {
  std::string path;
  int64_t mark = 0;
  {
    io::EventWriter w(dir_.string());
    path = w.path();
    w.add_scalar("x", 1.0f, 1, 10.0);
    w.flush();
    mark = w.bytes();
    w.add_scalar("x", 2.0f, 2, 11.0);  // written after the "checkpoint": must go
  }
  {
    io::EventWriter w(path, mark);
    EXPECT_EQ(w.path(), path);
    w.add_scalar("x", 3.0f, 2, 12.0);
  }
  auto ev = read_events(path);
  ASSERT_EQ(ev.size(), 3u);
  EXPECT_EQ(ev[1].scalars[0].second, 1.0f);
  EXPECT_EQ(ev[2].scalars[0].second, 3.0f);
  EXPECT_EQ(ev[2].step, 2);
  // A missing file on resume: a new one in the same directory.
  io::EventWriter w((dir_ / "gone").string(), 100);
  EXPECT_NE(w.path(), path);
  EXPECT_EQ(fs::path(w.path()).parent_path(), dir_);
}

TEST_F(TensorBoard, MetricsCsvAndJsonl) {
  {
    io::MetricsLog m(dir_.string(), {"loss", "accuracy"});
    m.write("train", 10, {{"loss", double(0.3f)}, {"accuracy", 0.5}});
    m.write("test", 10, {{"accuracy", 0.875}});
    EXPECT_THROW(m.write("train", 11, {{"nope", 1.0}}), Error);
    m.flush();
  }
  std::string csv = read_file((dir_ / "metrics.csv").string());
  std::string js = read_file((dir_ / "metrics.jsonl").string());
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "kind,step,loss,accuracy,wall_time");
  EXPECT_NE(csv.find("\ntrain,10,0.3,0.5,"), std::string::npos) << csv;  // float shortest form
  EXPECT_NE(csv.find("\ntest,10,,0.875,"), std::string::npos) << csv;
  EXPECT_NE(js.find("{\"kind\":\"train\",\"step\":10,\"loss\":0.3,\"accuracy\":0.5,\"wall_time\":"), std::string::npos)
      << js;
  EXPECT_NE(js.find("{\"kind\":\"test\",\"step\":10,\"accuracy\":0.875,"), std::string::npos) << js;
  EXPECT_EQ(io::MetricsLog::number(0.1), "0.1");
  EXPECT_EQ(io::MetricsLog::number(double(0.1f)), "0.1");
  EXPECT_EQ(io::MetricsLog::number(1.0 / 3.0), "0.3333333333333333");
}

// A short training run's own event file, read back: every scalar the trainer promises, at
// increasing steps, with finite values, and the metrics files agree on the test accuracy.
TEST_F(TensorBoard, TrainingRunEventsReadBack) {
  train::TrainConfig c;
  c.model = "lenet5";
  c.data = "synthetic:1x28x28:256:4";
  c.epochs = 2;
  c.batch = 32;
  c.lr = 0.02;
  c.log_every = 2;
  c.threads = 1;
  c.out = (dir_ / "run").string();
  c.verbose = 0;
  train::TrainResult r = train::train(c);
  std::string events;
  for (const auto& e : fs::directory_iterator(c.out))
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) events = e.path().string();
  ASSERT_FALSE(events.empty());
  auto ev = read_events(events);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[0].file_version, "brain.Event:2");
  std::map<std::string, std::vector<std::pair<int64_t, float>>> by_tag;
  for (size_t i = 1; i < ev.size(); ++i)
    for (const auto& [tag, v] : ev[i].scalars) by_tag[tag].emplace_back(ev[i].step, v);
  for (const char* tag : {"train/loss", "train/accuracy", "train/lr", "train/images_per_s", "epoch/train_loss",
                          "test/loss", "test/accuracy"}) {
    SCOPED_TRACE(tag);
    ASSERT_TRUE(by_tag.count(tag));
    const auto& pts = by_tag[tag];
    for (size_t i = 0; i < pts.size(); ++i) {
      EXPECT_TRUE(std::isfinite(pts[i].second));
      if (i) {
        EXPECT_GT(pts[i].first, pts[i - 1].first);
      }
    }
  }
  EXPECT_EQ(by_tag["train/loss"].size(), 8u);  // 2 epochs x 8 batches / log_every 2
  EXPECT_EQ(by_tag["test/accuracy"].size(), 2u);
  EXPECT_EQ(by_tag["test/accuracy"].back().first, 16);
  EXPECT_EQ(by_tag["test/accuracy"].back().second, float(r.final_eval.accuracy));
  // The first logged loss is the mean of steps 1 and 2.
  EXPECT_FLOAT_EQ(by_tag["train/loss"][0].second, float((double(r.losses[0]) + double(r.losses[1])) / 2));
  // Learning rate on the cosine schedule: lr at step index 1 (the second step).
  EXPECT_FLOAT_EQ(by_tag["train/lr"][0].second, float(0.02 * (1 + std::cos(M_PI * 1 / 16)) / 2));
}
