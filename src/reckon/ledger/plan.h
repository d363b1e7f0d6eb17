// The plan: how to train a model at a given effective batch within a memory budget. It walks
// the textbook's ladder — the run as asked (fp32, the whole batch at once), then mixed
// precision, then gradient accumulation (a micro-batch of 8 accumulated 4 times is a batch of
// 32), then recomputation of activations; direct convolutions where Winograd's workspace is what
// does not fit — and asks the ledger (ledger.h) for each rung's
// predicted peak and step time. Every rung is one ledger() call on the meta device, so a plan
// costs no real memory and no real compute, and it cannot disagree with what the ledger says.
//
// The budget covers what the ledger predicts: the step's tracked memory (parameters, gradients,
// optimizer state, activations, temporaries, kernel workspace and the input batch), as reckon's
// allocator counts it. It does not cover the process around the step: code, libraries,
// oneDNN's own buffers, the allocator's cache of freed blocks, the dataset held in memory.
// Leave room for those (`reckon ledger --measure` shows their size on this machine).
//
// Not here: the learning rate for the new micro-batch (accumulation keeps the effective batch,
// so the recipe's learning rate stands), data-parallel plans over several devices.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "reckon/core/tensor.h"

namespace reckon {

struct PlanConfig {
  std::string model;                 // zoo name
  int64_t batch = 0;                 // the effective batch to keep (micro-batch x accumulation)
  int64_t memory_bytes = 0;          // the budget (see the file comment for what it covers)
  std::string device = "cpu";        // catalog key (devices.h) the step is timed for
  Shape input;                       // one sample's C,H,W; empty: the model's default
  int64_t num_classes = 0;           // 0: the model's default
  std::string optimizer = "sgd";     // "sgd" or "adamw"
  double momentum = 0.9;             // SGD momentum
  std::vector<std::string> precisions = {"fp32", "bf16", "fp16"};  // tried in this order
  bool allow_recompute = true;       // also try recomputing each block's activations
  // Also try direct convolutions where the default algorithm's kernels (Winograd) need
  // workspace that keeps a rung from fitting. Only when the process's algorithm is auto.
  bool allow_direct_conv = true;
  std::function<void(const std::string&)> progress;  // told which rung runs next (may be empty)
};

// One configuration of the ladder: micro_batch x accum = the effective batch.
struct PlanRung {
  int64_t micro_batch = 0, accum = 1;
  std::string precision;
  bool recompute = false;
  bool direct_conv = false;          // convolutions forced direct (no Winograd workspace)
  int64_t peak_bytes = 0;            // predicted (ledger on meta)
  double step_s = 0;                 // predicted time of one optimizer step (all accum micro-batches) on cfg.device
  double images_per_s = 0;           // effective batch / step_s
  bool fits = false;                 // peak_bytes <= memory_bytes
};

struct Plan {
  PlanConfig config;
  std::string device_description;    // the device the times are for ("AMD EPYC, 2 threads (calibrated)")
  int64_t device_memory_bytes = 0;   // that device's memory
  bool recompute_applies = true;     // false: the model has no blocks to recompute (no recompute rungs)
  std::vector<std::string> notes;    // slower_precision_note (devices.h) for each precision tried, where it has one
  double search_s = 0;               // wall time of the search
  std::vector<PlanRung> ladder;      // every configuration tried, in ladder order
  int chosen = -1;                   // index of the fastest rung that fits, -1 if none
  const PlanRung* best() const;      // null if none fits
  int smallest() const;              // index of the rung with the smallest peak (-1: empty ladder)
};

// Searches micro-batch, precision, accumulation and recomputation for cfg.batch images per
// optimizer step within cfg.memory_bytes.
// requires: cfg.batch > 0, cfg.memory_bytes > 0, cfg.precisions non-empty and each one of
//           fp32/bf16/fp16, a known model, device and optimizer.
// ensures:  micro-batches are divisors of cfg.batch, from cfg.batch down to 1 (the powers of two
//           of the batch when it is one; else the largest divisor <= batch / 2^k for each k);
//           for each precision the micro-batch shrinks until a rung fits (smaller ones are only
//           slower); with recomputation the same, from the whole batch down to just above the
//           micro-batch that fitted without it. Where a rung without recomputation does not fit
//           and its convolutions planned Winograd (allow_direct_conv, the process's algorithm
//           auto), the same rung with direct convolutions follows it, until one fits (the
//           default-algorithm walk goes on: a smaller micro-batch may still be faster). So the
//           ladder holds every rung that could be the answer, and the whole batch with and
//           without recomputation for each precision. Ladder order: recompute off before on,
//           larger micro-batches first, precisions in cfg order, the default algorithm before
//           direct. chosen is the fastest rung that fits (ties: the smaller peak).
// Throws reckon::Error naming the flag (--batch, --memory, --precisions, model, --optimizer,
// --device) for a bad config, and the ledger's error (naming the layer) for a shape that breaks.
Plan plan(const PlanConfig& cfg);

// The ladder as a table (what `reckon plan` prints, and the trainer's error when nothing fits):
// a header, one row per rung (precision, micro-batch x accum, recompute, conv algorithm, predicted peak, share
// of the budget, step ms, images/s, fits), then "recommended: ..." with the `reckon train`
// command line, or "nothing fits ..." with the smallest predicted peak.
std::string format_plan(const Plan& p);
std::string plan_json(const Plan& p);

// The `reckon train` command line of one rung: "reckon train MODEL --batch 64 --accum 4
// --precision bf16 [--recompute] [--conv-algo direct] [--optimizer adamw]".
std::string plan_train_command(const Plan& p, const PlanRung& r);

}  // namespace reckon
