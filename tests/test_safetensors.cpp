// safetensors reader and writer: round trips, a file written by Python's `safetensors`
// package (golden/misc, made by scripts/make_golden.py), and every kind of malformed file,
// whose bytes are built here. A bad file must raise reckon::Error with one line naming the
// file, never crash.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "reckon/io/safetensors.h"

using namespace reckon;
namespace fs = std::filesystem;

namespace {

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("reckon_st_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Writes raw bytes to a file in the test directory and returns its path.
  std::string write_bytes(const std::string& name, const std::string& bytes) const {
    std::string p = path(name);
    std::ofstream f(p, std::ios::binary);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    return p;
  }
  fs::path dir_;
};

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A file of the given JSON header and data section; header_len overrides the length field.
std::string st_bytes(const std::string& header, const std::string& data,
                     uint64_t header_len = std::numeric_limits<uint64_t>::max() - 1) {
  uint64_t n = header_len == std::numeric_limits<uint64_t>::max() - 1 ? header.size() : header_len;
  return le64(n) + header + data;
}

std::string raw_bytes(const Tensor& t) {
  return std::string(static_cast<const char*>(t.raw_data()), size_t(t.nbytes()));
}

// Loads path expecting reckon::Error; returns its message.
std::string load_error(const std::string& p) {
  try {
    load_safetensors(p);
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a reckon::Error but " << typeid(e).name() << ": " << e.what();
    return "";
  }
  ADD_FAILURE() << "loading " << p << " did not throw";
  return "";
}

void expect_one_line_naming(const std::string& msg, const std::string& file) {
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(file), std::string::npos) << "message does not name the file: " << msg;
}

}  // namespace

TEST_F(Safetensors, RoundTripEveryDtype) {
  std::vector<std::pair<std::string, Tensor>> ts;
  const DType all[] = {DType::f32, DType::f64, DType::bf16, DType::f16,
                       DType::i8,  DType::u8,  DType::i32,  DType::i64};
  for (DType t : all) {
    Tensor x = Tensor::empty({2, 3}, t);
    for (int64_t i = 0; i < 6; ++i) x.set(i, is_floating(t) ? 0.25 * double(i) - 0.5 : double(i * 7 - 3 * (t != DType::u8)));
    ts.emplace_back(std::string(dtype_name(t)), x);
  }
  ts.emplace_back("scalar", Tensor::full({}, 3.5, DType::f64));
  ts.emplace_back("empty", Tensor::zeros({0, 4}, DType::f32));
  // A transposed view: written in logical order.
  Tensor base = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor tr = make_view(base, {3, 2}, {1, 3}, 0);
  ts.emplace_back("transposed", tr);
  std::map<std::string, std::string> meta{{"k", "v"}, {"json", "{\"a\": [1, 2]}"}, {"unicode", "\u03bc"}};

  std::string p = path("rt.safetensors");
  save_safetensors(p, ts, meta);
  SafetensorsFile f = load_safetensors(p);
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), ts.size());
  for (const auto& [name, t] : ts) {
    ASSERT_TRUE(f.tensors.count(name)) << name;
    const Tensor& r = f.tensors.at(name);
    EXPECT_EQ(r.dtype(), t.dtype()) << name;
    EXPECT_EQ(r.shape(), t.shape()) << name;
    EXPECT_TRUE(r.is_contiguous()) << name;
    EXPECT_EQ(r.to_vector(), t.to_vector()) << name;
  }
  EXPECT_EQ(f.tensors.at("transposed").to_vector(), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  // Bit-exact for the 16-bit floats.
  EXPECT_EQ(raw_bytes(f.tensors.at("bf16")), raw_bytes(ts[2].second));
  EXPECT_EQ(raw_bytes(f.tensors.at("f16")), raw_bytes(ts[3].second));

  // The header is padded to 8 bytes and holds no metadata key when there is none.
  save_safetensors(p, {{"a", Tensor::ones({3})}}, {});
  std::ifstream in(p, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 12);
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
  EXPECT_TRUE(load_safetensors(p).metadata.empty());
}

