// `reckon predict`: the top classes of image files (PNG, JPEG) under a trained model, through
// the inference engine. Each image is decoded, converted to the model's channels (gray to RGB by
// repetition, RGB to gray by BT.601 luma, alpha dropped), resized to the model's input by
// bilinear interpolation with half-pixel centres (torch.nn.functional.interpolate's
// align_corners=False, no antialiasing), scaled to [0, 1] and normalised as the run trained.
// What the model expects (input shape, classes and their names, normalisation) comes from a
// reckon checkpoint; for a state dict or an .onnx file from the dataset given (as `reckon eval`).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"
#include "reckon/data/image.h"

namespace reckon::train {

struct PredictArgs {
  std::string model;                // zoo name or .onnx file
  std::string checkpoint;           // reckon checkpoint or state dict ("" for an .onnx file)
  std::vector<std::string> inputs;  // image files, or directories (their .png/.jpg/.jpeg files, sorted)
  std::string data;                 // "": the checkpoint's run's; needed for a state dict or .onnx file
  std::string normalize = "auto";   // as reckon eval's
  int64_t top = 5;
  int64_t batch = 64;
  int threads = 0;
};

struct Prediction {
  std::string file;
  int64_t height = 0, width = 0, channels = 0;  // the file's own
  std::vector<int64_t> classes;                 // the top classes, most probable first
  std::vector<double> probabilities;            // softmax of the logits, for those classes
};

struct PredictResult {
  std::vector<Prediction> images;
  std::vector<std::string> class_names;  // all K
  Shape input;                           // (C, H, W) the model takes
  std::string normalization;             // which, and why (as EvalResult's)
  std::string weights_note;
  double seconds = 0;
};

// Throws one line naming the file for an image that cannot be read, an input that is neither
// an image nor a directory, a directory without images, and as reckon eval for the model.
PredictResult predict(const PredictArgs& a);

// The file's image as the model's input: channels planes of height x width floats in [0, 1]
// (bilinear, half-pixel centres; the edge pixels repeated past the border).
std::vector<float> image_to_input(const data::Image& img, int64_t channels, int64_t height, int64_t width);

}  // namespace reckon::train
