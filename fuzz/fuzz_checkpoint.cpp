// The checkpoint loader: a safetensors file read as a reckon checkpoint (format, version,
// progress, rng state and config metadata), then bound to lenet5 and to an SGD optimizer, as
// `reckon eval --checkpoint` and `--resume` do.
#include "fuzz_util.h"
#include "reckon/io/checkpoint.h"
#include "reckon/onnx/import.h"
#include "reckon/optim/factory.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace reckon;
  const std::string p = fuzz::put("last.safetensors", data, size);
  fuzz::expect_clean([&] {
    io::Checkpoint ck = io::read_checkpoint(p);
    static auto model = onnx::make_model("lenet5");
    io::load_model_state(ck, *model, "lenet5");
    if (ck.has_training_state && ck.info.optimizer == "sgd") {
      auto opt = optim::make_optimizer(optim::OptimizerSpec{}, model->parameters());
      io::load_optimizer_state(ck, *opt, "sgd");
    }
  });
  return 0;
}
