# reckon: `make run` trains lenet5 on Fashion-MNIST, `make test` runs the tests. Both install what is
# missing (Debian packages) and build first, so they work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= 2
DEB_PACKAGES := cmake ninja-build g++ libdnnl-dev ocl-icd-opencl-dev libfmt-dev libcli11-dev \
  nlohmann-json3-dev zlib1g-dev libpng-dev libjpeg-dev libgtest-dev libgmock-dev libbenchmark-dev dataset-fashion-mnist \
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
# What the tests need beyond the build: a browser for the HTML report's test (tests/python/test_report.py).
TEST_DEB_PACKAGES := chromium
# The sanitizer build and the fuzzers (make sanitize, make fuzz): clang with libFuzzer, and the
# LLVM OpenMP runtime clang's -fopenmp links.
SAN_PACKAGES := clang-14 libclang-rt-14-dev libomp-14-dev
# The tests' oracles, from PyPI, for the python3 on PATH: ONNX Runtime runs what reckon exports,
# torch's exporter writes the torchvision models reckon imports.
PY_PACKAGES := onnx onnxruntime numpy torch torchvision safetensors pytest
# What the build needs for the Python module (python/): nanobind, for the python3 on PATH.
PY_BUILD_PACKAGES := nanobind scikit-build-core
PYTHON ?= python3

.PHONY: deps pydeps pybuilddeps testdeps sandeps build run test bench clean sanitize-configure sanitize-build sanitize fuzz-ci fuzz san-hostile tsan

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

sandeps:
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(SAN_PACKAGES)"

testdeps:
	@$(MAKE) --no-print-directory deps DEB_PACKAGES="$(TEST_DEB_PACKAGES)"

pydeps:
	@$(PYTHON) -c "import onnx, onnxruntime, numpy, torch, torchvision, safetensors, pytest" 2>/dev/null || \
	  { echo "installing (pip): $(PY_PACKAGES)"; $(PYTHON) -m pip install -q $(PY_PACKAGES); }

pybuilddeps:
	@$(PYTHON) -c "import nanobind, scikit_build_core" 2>/dev/null || \
	  { echo "installing (pip): $(PY_BUILD_PACKAGES)"; $(PYTHON) -m pip install -q $(PY_BUILD_PACKAGES); }

build: deps pybuilddeps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$$(command -v $(PYTHON)) >/dev/null
	ninja -C $(BUILD) -j$(JOBS)

run: build
	./$(BUILD)/reckon train lenet5 --data fashion-mnist --epochs 2 --out runs/lenet5

test: build pydeps testdeps
	# Two test processes share two cores: idle OpenMP workers must sleep, not spin.
	cd $(BUILD) && OMP_WAIT_POLICY=passive RECKON_PYTHON=$(PYTHON) ctest --output-on-failure -j$(JOBS) --timeout 1200

bench: build
	./$(BUILD)/reckon_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

# Issue 14: the whole library, the tests and the fuzz targets built with clang under ASan and
# UBSan (any report is fatal), then every test run under it.
SAN_BUILD ?= build-san
FUZZ_SECONDS ?= 60
sanitize-configure: deps sandeps
	CXX=clang++-14 cmake -S . -B $(SAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1" -DRECKON_SANITIZE=address,undefined -DRECKON_FUZZ=ON -DRECKON_PYTHON=OFF >/dev/null

sanitize-build: sanitize-configure
	ninja -C $(SAN_BUILD) -j$(JOBS)

# The sanitized runs' cpu calibrations go to a cache of their own, never the user's.
SAN_ENV := OMP_WAIT_POLICY=passive RECKON_PYTHON=$(PYTHON) RECKON_CACHE_DIR=$(abspath $(SAN_BUILD))/reckon-cache \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# Left out under the sanitizers: a sanity bound on the measured memory bandwidth (instrumented
# loads are 3x slower), and the runs that train for minutes (5 to 12 times longer under ASan);
# the short tests run the same kernels, readers and writers.
SAN_SKIP := Ledger.DeviceCatalog|TrainRecipe\.|QuantCli.TrainedLenet5|Graph.ReplayedTrainingStepIsBitIdenticalForEveryZooModel|GoldenModels.Resnet18CifarSgdStepReferenceKernels|OnnxImport.FineTuningAnImportedLenet5|QuantLedger.Int8ArenaAndWeights

sanitize: sanitize-build pydeps
	cd $(SAN_BUILD) && $(SAN_ENV) ctest --output-on-failure -j$(JOBS) --timeout 1800 -E '$(SAN_SKIP)'

# What CI runs under ASan+UBSan besides the fuzzers (issue 14): the tests of hostile input (bad
# files, arguments and output directories, kills, full disks, hostile ONNX, the readers and the
# loader), one binary of their own (reckon_hostile_tests) in two shards at once. test_onnx.cpp's
# other tests (the exporter and ONNX Runtime oracles) are left to the release run.
SAN_HOSTILE_FILTER := -OnnxExport.*:OnnxImport.*:OnnxNodeTests.*:*/Torchvision.*:*/ExportZoo.*
san-hostile: sanitize-configure pydeps
	ninja -C $(SAN_BUILD) -j$(JOBS) reckon_hostile_tests reckon
	cd $(SAN_BUILD) && $(SAN_ENV) ../scripts/gtest_shards.sh ./reckon_hostile_tests $(JOBS) hostile-logs \
	  --gtest_filter='$(SAN_HOSTILE_FILTER)'

# The loader's threads under ThreadSanitizer (issue 14): tests/test_loader_threads.cpp with the
# core and data layers compiled with -fsanitize=thread (a build of its own, a minute or two). One
# OpenMP thread: the LLVM OpenMP runtime is not instrumented, and the loader uses none.
TSAN_BUILD ?= build-tsan
tsan: deps sandeps
	CXX=clang++-14 cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DRECKON_SANITIZE=thread -DRECKON_PYTHON=OFF >/dev/null
	ninja -C $(TSAN_BUILD) -j$(JOBS) reckon_loader_tsan
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 OMP_NUM_THREADS=1 $(TSAN_BUILD)/reckon_loader_tsan

# What CI runs after `make test`: the sanitized library and every fuzz target for FUZZ_SECONDS
# from its seeds (about 12 minutes on two cores). The whole suite under the sanitizers (`make
# sanitize`, about 60 minutes with its build) does not fit CI's time next to `make test`.
fuzz-ci: sanitize-configure
	ninja -C $(SAN_BUILD) -j$(JOBS) fuzzers
	RECKON_CACHE_DIR=$(abspath $(SAN_BUILD))/reckon-cache scripts/fuzz.sh $(SAN_BUILD) $(FUZZ_SECONDS)

# Each fuzz target for FUZZ_SECONDS from its committed seeds (fuzz/corpus/NAME); what it finds
# new goes to $(SAN_BUILD)/corpus/NAME. Fails on any finding; prints executions and coverage.
fuzz: sanitize-build
	RECKON_CACHE_DIR=$(abspath $(SAN_BUILD))/reckon-cache scripts/fuzz.sh $(SAN_BUILD) $(FUZZ_SECONDS)

clean:
	rm -rf $(BUILD) $(SAN_BUILD) $(TSAN_BUILD)
