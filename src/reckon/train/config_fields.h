// The settings of a training run, each defined once (an X-macro file, included by config.h and
// config.cpp with RK_TRAIN_FIELD defined; deliberately no include guard). From this one list come
// TrainConfig's fields (in this order, so designated initialisers follow it), the "config" JSON
// a checkpoint keeps, what --resume restores from it, and the options of `reckon train`
// (tools/cmd_train.cpp, in this order in its --help). Not here: the range checks (validate()).
//
// RK_TRAIN_FIELD(type, name, default, keep, cli, help)
//   keep (Keep, config.h): run | match | numbers | numbers_or_default | planned
//   cli  (Cli, config.h):  none | positional | flag | option | option_no_default | bytes
//   help: the --help line (for a `none` field, what it is)
// A JSON key is the name (model, weight_decay, ...); a flag is --name with '-' for '_'.

RK_TRAIN_FIELD(std::string, model, "lenet5", match, positional, "zoo model name (reckon models)")
RK_TRAIN_FIELD(std::string, data, "fashion-mnist", numbers, option,
               "fashion-mnist[:DIR] | mnist:DIR | cifar10:DIR | cifar100:DIR | folder:DIR | synthetic:CxHxW[:N[:K]]")
RK_TRAIN_FIELD(int64_t, epochs, 5, numbers, option, "epochs")
RK_TRAIN_FIELD(int64_t, batch, 64, numbers, option, "batch size")
// lr and weight_decay: kOptimizerDefault (unset) takes the optimizer's own (apply_optimizer_defaults,
// config.h), so `--optimizer adam` is PyTorch's Adam and not the SGD recipe's lr. The checkpoint
// keeps the values the run used.
RK_TRAIN_FIELD(double, lr, kOptimizerDefault, numbers, option_no_default,
               "base learning rate (default: the optimizer's: sgd 0.05, adam and adamw 0.001)")
RK_TRAIN_FIELD(std::string, optimizer, "sgd", numbers, option, "sgd | adam | adamw")
RK_TRAIN_FIELD(double, momentum, 0.9, numbers, option, "SGD momentum")
RK_TRAIN_FIELD(bool, nesterov, false, numbers, flag, "SGD with Nesterov momentum")
RK_TRAIN_FIELD(double, weight_decay, kOptimizerDefault, numbers, option_no_default,
               "weight decay, decoupled for adamw (default: the optimizer's: sgd 0.0005, adam 0, adamw 0.01)")
// Per optimizer step, over the whole run.
RK_TRAIN_FIELD(std::string, schedule, "cosine", numbers, option, "none | step | cosine (per step over the run)")
RK_TRAIN_FIELD(int64_t, warmup, 0, numbers, option, "linear warm-up steps")
// The step schedule: lr *= gamma every step_epochs epochs (0: epochs / 3, at least 1).
RK_TRAIN_FIELD(double, step_epochs, 0, numbers, option, "step schedule: epochs between lr drops (0: epochs/3)")
RK_TRAIN_FIELD(double, gamma, 0.1, numbers, option, "step schedule: lr factor at each drop")
RK_TRAIN_FIELD(double, label_smoothing, 0.0, numbers, option, "cross-entropy label smoothing")
// Mixed precision: "fp32", "bf16" or "fp16" (autocast; parameters stay f32). This field and the
// three after it came with mixed precision: checkpoints from before lack them (the defaults then).
RK_TRAIN_FIELD(std::string, precision, "fp32", numbers_or_default, option,
               "fp32 | bf16 | fp16 (mixed precision: autocast, f32 master weights)")
// Gradient accumulation: one optimizer step per `accum` micro-batches of `batch` (the effective
// batch is batch x accum; the last window of an epoch may be shorter).
RK_TRAIN_FIELD(int64_t, accum, 1, numbers_or_default, option,
               "gradient accumulation: optimizer step every K micro-batches of --batch")
RK_TRAIN_FIELD(bool, recompute, false, numbers_or_default, flag,
               "recompute each block's activations in backward (saves memory)")
// The convolution algorithm for the run (ops/conv.h): "auto", "direct", or "" (the process's
// setting: RECKON_CONV_ALGO, else auto). --max-memory may choose direct.
RK_TRAIN_FIELD(std::string, conv_algo, "", run, option_no_default,
               "auto | direct: convolution algorithm (direct: no Winograd workspace; default: RECKON_CONV_ALGO, "
               "else auto)")
// The activations' layout (optim/step.h ActivationLayout): "auto" (channels_last in bf16),
// "contiguous", "channels_last". Came after format 1's checkpoints: "auto" when absent.
RK_TRAIN_FIELD(std::string, memory_format, "auto", run, option,
               "auto | contiguous | channels_last: the activations' layout (auto: channels_last in bf16)")
// Dynamic loss scaling (optim/grad_scaler.h): "auto" (on for fp16 only), "on", "off".
RK_TRAIN_FIELD(std::string, grad_scaler, "auto", numbers_or_default, option,
               "dynamic loss scaling: auto (fp16 only) | on | off")
