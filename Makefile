# SPDX-License-Identifier: Apache-2.0
# Thin wrapper over CMake. `make demo` and `make test` work on a fresh Debian bookworm machine.
BUILD_DIR ?= build
JOBS ?= 2
CMAKE_ARGS ?=
# Debian's Python (the default python3 on PATH may not be Debian's).
PYTHON ?= /usr/bin/python3
# Unity build of the Release build too (see ASAN_FLAGS below): a fresh build on CI's two cores is the largest part
# of `make test`. UNITY=OFF for quicker rebuilds of one file while developing.
UNITY ?= ON

# The sanitizer builds: every test again under AddressSanitizer + UndefinedBehaviorSanitizer (part of
# `make test`), and ThreadSanitizer on the threaded parts (`make test-tsan`, not in CI: slower). Low
# optimisation keeps them quick to build; Python is left out (its interpreter is not instrumented);
# warnings are errors in the main build only (g++ 12 with ASan warns falsely in libstdc++).
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
# -O0 for ASan+UBSan: UBSan's checks make -O1 compile 2.7x slower than the release build, -O0 1.5x.
SANITIZER_CMAKE_ARGS = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DJOULE_WERROR=OFF -DJOULE_BUILD_PYTHON=OFF \
  -DJOULE_BUILD_BENCH=OFF
# Unity build (also for ASan+UBSan): at -O0 each file re-parses the same heavy headers (gtest, nlohmann-json,
# cpp-httplib, fmt, spdlog, Boost); batching each target's files (up to 8 per translation unit, CMake's default)
# parses them once per batch: 216 compiler runs become 96. Files whose file-local names clash with another file's
# of the same target are compiled alone (SKIP_UNITY_BUILD_INCLUSION, beside each target).
ASAN_FLAGS = -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O0 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O0 -g1" -DCMAKE_UNITY_BUILD=ON
TSAN_FLAGS = -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_UNITY_BUILD=ON
ASAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:check_initialization_order=1 \
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# What TSan checks: the sampler and monitors (measure, carbon), the HTTP listener (metrics), the service and its
# stores, and the daemon.
TSAN_LABELS = measure|carbon|metrics|server|store|daemon

.PHONY: all deps configure build demo test test-asan test-tsan bench fuzz tidy format clean package

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DJOULE_WERROR=ON -DCMAKE_UNITY_BUILD=$(UNITY) \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	$(BUILD_DIR)/joule demo

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS) --timeout 300
	$(MAKE) --no-print-directory test-asan

test-asan: deps
	@cmake -S . -B $(ASAN_DIR) -G Ninja -DJOULE_SANITIZE="address;undefined" $(SANITIZER_CMAKE_ARGS) $(ASAN_FLAGS) \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(ASAN_DIR) -j$(JOBS)
	$(ASAN_ENV) ctest --test-dir $(ASAN_DIR) --output-on-failure -j$(JOBS) --timeout 600

test-tsan: deps
	@cmake -S . -B $(TSAN_DIR) -G Ninja -DJOULE_SANITIZE=thread $(SANITIZER_CMAKE_ARGS) $(TSAN_FLAGS) \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_ARGS) >/dev/null
	@cmake --build $(TSAN_DIR) -j$(JOBS)
	$(TSAN_ENV) ctest --test-dir $(TSAN_DIR) --output-on-failure -j$(JOBS) --timeout 900 -L "$(TSAN_LABELS)"

# The Debian package build/joule_VERSION_ARCH.deb (docs/install.md).
package: build
	cd $(BUILD_DIR) && cpack -G DEB

bench: build
	scripts/run-bench $(BUILD_DIR)

fuzz: deps
	scripts/run-fuzz

# clang-tidy reads each file's own compile command: a configure without the unity build (nothing is built).
TIDY_DIR ?= build-tidy
tidy: deps
	@cmake -S . -B $(TIDY_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=OFF \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_ARGS) >/dev/null
	scripts/run-tidy $(TIDY_DIR)

format:
	find include src tests bench python -name '*.hpp' -o -name '*.cpp' -o -name '*.c' -o -name '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) $(TIDY_DIR)