TEST_F(Safetensors, LoadsWithTheCurrentTag) {
  std::string p = path("tag.safetensors");
  save_safetensors(p, {{"w", Tensor::ones({4, 4})}}, {});
  {
    TagGuard g(Tag::param);
    SafetensorsFile f = load_safetensors(p);
    EXPECT_EQ(f.tensors.at("w").storage().tag(), Tag::param);
  }
  {
    TagGuard g(Tag::input);
    EXPECT_EQ(load_safetensors(p).tensors.at("w").storage().tag(), Tag::input);
  }
}

TEST_F(Safetensors, SaveReplacesAtomicallyAndLeavesNoTemporaryFile) {
  std::string p = path("a.safetensors");
  save_safetensors(p, {{"x", Tensor::full({5}, 1.0)}}, {{"v", "1"}});
  save_safetensors(p, {{"x", Tensor::full({7}, 2.0)}}, {{"v", "2"}});
  SafetensorsFile f = load_safetensors(p);
  EXPECT_EQ(f.metadata.at("v"), "2");
  EXPECT_EQ(f.tensors.at("x").shape(), (Shape{7}));
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "a.safetensors");
  }
  EXPECT_EQ(files, 1);
  // Relative path: the temporary file goes to the current directory.
  fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  save_safetensors("rel.safetensors", {{"x", Tensor::ones({2})}}, {});
  fs::current_path(cwd);
  EXPECT_EQ(load_safetensors(path("rel.safetensors")).tensors.at("x").numel(), 2);
}

TEST_F(Safetensors, SaveRejectsBadArgumentsAndKeepsTheOldFile) {
  std::string p = path("keep.safetensors");
  save_safetensors(p, {{"x", Tensor::ones({3})}}, {});
  auto expect_save_error = [&](const std::vector<std::pair<std::string, Tensor>>& ts, const std::string& what) {
    try {
      save_safetensors(p, ts, {});
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      expect_one_line_naming(e.what(), p);
    }
  };
  expect_save_error({{"a", Tensor::ones({1})}, {"a", Tensor::ones({2})}}, "a repeated name");
  expect_save_error({{"__metadata__", Tensor::ones({1})}}, "the reserved name");
  expect_save_error({{"", Tensor::ones({1})}}, "an empty name");
  expect_save_error({{"u", Tensor()}}, "an undefined tensor");
  expect_save_error({{"m", Tensor::empty({2}, DType::f32, Device::meta)}}, "a meta tensor");
  expect_save_error({{std::string("bad\xff", 4), Tensor::ones({1})}}, "a name that is not UTF-8");
  EXPECT_EQ(load_safetensors(p).tensors.at("x").shape(), (Shape{3}));
  EXPECT_THROW(save_safetensors(path("no/such/dir/f.safetensors"), {{"x", Tensor::ones({1})}}, {}), Error);
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1);
}

