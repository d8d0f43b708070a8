# Thin front end over CMake. `make` builds, `make test` installs missing Debian packages and runs
# every test tier this machine can run (main, ASan+UBSan and TSan builds; scripts/run-tests.sh),
# `make run` runs the benchmark suite, `make install` installs (PREFIX=/usr/local).
BUILD ?= build
CMAKE ?= cmake
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local

.PHONY: all build configure test run install deps format clean plans wheel

all: build

configure:
	@$(CMAKE) -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null

build: configure
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

test: deps
	@BUILD="$(BUILD)" JOBS="$(JOBS)" CMAKE_ARGS="$(CMAKE_ARGS)" scripts/run-tests.sh

# The benchmark needs only a compiler and CMake: a failed package install (no registry on a GPU
# machine) is reported and the run goes on with what is there.
run:
	@scripts/install-deps.sh || echo "cchan: could not install packages; running with what is here"
	@BUILD="$(BUILD)" scripts/run-bench.sh

install: build
	@$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

# A wheel of the Python package carrying this build's libraries (cchan/_libs/), so an installed
# wheel needs no CCHAN_LIBRARY_PATH: $(BUILD)/dist/cchan-<version>-py3-none-<platform>.whl
wheel: configure
	@$(CMAKE) --build $(BUILD) -j $(JOBS) --target wheel

# Formats the files changed since the last commit (clang-format, .clang-format).
format:
	@git diff --name-only --diff-filter=d HEAD -- '*.c' '*.h' '*.cu' '*.cpp' | xargs -r clang-format -i

# Regenerates the shipped execution plans (plans/) from python/cchan/dsl/algorithms; the dsl
# tests fail while plans/ is stale.
plans:
	@PYTHONPATH=python /usr/bin/python3 -m cchan.dsl plans -o plans

clean:
	rm -rf $(BUILD) $(BUILD)-asan $(BUILD)-tsan
