// Training checkpoints in safetensors (see checkpoint.h). Everything read is checked before
// anything is copied, so a bad file leaves the model and optimizer as they were.
#include "reckon/io/checkpoint.h"
#include "reckon/core/json.h"

#include <algorithm>
#include <charconv>
#include <nlohmann/json.hpp>

#include "reckon/core/file.h"
#include "reckon/io/safetensors.h"

namespace reckon::io {

namespace {

using json = nlohmann::json;

const char* const kReservedKeys[] = {"format", "format_version", "model",          "optimizer", "step",
                                     "epoch",  "batch_in_epoch", "rng_state",      "config"};

bool is_reserved(const std::string& k) {
  for (const char* r : kReservedKeys)
    if (k == r) return true;
  return false;
}

std::string json_quote(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// The metadata value `key` as an int64 >= 0; throws naming the file and key.
int64_t meta_int(const std::string& path, const std::map<std::string, std::string>& meta, const char* key) {
  auto it = meta.find(key);
  RK_CHECK(it != meta.end(), "{}: checkpoint metadata has no '{}'", path, key);
  const std::string& s = it->second;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  RK_CHECK(ec == std::errc() && p == s.data() + s.size() && v >= 0,
           "{}: checkpoint metadata '{}' is {}, not a count >= 0", path, key, json_quote(s));
  return v;
}

std::string meta_str(const std::map<std::string, std::string>& meta, const char* key) {
  auto it = meta.find(key);
  return it == meta.end() ? std::string() : it->second;
}

// "'a', 'b', 'c' and 4 more": the first few of a list of keys.
std::string some_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 3;
  std::string s;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) s += fmt::format("{}'{}'", i ? ", " : "", one_line(keys[i]));
  if (keys.size() > kShown) s += fmt::format(" and {} more", keys.size() - kShown);
  return s;
}

}  // namespace

std::string rng_state_str(const std::array<uint64_t, 4>& s) {
  return fmt::format("{:016x},{:016x},{:016x},{:016x}", s[0], s[1], s[2], s[3]);
}

std::array<uint64_t, 4> parse_rng_state(const std::string& s) {
  std::array<uint64_t, 4> out{};
  const char* p = s.data();
  const char* end = s.data() + s.size();
  for (int i = 0; i < 4; ++i) {
    if (i > 0) {
      RK_CHECK(p < end && *p == ',', "rng_state {} is not four comma-separated hex words", json_quote(s));
      ++p;
    }
    auto [q, ec] = std::from_chars(p, end, out[size_t(i)], 16);
    RK_CHECK(ec == std::errc() && q - p == 16, "rng_state {} is not four comma-separated hex words", json_quote(s));
    p = q;
  }
  RK_CHECK(p == end, "rng_state {} is not four comma-separated hex words", json_quote(s));
  return out;
}

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer* opt,
                     const CheckpointInfo& info) {
  json config;
  try {
    config = json::parse(info.config_json);
  } catch (const json::exception& e) {
    throw Error(fmt::format("[checkpoint] {}: the run config is not valid JSON: {}", path, e.what()));
  }
  RK_CHECK(config.is_object(), "[checkpoint] {}: the run config is not a JSON object", path);

  std::vector<std::pair<std::string, Tensor>> tensors;
  nn::StateDict model_state = model.state_dict();
  for (const auto& [k, t] : model_state) {
    RK_CHECK(k.rfind(kOptimizerPrefix, 0) != 0,
             "[checkpoint] {}: model key '{}' starts with the optimizer prefix '{}'", path, k, kOptimizerPrefix);
    tensors.emplace_back(k, t);
  }
  if (opt)
    for (const auto& [k, t] : opt->state_dict()) tensors.emplace_back(kOptimizerPrefix + k, t);

  std::map<std::string, std::string> meta;
  for (const auto& [k, v] : info.extra) {
    RK_CHECK(!is_reserved(k), "[checkpoint] extra metadata key '{}' clashes with a reserved one", k);
    meta[k] = v;
  }
  meta["format"] = kCheckpointFormat;
  meta["format_version"] = std::to_string(kCheckpointVersion);
  meta["model"] = info.model;
  meta["optimizer"] = opt ? info.optimizer : std::string();
  meta["step"] = std::to_string(info.progress.step);
  meta["epoch"] = std::to_string(info.progress.epoch);
  meta["batch_in_epoch"] = std::to_string(info.progress.batch_in_epoch);
  meta["rng_state"] = rng_state_str(info.progress.rng_state);
  meta["config"] = config.dump();
  save_safetensors(path, tensors, meta);
}