TEST_F(Safetensors, ReadsAFileWrittenByPython) {
  std::string p = std::string(RECKON_SOURCE_DIR) + "/golden/misc/python_written.safetensors";
  SafetensorsFile f = load_safetensors(p);
  EXPECT_EQ(f.metadata.at("written_by"), "safetensors (python)");
  EXPECT_EQ(f.metadata.at("unicode"), "\u03bc\u2713");
  ASSERT_EQ(f.tensors.size(), 11u);
  auto& t = f.tensors;
  EXPECT_EQ(t.at("f32").dtype(), DType::f32);
  EXPECT_EQ(t.at("f32").shape(), (Shape{2, 3}));
  EXPECT_EQ(t.at("f32").to_vector(), (std::vector<double>{-1, -0.5, 0, 0.5, 1, 1.5}));
  ASSERT_EQ(t.at("f64").dtype(), DType::f64);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(t.at("f64").data<double>()[i], double(i) / 3.0);
  EXPECT_EQ(t.at("bf16").dtype(), DType::bf16);
  EXPECT_EQ(t.at("bf16").to_vector(), (std::vector<double>{1.0, -2.5, 0.15625, 256.0, -0.0078125}));
  EXPECT_EQ(t.at("f16").dtype(), DType::f16);
  EXPECT_EQ(t.at("f16").to_vector(), (std::vector<double>{0.5, -1.25, 65504.0, std::ldexp(1.0, -14)}));
  EXPECT_EQ(t.at("i8").dtype(), DType::i8);
  EXPECT_EQ(t.at("i8").to_vector(), (std::vector<double>{-128, -1, 0, 127}));
  EXPECT_EQ(t.at("u8").dtype(), DType::u8);
  EXPECT_EQ(t.at("u8").to_vector(), (std::vector<double>{0, 1, 200, 255}));
  EXPECT_EQ(t.at("i32").dtype(), DType::i32);
  EXPECT_EQ(t.at("i32").to_vector(), (std::vector<double>{-2147483648.0, 0, 2147483647.0}));
  ASSERT_EQ(t.at("i64").dtype(), DType::i64);
  const int64_t* i64 = t.at("i64").data<int64_t>();
  EXPECT_EQ(i64[0], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(i64[1], 1);
  EXPECT_EQ(i64[2], (int64_t(1) << 62) + 1);
  EXPECT_EQ(t.at("scalar").shape(), Shape{});
  EXPECT_EQ(t.at("scalar").item(), 3.5);
  EXPECT_EQ(t.at("empty").shape(), (Shape{0, 3}));
  EXPECT_EQ(t.at("nested.name/with.dots").to_vector(), (std::vector<double>{7}));

  // Written back by reckon and read again: the same tensors.
  std::vector<std::pair<std::string, Tensor>> back(f.tensors.begin(), f.tensors.end());
  save_safetensors(path("again.safetensors"), back, f.metadata);
  SafetensorsFile g = load_safetensors(path("again.safetensors"));
  EXPECT_EQ(g.metadata, f.metadata);
  for (const auto& [name, x] : f.tensors) EXPECT_EQ(raw_bytes(g.tensors.at(name)), raw_bytes(x)) << name;
}

TEST_F(Safetensors, MissingShortAndNonRegularFiles) {
  std::string p = path("missing.safetensors");
  std::string m = load_error(p);
  expect_one_line_naming(m, p);
  EXPECT_NE(m.find("no such file"), std::string::npos) << m;

  expect_one_line_naming(load_error(dir_.string()), dir_.string());

  p = write_bytes("empty.safetensors", "");
  m = load_error(p);
  expect_one_line_naming(m, p);
  EXPECT_NE(m.find("byte 0"), std::string::npos) << m;

  p = write_bytes("short.safetensors", std::string("\x10\0\0\0\0", 5));
  m = load_error(p);
  expect_one_line_naming(m, p);
  EXPECT_NE(m.find("5 bytes"), std::string::npos) << m;
}

TEST_F(Safetensors, HeaderLengthBeyondTheFile) {
  std::string p = write_bytes("long.safetensors", st_bytes("{}", "", 1000));
  std::string m = load_error(p);
  expect_one_line_naming(m, p);
  EXPECT_NE(m.find("1000"), std::string::npos) << m;
  EXPECT_NE(m.find("byte 0"), std::string::npos) << m;
  // The largest length must not wrap around when 8 is added.
  p = write_bytes("huge.safetensors", st_bytes("{}", "", std::numeric_limits<uint64_t>::max()));
  expect_one_line_naming(load_error(p), p);
  p = write_bytes("huge2.safetensors", st_bytes("{}", "", std::numeric_limits<uint64_t>::max() - 7));
  expect_one_line_naming(load_error(p), p);
}

TEST_F(Safetensors, BadJson) {
  struct Bad {
    const char* name;
    std::string header;
    const char* expect;  // a part of the message
  };
  const Bad cases[] = {
      {"syntax", "{,}", "at byte 9"},  // the comma: 8 length bytes, then '{' at byte 8
      {"double_comma", "{\"a\": {\"dtype\": \"F32\",, }}", "byte"},
      {"truncated", "{\"a\": ", "byte"},
      {"newline_in_junk", "{\n\n\x01\x02\n", "byte"},
      {"not_utf8", "{\"a\xff\": 1}", "byte"},
      {"array", "[1, 2, 3]", "array"},
      {"number", "42", "number"},
      {"empty_header", "", "byte"},
  };
  for (const auto& c : cases) {
    std::string p = write_bytes(std::string(c.name) + ".safetensors", st_bytes(c.header, ""));
    std::string m = load_error(p);
    expect_one_line_naming(m, p);
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.name << ": " << m;
  }
}

TEST_F(Safetensors, BadEntries) {
  const std::string data(64, '\x01');
  struct Bad {
    const char* name;
    std::string header;
    const char* tensor;  // the tensor the message must name ("" for none)
    const char* expect;  // a part of the message
  };
  const Bad cases[] = {
      {"entry_not_object", R"({"w": 3})", "\"w\"", "not an object"},
      {"missing_dtype", R"({"w": {"shape": [1], "data_offsets": [0, 4]}})", "\"w\"", "dtype"},
      {"dtype_not_string", R"({"w": {"dtype": 7, "shape": [1], "data_offsets": [0, 4]}})", "\"w\"", "dtype"},
      {"unknown_dtype", R"({"w": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})", "\"w\"", "F8_E4M3"},
      {"bool_dtype", R"({"w": {"dtype": "BOOL", "shape": [1], "data_offsets": [0, 1]}})", "\"w\"", "BOOL"},
      {"missing_shape", R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})", "\"w\"", "shape"},
      {"negative_dim", R"({"w": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 8]}})", "\"w\"", "shape"},
      {"fractional_dim", R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})", "\"w\"", "shape"},
      {"missing_offsets", R"({"w": {"dtype": "F32", "shape": [1]}})", "\"w\"", "data_offsets"},
      {"three_offsets", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4, 8]}})", "\"w\"",
       "data_offsets"},
      {"negative_offset", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})", "\"w\"",
       "data_offsets"},
      {"out_of_range", R"({"w": {"dtype": "F32", "shape": [20], "data_offsets": [0, 80]}})", "\"w\"", "byte"},
      {"reversed", R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", "\"w\"", "byte"},
      {"size_mismatch", R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", "\"w\"", "byte"},
      {"shape_overflow",
       R"({"w": {"dtype": "F64", "shape": [4611686018427387904, 4611686018427387904], "data_offsets": [0, 8]}})",
       "\"w\"", "byte"},
      {"overlap",
       R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       "\"b\"", "byte"},
      {"same_range",
       R"({"a": {"dtype": "I32", "shape": [2], "data_offsets": [16, 24]},
           "b": {"dtype": "U8", "shape": [8], "data_offsets": [16, 24]}})",
       "\"b\"", "overlap"},
      {"duplicate_name",
       R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       "\"a\"", "twice"},
      {"metadata_not_object", R"({"__metadata__": [1]})", "", "__metadata__"},
      {"metadata_not_string", R"({"__metadata__": {"epoch": 3}})", "", "\"epoch\""},
  };
  for (const auto& c : cases) {
    std::string p = write_bytes(std::string(c.name) + ".safetensors", st_bytes(c.header, data));
    std::string m = load_error(p);
    expect_one_line_naming(m, p);
    if (*c.tensor) {
      EXPECT_NE(m.find(c.tensor), std::string::npos) << c.name << ": no tensor name in " << m;
    }
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.name << ": " << m;
  }
}

