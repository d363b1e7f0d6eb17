// Everything generated from the one list (op_list.h): the contract check, the registry with
// its by-id functions (call, attributes copied, reseeded, to and from JSON) and the per-device
// kernel table.
#include "reckon/ops/op_list.h"

#include <nlohmann/json.hpp>

#include "reckon/ops/dispatch.h"
#include "reckon/ops/functional.h"

namespace reckon {

#define RK_CHECK_OP(...) static_assert(OpDef<__VA_ARGS__>, "op breaks the contract in op.h");
RK_OPS(RK_CHECK_OP)
#undef RK_CHECK_OP

namespace {

using json = nlohmann::ordered_json;

// ---- attributes <-> JSON, field by field ----
std::string_view reduction_name(Reduction r) {
  return r == Reduction::none ? "none" : r == Reduction::sum ? "sum" : "mean";
}

template <class T>
void to_j(json& j, const T& v) {
  if constexpr (Reflected<T>) {
    j = json::object();
    v.visit_fields([&](const char* name, const auto& f) { to_j(j[name], f); });
  } else if constexpr (std::is_same_v<T, DType>) {
    j = std::string(dtype_name(v));
  } else if constexpr (std::is_same_v<T, Device>) {
    j = std::string(device_name(v));
  } else if constexpr (std::is_same_v<T, ConvAlgorithm>) {
    j = std::string(conv_algorithm_name(v));
  } else if constexpr (std::is_same_v<T, Reduction>) {
    j = std::string(reduction_name(v));
  } else if constexpr (std::is_same_v<T, std::string>) {
    j = v;
  } else if constexpr (std::is_arithmetic_v<T>) {
    j = v;
  } else {  // std::array, std::vector (Shape)
    j = json::array();
    for (const auto& e : v) {
      json x;
      to_j(x, e);
      j.push_back(std::move(x));
    }
  }
}

struct FieldError {
  std::string what;
};

template <class T>
void from_j(const json& j, T& v, const std::string& path) {
  auto fail = [&](const char* want) { throw FieldError{fmt::format("'{}' must be {}, got {}", path, want, j.dump())}; };
  if constexpr (Reflected<T>) {
    if (!j.is_object()) fail("an object");
    for (const auto& item : j.items()) {
      const std::string& key = item.key();  // not a structured binding: clang 14 cannot capture one
      const json& val = item.value();
      bool known = false;
      v.visit_fields([&](const char* name, auto& f) {
        if (key == name) {
          known = true;
          from_j(val, f, path.empty() ? key : path + "." + key);
        }
      });
      if (!known) throw FieldError{fmt::format("unknown attribute '{}'", path.empty() ? key : path + "." + key)};
    }
  } else if constexpr (std::is_same_v<T, DType>) {
    if (!j.is_string()) fail("a dtype name");
    for (DType d : {DType::f32, DType::f64, DType::bf16, DType::f16, DType::i8, DType::u8, DType::i32, DType::i64})
      if (dtype_name(d) == j.get<std::string>()) {
        v = d;
        return;
      }
    fail("a dtype name (f32, f64, bf16, f16, i8, u8, i32, i64)");
  } else if constexpr (std::is_same_v<T, Device>) {
    if (!j.is_string()) fail("a device name");
    for (Device d : {Device::cpu, Device::meta, Device::cuda})
      if (device_name(d) == j.get<std::string>()) {
        v = d;
        return;
      }
    fail("a device name (cpu, meta, cuda)");
  } else if constexpr (std::is_same_v<T, ConvAlgorithm>) {
    if (!j.is_string()) fail("auto or direct");
    if (j == "auto") v = ConvAlgorithm::automatic;
    else if (j == "direct") v = ConvAlgorithm::direct;
    else fail("auto or direct");
  } else if constexpr (std::is_same_v<T, Reduction>) {
    if (j == "none") v = Reduction::none;
    else if (j == "mean") v = Reduction::mean;
    else if (j == "sum") v = Reduction::sum;
    else fail("none, mean or sum");
  } else if constexpr (std::is_same_v<T, std::string>) {
    if (!j.is_string()) fail("a string");
    v = j.get<std::string>();
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!j.is_boolean()) fail("true or false");
    v = j.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    if (!j.is_number_integer()) fail("an integer");
    v = j.get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!j.is_number()) fail("a number");
    v = j.get<T>();
  } else {
    if (!j.is_array()) fail("an array");
    if constexpr (requires { v.resize(size_t(0)); }) {
      v.resize(j.size());
    } else if (j.size() != v.size()) {
      fail(fmt::format("an array of {}", v.size()).c_str());
    }
    for (size_t i = 0; i < j.size(); ++i) from_j(j[i], v[i], fmt::format("{}[{}]", path, i));
  }
}

