# Two commands for a fresh machine: `make run` and `make test` (see README).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
# ON or OFF sets RELAY_WERROR; empty keeps what the build folder has (a user's build: OFF).
WERROR ?=
PREFIX ?= /usr/local

.PHONY: all build run test asan warnings hipcheck install gputest gpubench clean deps

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

# Headers, librelaycc.so/.a, the tools, relaycc.pc and the CMake package under PREFIX.
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

# GPU tests (run on a GPU machine): make gputest
gputest: build
	cd $(BUILD) && ctest --output-on-failure -L gpu --timeout 900

clean:
	rm -rf build build-asan build-warn build-hip
