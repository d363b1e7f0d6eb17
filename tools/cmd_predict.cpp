// `reckon predict MODEL|model.onnx --checkpoint FILE IMAGE...|DIR`: the top classes of image
// files and their probabilities, as text or JSON. The work is in reckon/train/predict.h.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "command.h"
#include "reckon/train/predict.h"

using namespace reckon;

namespace {

tools::RegisterCommand reg_predict([](CLI::App& app, CLI::App*& sub) -> tools::Runner {
  static train::PredictArgs a;
  static bool json = false;
  sub = app.add_subcommand("predict", "the top classes of PNG/JPEG images under a trained model");
  sub->add_option("model", a.model, "zoo model name or an .onnx file")->required();
  sub->add_option("images", a.inputs, "image files (PNG, JPEG) or directories of them")->required();
  sub->add_option("--checkpoint", a.checkpoint,
                  "a reckon checkpoint or a safetensors state dict (an .onnx file brings its own weights)");
  sub->add_option("--top", a.top, "classes per image")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--data", a.data,
                  "dataset whose classes and normalisation to use (default: the checkpoint's own; for a state dict "
                  "or an .onnx file fashion-mnist)");
  sub->add_option("--normalize", a.normalize, "auto (the checkpoint's figures) | none | M1,../S1,..")
      ->capture_default_str();
  sub->add_option("--batch", a.batch, "images per forward pass")->capture_default_str()->check(CLI::PositiveNumber);
  sub->add_option("--threads", a.threads, "CPU threads (0: OpenMP's default)")->capture_default_str();
  sub->add_flag("--json", json, "print JSON");
  return [] {
    const train::PredictResult r = train::predict(a);
    if (!r.weights_note.empty()) std::fprintf(stderr, "weights from %s: %s\n", a.checkpoint.c_str(), r.weights_note.c_str());
    std::fprintf(stderr, "input %s; normalize: %s; %zu images in %.2f s\n", shape_str(r.input).c_str(),
                 r.normalization.c_str(), r.images.size(), r.seconds);
    if (json) {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      for (const auto& p : r.images) {
        nlohmann::ordered_json top = nlohmann::ordered_json::array();
        for (size_t k = 0; k < p.classes.size(); ++k)
          top.push_back({{"class", p.classes[k]},
                         {"name", r.class_names[size_t(p.classes[k])]},
                         {"probability", p.probabilities[k]}});
        out.push_back({{"file", p.file}, {"width", p.width}, {"height", p.height}, {"channels", p.channels}, {"top", top}});
      }
      std::printf("%s\n", out.dump(2).c_str());
      return 0;
    }
    for (const auto& p : r.images) {
      std::printf("%s (%lldx%lld)\n", p.file.c_str(), (long long)p.width, (long long)p.height);
      for (size_t k = 0; k < p.classes.size(); ++k)
        std::printf("  %zu. %-20s %6.2f%%\n", k + 1, r.class_names[size_t(p.classes[k])].c_str(),
                    100 * p.probabilities[k]);
    }
    return 0;
  };
});

}  // namespace
