# Thin front end over CMake. `make` builds, `make test` installs missing Debian packages and runs
# every test tier this machine can run, `make run` runs the benchmark suite, `make install`.
BUILD ?= build
CMAKE ?= cmake
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)

.PHONY: all build configure test run install deps clean

all: build

configure:
	@$(CMAKE) -S . -B $(BUILD) $(CMAKE_ARGS) >/dev/null

build: configure
	@$(CMAKE) --build $(BUILD) -j $(JOBS)

deps:
	@scripts/install-deps.sh

test: deps
	@scripts/run-tests.sh

run: deps build
	@scripts/run-bench.sh

install: build
	@$(CMAKE) --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-tsan