Checkpoint read_checkpoint(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);  // its errors name the file already
  Checkpoint ck;
  ck.path = path;
  const auto& meta = f.metadata;
  std::string format = meta_str(meta, "format");
  if (format.empty()) {
    // A plain state dict: weights only.
    for (auto& [k, t] : f.tensors) {
      RK_CHECK(k.rfind(kOptimizerPrefix, 0) != 0,
               "{}: tensor '{}' is optimizer state but the file has no checkpoint metadata", path, k);
      ck.model_state.insert(k, t);
    }
    return ck;
  }
  RK_CHECK(format == kCheckpointFormat, "{}: metadata 'format' is {}, expected \"{}\"", path, json_quote(format),
           kCheckpointFormat);
  int64_t version = meta_int(path, meta, "format_version");
  RK_CHECK(version >= 1 && version <= kCheckpointVersion,
           "{}: checkpoint format_version {} is not supported (this reckon reads 1 to {})", path, version,
           kCheckpointVersion);
  ck.has_training_state = true;
  ck.info.model = meta_str(meta, "model");
  RK_CHECK(!ck.info.model.empty(), "{}: checkpoint metadata has no 'model'", path);
  ck.info.optimizer = meta_str(meta, "optimizer");
  ck.info.progress.step = meta_int(path, meta, "step");
  ck.info.progress.epoch = meta_int(path, meta, "epoch");
  ck.info.progress.batch_in_epoch = meta_int(path, meta, "batch_in_epoch");
  try {
    ck.info.progress.rng_state = parse_rng_state(meta_str(meta, "rng_state"));
  } catch (const Error& e) {
    throw Error(fmt::format("{}: metadata {}", path, e.what()));
  }
  ck.info.config_json = meta_str(meta, "config");
  RK_CHECK(parse_json(ck.info.config_json, fmt::format("{}: metadata 'config'", path)).is_object(),
           "{}: metadata 'config' is not a JSON object", path);
  for (const auto& [k, v] : meta)
    if (!is_reserved(k)) ck.info.extra[k] = v;

  const std::string prefix = kOptimizerPrefix;
  for (auto& [k, t] : f.tensors) {
    if (k.rfind(prefix, 0) == 0) {
      RK_CHECK(!ck.info.optimizer.empty(), "{}: tensor '{}' is optimizer state but the checkpoint names no optimizer",
               path, k);
      ck.optimizer_state.insert(k.substr(prefix.size()), t);
    } else {
      ck.model_state.insert(k, t);
    }
  }
  return ck;
}

std::string load_model_state(const Checkpoint& ck, nn::Module& model, const std::string& model_name) {
  const std::string& path = ck.path;
  if (ck.has_training_state)
    RK_CHECK(ck.info.model == model_name, "{}: the checkpoint is of model '{}', not '{}'", path, ck.info.model,
             model_name);
  nn::StateDict own = model.state_dict();
  // torch.nn.DataParallel and DistributedDataParallel save every key under "module.": a state dict
  // all of whose keys have it, and whose keys without it are the model's, is read without it.
  const nn::StateDict* dict = &ck.model_state;
  nn::StateDict stripped;
  std::string note;
  constexpr std::string_view kWrapped = "module.";
  const bool all_wrapped = !ck.model_state.empty() && std::ranges::all_of(ck.model_state, [&](const auto& kv) {
    return kv.first.starts_with(kWrapped);
  });
  if (!ck.has_training_state && all_wrapped) {
    for (const auto& [k, t] : ck.model_state) stripped.insert(k.substr(kWrapped.size()), t);
    const bool matches = std::ranges::any_of(stripped, [&](const auto& kv) { return own.contains(kv.first); });
    if (matches) {
      dict = &stripped;
      note = fmt::format("the prefix 'module.' (torch.nn.DataParallel's) stripped from its {} keys", stripped.size());
    }
  }
  std::vector<std::string> missing, unexpected;
  for (const auto& [k, dst] : own) {
    const Tensor* src = dict->find(k);
    if (!src) {
      missing.push_back(k);
      continue;
    }
    RK_CHECK(src->shape() == dst.shape(), "{}: tensor '{}' has shape {} but {} has {}", path, k,
             shape_str(src->shape()), model_name, shape_str(dst.shape()));
    bool src_float = is_floating(src->dtype()), dst_float = is_floating(dst.dtype());
    RK_CHECK(src_float == dst_float, "{}: tensor '{}' is {} but {} keeps it as {}", path, k,
             dtype_name(src->dtype()), model_name, dtype_name(dst.dtype()));
  }
  for (const auto& [k, t] : *dict)
    if (!own.contains(k)) unexpected.push_back(k);
  // Both lists in one line: the unexpected keys usually explain the missing ones (a prefix, a rename).
  if (!missing.empty() || !unexpected.empty()) {
    std::string what;
    if (!missing.empty())
      what = fmt::format("missing tensor{} {} of {}", missing.size() > 1 ? "s" : "", some_keys(missing), model_name);
    if (!unexpected.empty())
      what += fmt::format("{}unexpected tensor{} {} ({} has no such parameter or buffer)", what.empty() ? "" : "; ",
                          unexpected.size() > 1 ? "s" : "", some_keys(unexpected), model_name);
    throw Error(fmt::format("{}: {}{}", path, what, note.empty() ? "" : " (after " + note + ")"));
  }
  try {
    model.load_state_dict(*dict, true);
  } catch (const Error& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n') c = ' ';
    throw Error(fmt::format("{}: {}", path, msg));
  }
  return note;
}

void load_optimizer_state(const Checkpoint& ck, optim::Optimizer& opt, const std::string& optimizer_name) {
  const std::string& path = ck.path;
  RK_CHECK(ck.has_training_state, "{}: holds only weights (no optimizer state or progress); it cannot be resumed",
           path);
  RK_CHECK(ck.info.optimizer == optimizer_name, "{}: the checkpoint was trained with optimizer '{}', not '{}'", path,
           ck.info.optimizer, optimizer_name);
  try {
    opt.load_state_dict(ck.optimizer_state);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {} (tensor keys carry the prefix '{}')", path, e.what(), kOptimizerPrefix));
  }
}

}  // namespace reckon::io
