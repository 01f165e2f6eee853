# Two commands for a fresh machine: `make run` and `make test` (see README).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# ON or OFF sets RELAY_WERROR; empty keeps what the build folder has (a user's build: OFF).
WERROR ?=
PREFIX ?= /usr/local

.PHONY: all build run test asan tsan warnings hipcheck install gputest gpubench clean deps format format-check

all: build

deps:
	@command -v cmake >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq cmake)
	@command -v cc >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq build-essential)
	@command -v pkg-config >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq pkg-config)

build: deps
	@cmake -S . -B $(BUILD) $(if $(WERROR),-DRELAY_WERROR=$(WERROR)) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: relaycc-bench over all four collectives on the embedded default
# (shm transport, 8 ranks, when no GPU is present; the GPUs when there are).
run: build
	./$(BUILD)/relaycc-bench --backend auto

# Every CPU test, each in its own process with a timeout; CTest prints the summary. Warnings are
# errors here (and so in CI), not in a user's `make build`. The tests include the installed tree:
# examples/ built against it with pkg-config and find_package.
test: WERROR = ON
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu --timeout 600

asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DRELAY_SANITIZE=ON -DRELAY_WITH_CUDA=OFF"

# ThreadSanitizer over the interposer's tests (tests/shim: ranks with calls on several comms from several
# threads, aborts and async-error polls from others); needs nvcc and nccl.h, as the shim does. Only their
# targets are built, for one GPU architecture (no GPU runs here). A report fails the test.
TSAN_TESTS ?= ^shim_
tsan:
	@cmake -S . -B build-tsan -DRELAY_TSAN=ON -DRELAY_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target test_shim
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" \
	  ctest --output-on-failure -j $(JOBS) -R '$(TSAN_TESTS)' --timeout 600

# Users pick the compiler and build type: the C code at every build type with each of COMPILERS,
# warnings as errors, no tests (CI runs it; about 15 s a build on 2 cores). The log shows on failure.
COMPILERS ?= gcc clang
warnings:
	@for cc in $(COMPILERS); do for bt in Debug Release RelWithDebInfo; do \
	  b=build-warn/$$cc-$$bt; echo "warnings: $$cc $$bt"; mkdir -p $$b; \
	  { cmake -S . -B $$b -DCMAKE_C_COMPILER=$$cc -DCMAKE_BUILD_TYPE=$$bt -DRELAY_WITH_CUDA=OFF \
	      -DRELAY_WERROR=ON && cmake --build $$b -j $(JOBS); } >$$b.log 2>&1 || { cat $$b.log; exit 1; }; \
	done; done

# The HIP flavour (AMD GPUs over RCCL; README "ROCm") compiled for HIP_ARCHS with warnings as errors. A
# compile check: no AMD GPU is needed, and nothing of it runs here. Installs the distribution's hipcc when
# missing (Debian 12: hipcc 5.2).
HIP_ARCHS ?= gfx90a;gfx940
HIP_BUILD ?= build-hip
hipcheck: deps
	@command -v hipcc >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq hipcc libamdhip64-dev)
	@cmake -S . -B $(HIP_BUILD) -DRELAY_WITH_HIP=ON -DRELAY_WERROR=ON "-DRELAY_HIP_ARCHITECTURES=$(HIP_ARCHS)" \
	  >/dev/null
	@cmake --build $(HIP_BUILD) -j $(JOBS)

# The formatter (.clang-format; clang-format 14.0.6, pinned: scripts/format.sh says where it comes from).
# `make format` rewrites the tracked C/CUDA sources; `make format-check` (CI) changes nothing and fails
# listing the files that are not formatted.
format:
	scripts/format.sh $(BUILD)

format-check:
	scripts/format.sh --check $(BUILD)

# Headers, librelaycc.so/.a, the tools, relaycc.pc and the CMake package under PREFIX.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# GPU tests (run on a GPU machine): make gputest, or make gputest RANKS=8 for 8 ranks on the GPUs there are
# (rank r on GPU r % GPUs; where ranks share a GPU: a private MPS daemon, a NCCL_HOSTID per rank, every rank
# under a deadline; docs/gpu-harness.md). Without a GPU it says so and skips.
RANKS ?=
gputest: build
	bash scripts/gputest.sh $(BUILD) $(RANKS)

clean:
	rm -rf build build-asan build-tsan build-warn build-hip
