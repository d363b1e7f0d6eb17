// _reckon: the Python package's bindings (nanobind) over the library, the layer above tools/.
// What it is: tensors that share memory with numpy and PyTorch (DLPack and the buffer protocol,
// no copy either way), the zoo and Module (state_dict in and out, an inference forward), and the
// verbs of the command line: ledger, plan, train, export; each verb fills the same C++ config the
// CLI fills and returns what the CLI prints as JSON, so the two cannot disagree.
// What it is not: a second API. The Python layer (python/reckon/__init__.py) shapes the results
// into objects; nothing here computes a figure of its own.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <type_traits>

#include "reckon/engine/engine.h"
#include "reckon/ledger/inference.h"
#include "reckon/ledger/ledger.h"
#include "reckon/ledger/plan.h"
#include "reckon/nn/models/registry.h"
#include "reckon/onnx/export.h"
#include "reckon/onnx/import.h"
#include "reckon/ops/node.h"
#include "reckon/train/trainer.h"

namespace nb = nanobind;
using namespace reckon;

namespace {

// ---- tensors: DLPack dtypes both ways ----

nb::dlpack::dtype to_dlpack(DType t) {
  using nb::dlpack::dtype_code;
  auto d = [](dtype_code c, int bits) { return nb::dlpack::dtype{uint8_t(c), uint8_t(bits), 1}; };
  switch (t) {
    case DType::f32: return d(dtype_code::Float, 32);
    case DType::f64: return d(dtype_code::Float, 64);
    case DType::f16: return d(dtype_code::Float, 16);
    case DType::bf16: return d(dtype_code::Bfloat, 16);
    case DType::i8: return d(dtype_code::Int, 8);
    case DType::u8: return d(dtype_code::UInt, 8);
    case DType::i32: return d(dtype_code::Int, 32);
    case DType::i64: return d(dtype_code::Int, 64);
  }
  throw Error("[python] unknown dtype");
}

DType from_dlpack(nb::dlpack::dtype d) {
  using nb::dlpack::dtype_code;
  const auto code = dtype_code(d.code);
  if (d.lanes == 1) {
    if (code == dtype_code::Float && d.bits == 32) return DType::f32;
    if (code == dtype_code::Float && d.bits == 64) return DType::f64;
    if (code == dtype_code::Float && d.bits == 16) return DType::f16;
    if (code == dtype_code::Bfloat && d.bits == 16) return DType::bf16;
    if (code == dtype_code::Int && d.bits == 8) return DType::i8;
    if (code == dtype_code::UInt && d.bits == 8) return DType::u8;
    if (code == dtype_code::Int && d.bits == 32) return DType::i32;
    if (code == dtype_code::Int && d.bits == 64) return DType::i64;
  }
  throw Error(fmt::format("[tensor] an array of dtype code {} with {} bits x {} lanes has no reckon dtype "
                          "(reckon holds f32, f64, f16, bf16, i8, u8, i32, i64)",
                          int(d.code), int(d.bits), int(d.lanes)));
}

// A view of t's memory that numpy or PyTorch take without a copy: the capsule owns a handle on
// t, so the storage lives as long as the array does.
template <class Framework>
nb::ndarray<Framework> share(const Tensor& t) {
  RK_CHECK(t.device() == Device::cpu, "[tensor] a {} tensor has no data to share ({})", device_name(t.device()),
           t.str());
  auto* keep = new Tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  std::vector<int64_t> strides(t.strides().begin(), t.strides().end());
  return nb::ndarray<Framework>(t.raw_data(), shape.size(), shape.data(), owner, strides.data(), to_dlpack(t.dtype()),
                                nb::device::cpu::value);
}

// An array from numpy, PyTorch or anything with DLPack or the buffer protocol, as a tensor on
// the same memory (no copy): the storage borrows it and keeps a reference to its owner.
Tensor borrow(nb::ndarray<nb::device::cpu> a) {
  const DType dt = from_dlpack(a.dtype());
  Shape shape(a.ndim()), strides(a.ndim());
  bool empty = false;
  int64_t last = 0;  // the element offset of the last element the strides reach
  for (size_t i = 0; i < a.ndim(); ++i) {
    shape[i] = int64_t(a.shape(i));
    strides[i] = a.stride(i);
    if (shape[i] == 0) empty = true;
    if (shape[i] > 1) {
      RK_CHECK(strides[i] >= 0, "[tensor] an array with negative strides is not shared: copy it first "
                                "(numpy.ascontiguousarray)");
      last += (shape[i] - 1) * strides[i];
    }
  }
  const int64_t bytes = empty ? 0 : (last + 1) * int64_t(dtype_size(dt));
  auto storage = std::make_shared<Storage>(Device::cpu, bytes ? a.data() : nullptr, bytes, Tag::input,
                                           [a]() mutable {
                                             nb::gil_scoped_acquire gil;
                                             a = {};
                                           });
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dt;
  return Tensor(impl);
}

// A tensor from a reckon.Tensor or anything borrow() takes.
Tensor as_tensor(nb::handle obj) {
  Tensor t;
  if (nb::try_cast<Tensor>(obj, t)) return t;
  nb::ndarray<nb::device::cpu> a;
  if (nb::ndarray<nb::ro, nb::device::cpu> ro; !nb::try_cast(obj, a, /*convert=*/false) &&
                                               nb::try_cast(obj, ro, /*convert=*/false))
    throw nb::value_error("[tensor] a read-only array is not shared (a reckon tensor is writable): pass a copy, "
                          "e.g. numpy.array(a)");
  if (!a.is_valid())
    throw nb::type_error(("expected a reckon.Tensor, a numpy array or a torch tensor on the cpu, got " +
                          nb::cast<std::string>(nb::str(obj.type())))
                             .c_str());
  return borrow(a);
}

// The buffer protocol on reckon.Tensor (memoryview(t), and anything that reads buffers): the view
// holds a reference to the Python tensor, so the storage outlives it; its shape and strides (in
// bytes) live in view->internal until the release.
const char* buffer_format(DType t) {
  switch (t) {
    case DType::f32: return "f";
    case DType::f64: return "d";
    case DType::f16: return "e";
    case DType::i8: return "b";
    case DType::u8: return "B";
    case DType::i32: return "i";
    case DType::i64: return "q";
    case DType::bf16: return nullptr;  // no struct format: DLPack carries it
  }
  return nullptr;
}

int tensor_getbuffer(PyObject* self, Py_buffer* view, int flags) {
  const Tensor& t = *nb::inst_ptr<Tensor>(self);
  const char* format = buffer_format(t.dtype());
  auto fail = [&](const std::string& why) {
    PyErr_SetString(PyExc_BufferError, why.c_str());
    view->obj = nullptr;
    return -1;
  };
  if (!t.defined() || t.device() != Device::cpu) return fail("[tensor] only cpu tensors have a buffer");
  if (!format) return fail("[tensor] bf16 has no buffer format: use torch.from_dlpack(t)");
  if (!t.is_contiguous() && (flags & PyBUF_STRIDES) != PyBUF_STRIDES)
    return fail("[tensor] a strided tensor's buffer needs the strides (PyBUF_STRIDES)");
  const size_t nd = t.shape().size(), item = dtype_size(t.dtype());
  auto* dims = new Py_ssize_t[2 * nd + 1];
  for (size_t i = 0; i < nd; ++i) {
    dims[i] = Py_ssize_t(t.shape()[i]);
    dims[nd + i] = Py_ssize_t(t.strides()[i] * int64_t(item));
  }
  view->buf = t.raw_data();
  Py_INCREF(self);
  view->obj = self;
  view->len = Py_ssize_t(t.nbytes());
  view->itemsize = Py_ssize_t(item);
  view->readonly = 0;
  view->ndim = int(nd);
  view->format = (flags & PyBUF_FORMAT) ? const_cast<char*>(format) : nullptr;
  view->shape = (flags & PyBUF_ND) ? dims : nullptr;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? dims + nd : nullptr;
  view->suboffsets = nullptr;
  view->internal = dims;
  return 0;
}

void tensor_releasebuffer(PyObject*, Py_buffer* view) { delete[] static_cast<Py_ssize_t*>(view->internal); }

PyType_Slot tensor_slots[] = {{Py_bf_getbuffer, (void*)tensor_getbuffer},
                              {Py_bf_releasebuffer, (void*)tensor_releasebuffer},
                              {0, nullptr}};

// ---- the verbs ----

std::function<void(const std::string&)> progress_fn(bool on) {
  if (!on) return {};
  return [](const std::string& what) { std::fprintf(stderr, "... %s\n", what.c_str()); };
}

// The ledger's JSON and its text report, as `reckon ledger --json` and `reckon ledger` print them;
// with html, the page of --html too. The configs are bound as classes whose fields Python sets by
// name (python/reckon/__init__.py), so no argument list has to be kept in step with them.
std::pair<std::string, std::string> run_ledger(const std::string& model, LedgerConfig cfg, const std::string& html,
                                               bool progress) {
  nb::gil_scoped_release nogil;
  cfg.progress = progress_fn(progress);
  Ledger l = ledger(model, cfg);
  if (!html.empty()) onnx::write_file_atomic(html, ledger_html(l));
  return {ledger_json(l), format_ledger(l)};
}

std::pair<std::string, std::string> run_inference_ledger(const std::string& model, InferenceConfig cfg,
                                                         bool progress) {
  nb::gil_scoped_release nogil;
  cfg.progress = progress_fn(progress);
  InferenceLedger l = inference_ledger(model, cfg);
  return {inference_json(l), format_inference(l)};
}

std::pair<std::string, std::string> run_plan(PlanConfig cfg, bool progress) {
  nb::gil_scoped_release nogil;
  cfg.progress = progress_fn(progress);
  Plan p = plan(cfg);
  return {plan_json(p), format_plan(p)};
}

// One field of TrainConfig from a Python value, by the field's C++ type.
template <class T>
void set_field(T& field, const train::FieldInfo& f, nb::handle v) {
  if constexpr (std::is_same_v<T, int64_t>) {
    if (f.cli == train::Cli::bytes && nb::isinstance<nb::str>(v)) {
      field = parse_bytes(nb::cast<std::string>(v), f.flag());
      return;
    }
  }
  if constexpr (std::is_same_v<T, bool>) {
    if (!nb::isinstance<nb::bool_>(v)) throw nb::type_error(fmt::format("train(): {} takes True or False", f.name).c_str());
  }
  try {
    field = nb::cast<T>(v);
  } catch (const nb::cast_error&) {
    throw nb::type_error(fmt::format("train(): {} cannot take {}", f.name, nb::cast<std::string>(nb::repr(v))).c_str());
  }
}

// train(**options): the fields of `reckon train` (config_fields.h) by name; on_step is called after
// every optimizer step with a dict and stops the run when it returns False. Ctrl-C stops the run
// with a checkpoint, as in the CLI, and raises KeyboardInterrupt after.
nb::dict run_train(nb::dict options, nb::object on_step) {
  train::TrainConfig c;
  bool out_given = false;
  for (auto [key, value] : options) {
    const std::string name = nb::cast<std::string>(key);
    bool known = false;
    train::for_each_field(c, [&](const train::FieldInfo& f, auto& field, const auto&) {
      if (name != f.name) return;
      known = true;
      set_field(field, f, value);
    });
    if (name == "init") known = true, c.checkpoint = nb::cast<std::string>(value);
    if (!known) throw nb::type_error(fmt::format("train() got an unexpected option '{}'", name).c_str());
    if (name == "out") out_given = true;
  }
  if (!out_given) c.out = "runs/" + c.model;
  if (c.resume && options.contains("epochs")) c.resume_epochs = c.epochs;
  std::optional<nb::python_error> interrupted;
  std::optional<nb::python_error> failed;
  c.on_step = [&](const train::StepReport& s) -> bool {
    nb::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) {
      interrupted.emplace();
      return false;
    }
    if (on_step.is_none()) return true;
    try {
      nb::dict d;
      d["step"] = s.step, d["epoch"] = s.epoch, d["batch"] = s.batch, d["batches"] = s.batches;
      d["loss"] = s.loss, d["lr"] = s.lr, d["samples"] = s.samples;
      nb::object r = on_step(d);
      return r.is_none() || nb::cast<bool>(r);
    } catch (nb::python_error& e) {
      failed.emplace(std::move(e));
      return false;
    }
  };
  train::TrainResult r;
  {
    nb::gil_scoped_release nogil;
    r = train::train(c);
  }
  if (failed) throw std::move(*failed);
  if (interrupted) throw std::move(*interrupted);
  nb::dict out;
  out["parameters"] = r.parameters;
  out["macs_per_image"] = r.macs_per_image;
  out["first_step"] = r.first_step;
  out["steps"] = r.steps;
  out["losses"] = r.losses;
  nb::list epochs;
  for (const auto& e : r.epochs) {
    nb::dict d;
    d["epoch"] = e.epoch, d["train_loss"] = e.train_loss, d["train_accuracy"] = e.train_accuracy;
    d["test_loss"] = e.test_loss, d["test_accuracy"] = e.test_accuracy, d["seconds"] = e.seconds;
    d["images_per_s"] = e.images_per_s, d["val_loss"] = e.val_loss, d["val_accuracy"] = e.val_accuracy;
    epochs.append(d);
  }
  out["epochs"] = epochs;
  out["test_loss"] = r.final_eval.loss;
  out["test_accuracy"] = r.final_eval.accuracy;
  out["test_samples"] = r.final_eval.samples;
  out["checkpoint"] = r.checkpoint;
  out["best_checkpoint"] = r.best_checkpoint;
  out["best_val_accuracy"] = r.best_val_accuracy;
  out["best_epoch"] = r.best_epoch;
  out["early_stopped"] = r.early_stopped;
  out["stopped"] = r.stopped;
  out["skipped_steps"] = r.skipped_steps;
  out["loss_scale"] = r.loss_scale;
  out["int8_model"] = r.int8_model;
  out["int8_accuracy"] = r.int8_accuracy;
  out["optimizer_defaults"] = r.optimizer_defaults;
  out["warnings"] = r.warnings;
  out["predicted_step_s"] = r.predicted_step_s;
  out["measured_step_s"] = r.measured_step_s;
  out["predicted_process_peak_bytes"] = r.predicted_process_peak_bytes;
  out["measured_process_peak_bytes"] = r.measured_process_peak_bytes;
  out["dataset_bytes"] = r.dataset_bytes;
  return out;
}

