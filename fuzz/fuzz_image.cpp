// The image path of `folder:` datasets: PNG and JPEG decoding (libpng, libjpeg) behind
// read_image, and the conversion to planes. The first byte of a PNG or JPEG picks the name.
#include <vector>

#include "fuzz_util.h"
#include "reckon/data/image.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  const bool png = size > 0 && data[0] == 0x89;
  const std::string p = fuzz::put(png ? "in.png" : "in.jpg", data, size);
  fuzz::expect_clean([&] {
    data::Image img = data::read_image(p);
    if (int64_t(img.width) * img.height > (int64_t(1) << 24)) return;
    for (int64_t c : {1, 3}) {
      std::vector<uint8_t> planes(size_t(c * img.width * img.height));
      data::image_to_planes(img, c, planes.data());
    }
  });
  return 0;
}