TEST_F(Safetensors, AcceptsWhatTheFormatAllows) {
  // Zero-sized tensors anywhere, keys in any order, a padded header, extra keys in an entry.
  std::string header = R"({"b": {"dtype": "I32", "shape": [1], "data_offsets": [1, 5], "extra": true},
      "z": {"dtype": "F32", "shape": [0, 5], "data_offsets": [4, 4]},
      "a": {"dtype": "U8", "shape": [], "data_offsets": [0, 1]}}    )";
  std::string data = std::string("\x2a", 1) + std::string("\x07\0\0\0", 4);
  SafetensorsFile f = load_safetensors(write_bytes("ok.safetensors", st_bytes(header, data)));
  EXPECT_EQ(f.tensors.at("a").item(), 42);
  EXPECT_EQ(f.tensors.at("b").item(), 7);
  EXPECT_EQ(f.tensors.at("z").shape(), (Shape{0, 5}));
  EXPECT_TRUE(load_safetensors(write_bytes("empty_obj.safetensors", st_bytes("{}", ""))).tensors.empty());
}

// The offsets must tile the data: a hole, trailing bytes, or a header length one byte short (which
// would read every tensor shifted by a byte) are refused, naming the file.
TEST_F(Safetensors, OffsetsMustTileTheDataExactly) {
  const std::string hole = R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
      "b": {"dtype": "U8", "shape": [1], "data_offsets": [2, 3]}})";
  std::string p = write_bytes("hole.safetensors", st_bytes(hole, std::string(3, '\1')));
  std::string m = load_error(p);
  expect_one_line_naming(m, p);
  EXPECT_NE(m.find("bytes 1..2 of the data to no tensor"), std::string::npos) << m;
  const std::string one = R"({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})";
  p = write_bytes("trailing.safetensors", st_bytes(one, std::string(2, '\1')));
  m = load_error(p);
  expect_one_line_naming(m, p);
  EXPECT_NE(m.find("cover 1 bytes but the data"), std::string::npos) << m;

  // A real file with its header length one byte short: the header still parses (its last byte is
  // padding), and the data would start a byte early.
  const std::string good_path = path("good.safetensors");
  save_safetensors(good_path, {{"w", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3})}}, {{"epoch", "3"}});
  std::ifstream in(good_path, std::ios::binary);
  std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | uint8_t(b[size_t(i)]);
  ASSERT_EQ(b[size_t(8 + len - 1)], ' ') << "the writer pads its header";
  len -= 1;
  for (int i = 0; i < 8; ++i) b[size_t(i)] = char(uint8_t(len >> (8 * i)));
  p = write_bytes("short_header.safetensors", b);
  m = load_error(p);
  expect_one_line_naming(m, p);
  EXPECT_NE(m.find("the header length or the offsets are wrong"), std::string::npos) << m;
}