// The option names train() takes, with their defaults as the CLI shows them and their help.
nb::list train_options() {
  nb::list out;
  train::TrainConfig c;
  train::for_each_field(c, [&](const train::FieldInfo& f, auto& field, const auto& def) {
    if (f.cli == train::Cli::none) return;
    out.append(nb::make_tuple(f.name, def, f.help));
  });
  return out;
}

}  // namespace

NB_MODULE(_reckon, m) {
  m.doc() = "reckon's C++ library (the Python package wraps it: import reckon)";
  nb::exception<Error>(m, "Error", PyExc_RuntimeError);

  nb::class_<Tensor>(m, "Tensor",
                     "A reckon tensor. numpy and PyTorch share its memory without a copy: numpy.asarray(t), "
                     "t.numpy(), torch.from_dlpack(t), memoryview(t).",
                     nb::type_slots(tensor_slots))
      .def_prop_ro("shape", [](const Tensor& t) { return std::vector<int64_t>(t.shape().begin(), t.shape().end()); })
      .def_prop_ro("strides", [](const Tensor& t) { return std::vector<int64_t>(t.strides().begin(), t.strides().end()); })
      .def_prop_ro("dtype", [](const Tensor& t) { return std::string(dtype_name(t.dtype())); })
      .def_prop_ro("device", [](const Tensor& t) { return std::string(device_name(t.device())); })
      .def_prop_ro("name", [](const Tensor& t) { return t.name(); })
      .def_prop_ro("nbytes", &Tensor::nbytes)
      .def_prop_ro("data_ptr", [](const Tensor& t) { return uintptr_t(t.raw_data()); },
                   "the address of the first element (for checking that memory is shared)")
      .def("numel", &Tensor::numel)
      .def("numpy", [](const Tensor& t) { return share<nb::numpy>(t); },
           "a numpy array on the same memory (no copy); bf16 has no numpy dtype: use torch.from_dlpack")
      .def("__array__",
           [](const Tensor& t, nb::handle dtype, nb::handle copy) {
             nb::object a = nb::cast(share<nb::numpy>(t));
             if (!dtype.is_none()) a = a.attr("astype")(dtype);
             return a;
           },
           nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none())
      .def("__dlpack__",
           [](const Tensor& t, nb::kwargs kw) {
             nb::object a = nb::cast(share<nb::array_api>(t));
             return a.attr("__dlpack__")(**kw);
           })
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(1, 0); })  // kDLCPU, device 0
      .def("__repr__", [](const Tensor& t) { return "reckon." + t.str(); });

  m.def("tensor", &as_tensor, nb::arg("array"),
        "A reckon.Tensor on the memory of a numpy array, a torch tensor (cpu) or any object with DLPack or "
        "the buffer protocol: no copy; the tensor keeps the array alive.");

  nb::class_<nn::Module>(m, "Module", "A reckon model: a named tree of layers with parameters and buffers.")
      .def_prop_ro("type_name", &nn::Module::type_name)
      .def("named_parameters", [](const nn::Module& mod) { return mod.named_parameters(); })
      .def("named_buffers", [](const nn::Module& mod) { return mod.named_buffers(); })
      .def("num_parameters", &nn::Module::num_parameters)
      .def("state_dict",
           [](const nn::Module& mod) {
             nb::dict d;  // insertion-ordered, PyTorch's order
             for (const auto& [k, t] : mod.state_dict()) d[k.c_str()] = t;
             return d;
           },
           "name -> Tensor in PyTorch's order; each tensor is the module's own memory (writing it writes the module)")
      .def("load_state_dict",
           [](nn::Module& mod, nb::dict d, bool strict) {
             nn::StateDict sd;
             for (auto [k, v] : d) sd.insert(nb::cast<std::string>(k), as_tensor(v));
             nn::LoadResult r = mod.load_state_dict(sd, strict);
             return std::make_pair(r.missing_keys, r.unexpected_keys);
           },
           nb::arg("state_dict"), nb::arg("strict") = true,
           "copies matching entries (reckon tensors, numpy arrays or torch tensors) into the module; returns "
           "(missing_keys, unexpected_keys); strict raises on either, and a shape mismatch always raises")
      .def("train", [](nn::Module& mod, bool on) { mod.train(on); }, nb::arg("mode") = true)
      .def("eval", [](nn::Module& mod) { mod.eval(); })
      .def_prop_ro("training", &nn::Module::is_training)
      .def("forward",
           [](nn::Module& mod, nb::handle x) {
             Tensor in = as_tensor(x);
             nb::gil_scoped_release nogil;
             NoGrad ng;
             return mod(in);
           },
           nb::arg("x"), "the forward on a batch (N, C, H, W), without autograd (as under torch.no_grad())")
      .def("export_onnx",
           [](nn::Module& mod, const std::string& path, std::vector<int64_t> input, int opset, bool dynamic_batch) {
             onnx::ExportOptions o;
             o.opset = opset;
             o.dynamic_batch = dynamic_batch;
             nb::gil_scoped_release nogil;
             onnx::write_file_atomic(path, onnx::export_module(mod, Shape(input.begin(), input.end()), o));
           },
           nb::arg("path"), nb::arg("input"), nb::arg("opset") = 17, nb::arg("dynamic_batch") = false)
      .def("__repr__", &nn::Module::repr);

  // The inference engine (engine/engine.h) over a module's forward at one input shape: what an ONNX
  // Runtime user opens an InferenceSession for. A QDQ-format int8 file runs its int8 kernels.
  nb::class_<engine::Engine>(m, "Engine",
                             "the inference engine: a module's eval forward compiled for one input shape "
                             "(passes, layouts, a static memory plan); run(x) gives the output")
      .def("__init__",
           [](engine::Engine* e, nn::Module& mod, std::vector<int64_t> input) {
             Shape s(input.begin(), input.end());
             nb::gil_scoped_release nogil;
             new (e) engine::Engine(engine::make_program(mod, s));
           },
           nb::arg("module"), nb::arg("input_shape"))
      .def("run",
           [](engine::Engine& e, nb::handle x) {
             Tensor in = as_tensor(x);
             nb::gil_scoped_release nogil;
             return e.run(in);
           },
           nb::arg("x"), "the output for x (input_shape, float32)")
      .def_prop_ro("input_shape", [](const engine::Engine& e) { return std::vector<int64_t>(e.input_shape().begin(), e.input_shape().end()); })
      .def_prop_ro("arena_bytes", &engine::Engine::arena_bytes)
      .def_prop_ro("weight_bytes", &engine::Engine::weight_bytes)
      .def("steps",
           [](const engine::Engine& e) {
             nb::list out;
             for (const auto& s : e.steps()) {
               nb::dict d;
               d["name"] = s.name;
               d["op"] = s.op;
               d["kind"] = s.kind;
               d["impl"] = s.impl;
               d["macs"] = s.cost.macs;
               out.append(d);
             }
             return out;
           },
           "one dict per step: name (the layer), op, kind (onednn, kernel, reorder, view), impl, macs");

  m.def("model_names", &nn::model_names);
  m.def("_make_model",
        [](const std::string& name, int64_t classes, int64_t in_channels) {
          nn::ModelConfig mc;
          mc.num_classes = classes;
          mc.in_channels = in_channels;
          return onnx::make_model(name, mc);
        },
        nb::arg("name"), nb::arg("classes") = 0, nb::arg("in_channels") = 0);
  m.def("_model_input_shape",
        [](const std::string& name, int64_t in_channels) {
          nn::ModelConfig mc;
          mc.in_channels = in_channels;
          Shape s = onnx::model_input_shape(name, mc);
          return std::vector<int64_t>(s.begin(), s.end());
        },
        nb::arg("name"), nb::arg("in_channels") = 0);
  nb::class_<LedgerConfig>(m, "LedgerConfig", "the settings of reckon ledger (ledger/ledger.h)")
      .def(nb::init<>())
      .def_rw("batch", &LedgerConfig::batch)
      .def_rw("input", &LedgerConfig::input)
      .def_rw("num_classes", &LedgerConfig::num_classes)
      .def_rw("precision", &LedgerConfig::precision)
      .def_rw("accum", &LedgerConfig::accum)
      .def_rw("recompute", &LedgerConfig::recompute)
      .def_rw("conv_algo", &LedgerConfig::conv_algo)
      .def_rw("memory_format", &LedgerConfig::memory_format)
      .def_rw("grad_scaler", &LedgerConfig::grad_scaler)
      .def_rw("optimizer", &LedgerConfig::optimizer)
      .def_rw("freeze", &LedgerConfig::freeze)
      .def_rw("momentum", &LedgerConfig::momentum)
      .def_rw("device", &LedgerConfig::device)
      .def_rw("dataset_size", &LedgerConfig::dataset_size)
      .def_rw("epochs", &LedgerConfig::epochs)
      .def_rw("measure", &LedgerConfig::measure)
      .def_rw("measure_steps", &LedgerConfig::measure_steps);
  nb::class_<InferenceConfig>(m, "InferenceConfig", "the settings of reckon ledger --inference (ledger/inference.h)")
      .def(nb::init<>())
      .def_rw("batch", &InferenceConfig::batch)
      .def_rw("input", &InferenceConfig::input)
      .def_rw("device", &InferenceConfig::device)
      .def_rw("precision", &InferenceConfig::precision)
      .def_rw("measure", &InferenceConfig::measure);
  nb::class_<PlanConfig>(m, "PlanConfig", "the settings of reckon plan (ledger/plan.h)")
      .def(nb::init<>())
      .def_rw("model", &PlanConfig::model)
      .def_rw("batch", &PlanConfig::batch)
      .def_rw("memory_bytes", &PlanConfig::memory_bytes)
      .def_rw("device", &PlanConfig::device)
      .def_rw("input", &PlanConfig::input)
      .def_rw("num_classes", &PlanConfig::num_classes)
      .def_rw("optimizer", &PlanConfig::optimizer)
      .def_rw("momentum", &PlanConfig::momentum)
      .def_rw("precisions", &PlanConfig::precisions)
      .def_rw("allow_recompute", &PlanConfig::allow_recompute)
      .def_rw("allow_direct_conv", &PlanConfig::allow_direct_conv);
  m.def("_ledger", &run_ledger, nb::arg("model"), nb::arg("config"), nb::arg("html"), nb::arg("progress"));
  m.def("_inference_ledger", &run_inference_ledger, nb::arg("model"), nb::arg("config"), nb::arg("progress"));
  m.def("_plan", &run_plan, nb::arg("config"), nb::arg("progress"));
  m.def("_train", &run_train, nb::arg("options"), nb::arg("on_step") = nb::none());
  m.def("_train_options", &train_options);
  m.def("_parse_bytes", &parse_bytes, nb::arg("text"), nb::arg("what"));
  m.def("_device_names", &device_names);
  m.def("_version", &version_text);  // ledger/devices.h: the CLI's --version text
}
