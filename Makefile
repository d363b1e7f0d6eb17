# reckon: `make run` trains lenet5 on Fashion-MNIST, `make test` runs the tests. Both install what is
# missing (Debian packages) and build first, so they work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= 2
DEB_PACKAGES := cmake ninja-build g++ libdnnl-dev ocl-icd-opencl-dev libfmt-dev libcli11-dev \
  nlohmann-json3-dev zlib1g-dev libpng-dev libjpeg-dev libgtest-dev libgmock-dev libbenchmark-dev dataset-fashion-mnist \
  libonnx-dev libprotobuf-dev protobuf-compiler libonnx-testdata
# The tests' oracles, from PyPI, for the python3 on PATH: ONNX Runtime runs what reckon exports,
# torch's exporter writes the torchvision models reckon imports.
PY_PACKAGES := onnx onnxruntime numpy torch torchvision
PYTHON ?= python3

.PHONY: deps pydeps build run test bench clean

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

pydeps:
	@$(PYTHON) -c "import onnx, onnxruntime, numpy, torch, torchvision" 2>/dev/null || \
	  { echo "installing (pip): $(PY_PACKAGES)"; $(PYTHON) -m pip install -q $(PY_PACKAGES); }

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	ninja -C $(BUILD) -j$(JOBS)

run: build
	./$(BUILD)/reckon train lenet5 --data fashion-mnist --epochs 2 --out runs/lenet5

test: build pydeps
	# Two test processes share two cores: idle OpenMP workers must sleep, not spin.
	cd $(BUILD) && OMP_WAIT_POLICY=passive RECKON_PYTHON=$(PYTHON) ctest --output-on-failure -j$(JOBS) --timeout 1200

bench: build
	./$(BUILD)/reckon_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

clean:
	rm -rf $(BUILD)
