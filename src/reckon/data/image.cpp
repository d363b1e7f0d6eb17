// PNG through libpng's simplified API, JPEG through libjpeg with a setjmp error handler. The
// JPEG decoder lives in one function holding only C objects, so a longjmp out of libjpeg skips
// no C++ destructor; a JPEG warning (e.g. a truncated file that libjpeg would pad with gray)
// counts as an error.
#include "reckon/data/image.h"

#include <jpeglib.h>
#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "reckon/data/detail.h"

namespace reckon::data {

namespace {

namespace fs = std::filesystem;
using detail::file_error;

// The most a decoded image may take: 256 MiB (9,459 x 9,459 RGB), about PIL's decompression-bomb
// limit. A header may claim 65,535 x 65,535 in a few hundred bytes; it is refused before the
// decoder allocates anything for it (a progressive JPEG's coefficient buffers would be 25 GB).
constexpr uint64_t kMaxImageBytes = uint64_t(1) << 28;

Image decode_png(const std::string& path, const std::vector<uint8_t>& bytes) {
  png_image png;
  std::memset(&png, 0, sizeof png);
  png.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&png, bytes.data(), bytes.size()))
    throw file_error("png", path, fmt::format("bad PNG: {}", png.message));
  // Keep the file's own channels (gray or color, with or without alpha), 8-bit sRGB.
  png.format &= PNG_FORMAT_FLAG_COLOR | PNG_FORMAT_FLAG_ALPHA;
  Image img;
  img.height = png.height;
  img.width = png.width;
  img.channels = PNG_IMAGE_SAMPLE_CHANNELS(png.format);
  const uint64_t size = uint64_t(img.height) * uint64_t(img.width) * uint64_t(img.channels);
  if (size == 0 || size > kMaxImageBytes) {
    png_image_free(&png);
    throw file_error("png", path,
                     fmt::format("unsupported size {}x{} (more than 256 MiB decoded, or empty)", img.width, img.height));
  }
  img.pixels.resize(size_t(size));
  if (!png_image_finish_read(&png, nullptr, img.pixels.data(), 0, nullptr))
    throw file_error("png", path, fmt::format("bad PNG: {}", png.message));
  return img;
}

struct JpegError {
  jpeg_error_mgr mgr;  // first, so a j_common_ptr's err is a JpegError*
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

extern "C" void jpeg_on_message(j_common_ptr cinfo) {  // warnings: keep the text, print nothing
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
}

// Decodes into *out (sized here); on failure returns false with the reason in err.
bool decode_jpeg_c(const uint8_t* data, size_t size, std::vector<uint8_t>* out, int64_t* h, int64_t* w,
                   int64_t* c, char* err, size_t err_size) {
  jpeg_decompress_struct cinfo;
  JpegError jerr;
  cinfo.err = jpeg_std_error(&jerr.mgr);
  jerr.mgr.error_exit = jpeg_on_error;
  jerr.mgr.output_message = jpeg_on_message;
  jerr.message[0] = '\0';
  if (setjmp(jerr.jump)) {
    jpeg_destroy_decompress(&cinfo);
    std::snprintf(err, err_size, "bad JPEG: %s", jerr.message);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    std::snprintf(err, err_size, "CMYK JPEG images are not supported");
    return false;
  }
  cinfo.out_color_space = cinfo.jpeg_color_space == JCS_GRAYSCALE ? JCS_GRAYSCALE : JCS_RGB;
  // The size is checked before jpeg_start_decompress, which allocates for the whole image.
  jpeg_calc_output_dimensions(&cinfo);
  const uint64_t bytes = uint64_t(cinfo.output_height) * cinfo.output_width * uint64_t(cinfo.output_components);
  if (bytes == 0 || bytes > kMaxImageBytes) {
    std::snprintf(err, err_size, "unsupported size %ux%u (more than 256 MiB decoded, or empty)", cinfo.output_width,
                  cinfo.output_height);
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_start_decompress(&cinfo);
  *h = cinfo.output_height;
  *w = cinfo.output_width;
  *c = cinfo.output_components;
  out->resize(size_t(bytes));
  const size_t stride = size_t(cinfo.output_width) * size_t(cinfo.output_components);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->data() + size_t(cinfo.output_scanline) * stride;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  const long warnings = jerr.mgr.num_warnings;
  jpeg_destroy_decompress(&cinfo);
  if (warnings > 0) {
    std::snprintf(err, err_size, "corrupt JPEG data: %s", jerr.message);
    return false;
  }
  return true;
}

Image decode_jpeg(const std::string& path, const std::vector<uint8_t>& bytes) {
  Image img;
  char err[JMSG_LENGTH_MAX + 64] = {0};
  if (!decode_jpeg_c(bytes.data(), bytes.size(), &img.pixels, &img.height, &img.width, &img.channels, err,
                     sizeof err))
    throw file_error("jpeg", path, err);
  return img;
}

}  // namespace

Image read_image(const std::string& path) {
  std::vector<uint8_t> bytes = detail::read_whole_file("image", path);
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0) return decode_png(path, bytes);
  if (bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff) return decode_jpeg(path, bytes);
  throw file_error("image", path,
                   bytes.empty() ? std::string("empty file") : std::string("not a PNG or JPEG file (unknown first bytes)"));
}

void image_to_planes(const Image& img, int64_t channels, uint8_t* dst) {
  RK_CHECK(channels == 1 || channels == 3, "[image] cannot convert to {} channels (want 1 or 3)", channels);
  const int64_t hw = img.height * img.width, sc = img.channels;
  const uint8_t* src = img.pixels.data();
  const bool color = sc >= 3;
  for (int64_t p = 0; p < hw; ++p) {
    const uint8_t* s = src + p * sc;
    if (channels == 3) {
      for (int64_t c = 0; c < 3; ++c) dst[c * hw + p] = color ? s[c] : s[0];
    } else {
      dst[p] = color ? uint8_t((299 * s[0] + 587 * s[1] + 114 * s[2] + 500) / 1000) : s[0];
    }
  }
}

}  // namespace reckon::data