// ---- by-id functions of one op ----
template <class Op>
std::vector<Tensor> call_entry(std::vector<Tensor> in, const void* attrs) {
  return call<Op>(std::move(in), *static_cast<const typename Op::Attrs*>(attrs));
}
template <class Op>
std::shared_ptr<void> copy_entry(const void* attrs) {
  using A = typename Op::Attrs;
  return attrs ? std::make_shared<A>(*static_cast<const A*>(attrs)) : std::make_shared<A>();
}
template <class Op>
void reseed_entry(void* attrs) {
  Op::reseed(*static_cast<typename Op::Attrs*>(attrs));
}
template <class Op>
std::string to_json_entry(const void* attrs) {
  json j;
  to_j(j, *static_cast<const typename Op::Attrs*>(attrs));
  return j.dump();
}
template <class Op>
std::shared_ptr<void> from_json_entry(const std::string& text) {
  auto a = std::make_shared<typename Op::Attrs>();
  try {
    from_j(json::parse(text), *a, "");
  } catch (const FieldError& e) {
    throw Error(fmt::format("[{}] attributes {}: {}", Op::kName, text, e.what));
  } catch (const json::exception& e) {
    throw Error(fmt::format("[{}] attributes {}: {}", Op::kName, text, e.what()));
  }
  return a;
}

template <class Op>
bool set_training_entry(void* attrs, bool training) {
  bool found = false;
  static_cast<typename Op::Attrs*>(attrs)->visit_fields([&](const char* name, auto& f) {
    if constexpr (std::is_same_v<std::decay_t<decltype(f)>, bool>)
      if (std::string_view(name) == "training") {
        f = training;
        found = true;
      }
  });
  return found;
}

template <class Op>
Support ref_entry(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const void* attrs) {
  if constexpr (HasViewKernel<Op>) {
    return Support::no("a view: the dispatcher makes it without a kernel");
  } else {
    Op::ref(ctx, in, out, *static_cast<const typename Op::Attrs*>(attrs));
    return Support::yes();
  }
}
template <class Op>
Support cpu_entry(KernelCtx& ctx, std::span<const Tensor> in, std::span<Tensor> out, const void* attrs) {
  return Op::cpu(ctx, in, out, *static_cast<const typename Op::Attrs*>(attrs));
}

template <class Op>
std::vector<std::string> onnx_entry(OnnxArgs& args, const void* attrs) {
  if constexpr (requires { Op::kNotExportable; })
    return {};
  else
    return Op::onnx(args, *static_cast<const typename Op::Attrs*>(attrs));
}

template <class Op>
OpInfo info_of() {
  OpInfo i{};
  i.name = Op::kName;
  i.id = op_id<Op>;
  i.has_cpu_kernel = HasCpuKernel<Op>;
  i.differentiable = HasBackward<Op>;
  if constexpr (requires { Op::kNotExportable; }) {
  } else {
    i.to_onnx = &onnx_entry<Op>;
  }
  if constexpr (requires { Op::kNotExportable; }) i.not_exportable = Op::kNotExportable;
  i.is_view = HasViewKernel<Op>;
  i.takes_strided = takes_strided<Op>();
  i.has_in_place = HasInPlace<Op>;
  if constexpr (requires { Op::kOverwrites; }) i.overwrites = Op::kOverwrites;
  i.op_class = op_class<Op>();
  i.call = &call_entry<Op>;
  i.copy_attrs = &copy_entry<Op>;
  if constexpr (requires(typename Op::Attrs& a) { Op::reseed(a); }) {
    i.random = true;
    i.reseed = &reseed_entry<Op>;
  }
  i.attrs_to_json = &to_json_entry<Op>;
  i.attrs_from_json = &from_json_entry<Op>;
  i.set_training = &set_training_entry<Op>;
  return i;
}

template <class Op>
void table_entry(KernelTable& t) {
  const size_t id = size_t(op_id<Op>);
  t.ref[id] = &ref_entry<Op>;
  if constexpr (HasCpuKernel<Op>) t.cpu[id] = &cpu_entry<Op>;
  t.cpu_plans[id] = &cpu_kernel_plans<Op>;
  t.cuda[id] = &cuda_kernel<Op>;
}

}  // namespace

const std::vector<OpInfo>& op_registry() {
#define RK_INFO(...) info_of<__VA_ARGS__>(),
  static const std::vector<OpInfo> r = {RK_OPS(RK_INFO)};
#undef RK_INFO
  return r;
}

const OpInfo& op_info(int id) {
  const auto& r = op_registry();
  RK_CHECK(id >= 0 && size_t(id) < r.size(), "[ops] no op has id {} (there are {})", id, r.size());
  return r[size_t(id)];
}

int op_id_of(std::string_view name) {
  for (const auto& i : op_registry())
    if (i.name == name) return i.id;
  return -1;
}

const KernelTable& kernel_table() {
  static const KernelTable t = [] {
    KernelTable k;
#define RK_TABLE(...) table_entry<__VA_ARGS__>(k);
    RK_OPS(RK_TABLE)
#undef RK_TABLE
    return k;
  }();
  return t;
}

}  // namespace reckon
