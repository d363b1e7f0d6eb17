// A run's data from its settings: the --normalize and --augment specs, the --data spec opened
// as its two splits (and checked to agree), labels checked against the classes, and whether a
// zoo model fits the images (its forward MACs on the meta device). Errors name the flag and
// the spec. Not here: the dataset formats themselves (data/dataset.h), the loader (data/loader.h).
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "reckon/data/dataset.h"
#include "reckon/data/loader.h"

namespace reckon::train {

// --normalize: "none"; "auto" (per-channel mean and std of train_set; a constant channel is
// only centred); or "M1,M2,../S1,S2,.." with one mean and one positive std per channel.
data::Normalize parse_normalize(const std::string& spec, const data::Dataset& train_set);
// --augment: "none" (or empty), or a comma list of "crop[:PAD]" (PAD zeros, default 4) and "flip".
data::Augment parse_augment(const std::string& spec);

// The two splits of --data spec. ensures: both hold (C, H, W) images of one shape, num_classes
// classes; else throws naming the spec.
struct TrainData {
  std::unique_ptr<data::Dataset> train, test;
  std::unique_ptr<data::Dataset> val;  // the trainer's --val-split hold-out (then train is the rest); null: none
  Shape chw;                // one image
  int64_t num_classes = 0;  // K
};
TrainData open_train_data(const std::string& spec);

// Throws naming spec, the batch and the (0-based) epoch when a label of b is outside [0, K).
void check_labels(const data::Batch& b, int64_t K, const std::string& spec, int64_t epoch);

// Forward MACs of one (C, H, W) image through model_name on the meta device; throws one line
// naming the model and the shape when the image does not fit the model.
int64_t forward_macs(const std::string& model_name, int64_t in_channels, int64_t num_classes, const Shape& chw);

}  // namespace reckon::train