// A memory budget in bytes (0: none). The run is planned to fit (reckon plan): batch x accum is
// kept as the effective batch while micro-batch, accumulation, precision and recomputation are
// chosen; a run that cannot fit stops before it starts, with the ladder as its error. On
// --resume the checkpoint's settings are the plan, so it is ignored.
RK_TRAIN_FIELD(int64_t, max_memory, 0, planned, bytes,
               "memory budget (e.g. 4GiB, 512MiB): plan micro-batch, accumulation, precision and recomputation for the "
               "effective batch --batch x --accum; refuse a run that cannot fit")
RK_TRAIN_FIELD(uint64_t, seed, 0, numbers, option, "random seed (initialisation, shuffling, augmentation, dropout)")
RK_TRAIN_FIELD(int, threads, 0, run, option,
               "CPU threads (0: all cores, fewer while other processes hold some, unless OMP_NUM_THREADS is set)")
// omp_set_num_threads when > 0; 0: train/threads.h
RK_TRAIN_FIELD(std::string, out, "runs/lenet5", run, option_no_default,
               "output directory (last.safetensors, metrics.csv/.jsonl, events.out.tfevents.*); default runs/MODEL")
// Continue from out/last.safetensors: every `numbers` field then comes from the checkpoint (model
// must match); the `run` fields stay as given.
RK_TRAIN_FIELD(bool, resume, false, run, flag, "continue the run in --out from its last.safetensors")
// "auto" (per-channel mean/std of the training split), "none", or "M1,M2,../S1,S2,..".
RK_TRAIN_FIELD(std::string, normalize, "auto", numbers, option,
               "auto (training-split mean/std) | none | M1,M2,../S1,S2,..")
// A seeded hold-out of the training split for validation (data::split_dataset, by --seed):
// evaluated after each epoch, best.safetensors kept by its accuracy; --early-stop ends the run
// after N epochs without a gain. Both came after format 1's first checkpoints: 0 when absent.
RK_TRAIN_FIELD(double, val_split, 0.0, numbers_or_default, option,
               "hold out this fraction of the training split for validation (0: none); keeps best.safetensors")
RK_TRAIN_FIELD(int64_t, early_stop, 0, numbers_or_default, option,
               "stop after N epochs without a gain in validation accuracy (needs --val-split; 0: never)")
// "none" or a comma list of "crop[:PAD]" (random crop with PAD zero padding, default 4) and "flip".
RK_TRAIN_FIELD(std::string, augment, "none", numbers, option, "none | comma list of crop[:PAD], flip")
RK_TRAIN_FIELD(int64_t, checkpoint_every, 0, run, option, "also checkpoint every N steps (0: at epoch ends only)")
RK_TRAIN_FIELD(int64_t, log_every, 10, run, option, "steps per metrics row / TensorBoard point")
RK_TRAIN_FIELD(int64_t, print_every, 200, run, option, "steps per log line when stderr is not a terminal")
RK_TRAIN_FIELD(int64_t, eval_batch, 0, run, option, "batch size of the evaluation (0: the training batch, whose memory it then reuses)")
RK_TRAIN_FIELD(bool, drop_last, false, numbers, flag, "drop the last partial batch of each epoch")
// The ledger's prediction of the run (step time, the process's peak resident memory), printed
// before the first step and set beside what was measured at the end (train/trainer.h).
RK_TRAIN_FIELD(bool, no_predict, false, run, flag, "do not predict the step time and process memory before the run")
RK_TRAIN_FIELD(int, prefetch, 2, run, none, "batches the loader prepares ahead")
// Stop after this many steps in all (a checkpoint is written first), as if interrupted; 0: run to
// the end. For tests and for splitting a run.
RK_TRAIN_FIELD(int64_t, stop_after, 0, run, option, "stop after N steps in all, with a checkpoint (resume later)")
// --resume with --epochs N: the run's new length (0: the checkpoint's). The schedule is
// re-planned over N epochs from where the run stands; a finished run goes on to N.
RK_TRAIN_FIELD(int64_t, resume_epochs, 0, run, none, "--resume --epochs N: extend (or shorten) the run to N epochs")
// Set by cmd_train from --progress / --no-progress and --quiet.
RK_TRAIN_FIELD(int, progress, -1, run, none, "progress bar: -1 when stderr is a terminal, 0 off, 1 on")
RK_TRAIN_FIELD(int, verbose, 1, run, none, "0: print nothing")
// Weights to start from (not a resume: a new run, its own optimizer and schedule). The next two
// fields came with quantization-aware training (train/qat.h): checkpoints from before lack them.
RK_TRAIN_FIELD(std::string, checkpoint, "", run, option_no_default,
               "start from these weights: a reckon checkpoint or a safetensors state dict of the same model")
RK_TRAIN_FIELD(bool, qat, false, numbers_or_default, flag,
               "quantization-aware training (needs --checkpoint): fake-quantized conv/linear layers with batch norm "
               "folded, observers and batch norm frozen after the first QAT epoch; writes model.int8.onnx")
RK_TRAIN_FIELD(int64_t, qat_start_epoch, 0, numbers_or_default, option, "--qat: epochs before this one train in fp32")
