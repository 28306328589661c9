# SPDX-License-Identifier: Apache-2.0
# Thin wrapper over CMake. `make demo` and `make test` work on a fresh Debian bookworm machine.
BUILD_DIR ?= build
JOBS ?= 2
CMAKE_ARGS ?=
# Debian's Python (the default python3 on PATH may not be Debian's).
PYTHON ?= /usr/bin/python3

.PHONY: all deps configure build demo test bench fuzz tidy format clean

all: build

deps:
	@scripts/install-deps

configure: deps
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release -DJOULE_WERROR=ON \
	  -DPython3_EXECUTABLE=$(PYTHON) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j$(JOBS)

demo: build
	$(BUILD_DIR)/joule demo

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j$(JOBS) --timeout 300

bench: build
	scripts/run-bench $(BUILD_DIR)

fuzz: deps
	scripts/run-fuzz

tidy: configure
	scripts/run-tidy $(BUILD_DIR)

format:
	find include src tests bench python -name '*.hpp' -o -name '*.cpp' -o -name '*.c' -o -name '*.h' | xargs clang-format -i

clean:
	rm -rf $(BUILD_DIR)
