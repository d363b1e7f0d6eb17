// Image files: PNG through libpng, JPEG through libjpeg(-turbo), decoded to 8-bit samples.
// Used by the image-folder dataset; a bad file is a one-line reckon::Error naming it.
// Not here: resizing, colour management beyond what libpng does for sRGB/gamma, CMYK JPEG.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace reckon::data {

struct Image {
  int64_t height = 0, width = 0;
  int64_t channels = 0;         // 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA
  std::vector<uint8_t> pixels;  // (H, W, channels), interleaved
};

// requires: path is a PNG or JPEG file (recognised by its first bytes, not its name).
// ensures:  the decoded image with the file's own channels (16-bit PNG reduced to 8-bit).
Image read_image(const std::string& path);

// Writes img as `channels` planes (C, H, W) into dst (channels*H*W bytes), channels 1 or 3:
// alpha is dropped, gray is repeated to RGB, RGB becomes gray by ITU-R BT.601 luma
// (0.299 R + 0.587 G + 0.114 B, rounded).
void image_to_planes(const Image& img, int64_t channels, uint8_t* dst);

}  // namespace reckon::data
