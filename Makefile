# reckon: `make run` trains the demo job, `make test` runs the tests. Both install what is
# missing (Debian packages) and build first, so they work on a fresh Debian 12 machine.
BUILD ?= build
JOBS ?= 2
DEB_PACKAGES := cmake ninja-build g++ libdnnl-dev ocl-icd-opencl-dev libfmt-dev libcli11-dev \
  nlohmann-json3-dev zlib1g-dev libpng-dev libjpeg-dev libgtest-dev libgmock-dev libbenchmark-dev dataset-fashion-mnist

.PHONY: deps build run test bench clean

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

build: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	ninja -C $(BUILD) -j$(JOBS)

run: build
	./$(BUILD)/reckon demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 1200

bench: build
	./$(BUILD)/reckon_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

clean:
	rm -rf $(BUILD)