// Every truncation of a good file, and every header byte replaced by a few values, either loads
// or throws reckon::Error: never a crash, never another exception.
TEST_F(Safetensors, CorruptedFilesNeverCrash) {
  std::string good_path = path("good.safetensors");
  save_safetensors(good_path,
                   {{"w", Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3})},
                    {"i", Tensor::from_vector({1, 2}, {2}, DType::i64)},
                    {"s", Tensor::full({}, 1.0, DType::bf16)}},
                   {{"epoch", "3"}});
  std::ifstream in(good_path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(good[size_t(i)]);

  auto try_load = [&](const std::string& bytes, const std::string& what) {
    std::string p = write_bytes("fuzz.safetensors", bytes);
    try {
      load_safetensors(p);
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_EQ(m.find('\n'), std::string::npos) << what << ": " << m;
      EXPECT_NE(m.find(p), std::string::npos) << what << ": " << m;
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": not a reckon::Error: " << e.what();
    }
  };
  for (size_t n = 0; n < good.size(); ++n) {
    std::string m = "truncated to " + std::to_string(n);
    try_load(good.substr(0, n), m);
  }
  const char values[] = {'\0', '"', '{', '9', '-', '\xff', ' '};
  for (size_t i = 0; i < 8 + header_len; ++i)
    for (char v : values) {
      std::string b = good;
      b[i] = v;
      try_load(b, "byte " + std::to_string(i) + " set to " + std::to_string(int(uint8_t(v))));
    }
}
