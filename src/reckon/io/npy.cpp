#include "reckon/io/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "reckon/core/error.h"
#include "reckon/ops/functional.h"

namespace reckon::io {

void write_npy(const std::string& path, const Tensor& t) {
  RK_CHECK(t.device() == Device::cpu && (t.dtype() == DType::f32 || t.dtype() == DType::i64),
           "[npy] {}: writes f32 or i64 cpu tensors, got {}", path, t.str());
  const Tensor c = contiguous(t);
  // "(2, 3)", "(4,)" for one dim, "()" for a scalar
  std::string shape = c.dim() == 1 ? fmt::format("{},", c.size(0)) : fmt::format("{}", fmt::join(c.shape(), ", "));
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}",
                                   c.dtype() == DType::f32 ? "<f4" : "<i8", shape);
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += char(header.size() & 0xff);
  bytes += char(header.size() >> 8);
  bytes += header;
  bytes.append(static_cast<const char*>(c.raw_data()), size_t(c.nbytes()));
  std::FILE* f = std::fopen(path.c_str(), "wb");
  RK_CHECK(f != nullptr, "[npy] cannot write {}", path);
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  RK_CHECK(std::fclose(f) == 0 && ok, "[npy] writing {} failed", path);
}

Tensor read_npy(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  RK_CHECK(f.good(), "[npy] cannot open {}", path);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  RK_CHECK(all.size() >= 10 && all.compare(0, 6, "\x93NUMPY") == 0, "[npy] {}: not a .npy file", path);
  const size_t hlen = size_t(uint8_t(all[8])) | (size_t(uint8_t(all[9])) << 8);
  RK_CHECK(10 + hlen <= all.size(), "[npy] {}: truncated header", path);
  const std::string h = all.substr(10, hlen);
  DType dt;
  if (h.find("'<f4'") != std::string::npos) dt = DType::f32;
  else if (h.find("'<i8'") != std::string::npos) dt = DType::i64;
  else throw Error(fmt::format("[npy] {}: only <f4 and <i8 are read (header {})", path, h));
  RK_CHECK(h.find("'fortran_order': False") != std::string::npos, "[npy] {}: Fortran order is not read", path);
  const size_t a = h.find('('), b = h.find(')');
  RK_CHECK(a != std::string::npos && b != std::string::npos && a < b, "[npy] {}: no shape in the header", path);
  Shape s;
  std::stringstream ss(h.substr(a + 1, b - a - 1));
  std::string item;
  while (std::getline(ss, item, ','))
    if (item.find_first_of("0123456789") != std::string::npos) s.push_back(std::stoll(item));
  Tensor t = Tensor::empty(s, dt, Device::cpu);
  RK_CHECK(all.size() - 10 - hlen == size_t(t.nbytes()), "[npy] {}: {} data bytes for shape {} ({} needed)", path,
           all.size() - 10 - hlen, shape_str(s), t.nbytes());
  std::memcpy(t.raw_data(), all.data() + 10 + hlen, size_t(t.nbytes()));
  return t;
}

}  // namespace reckon::io
