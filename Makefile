# Two commands for a fresh machine: `make run` and `make test` (see README).
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build run test asan gputest gpubench clean deps

all: build

deps:
	@command -v cmake >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq cmake)
	@command -v cc >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq build-essential)

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: relaycc-bench over all four collectives on the embedded default
# (shm transport, 8 ranks, when no GPU is present; the GPUs when there are).
run: build
	./$(BUILD)/relaycc-bench --backend auto

# Every CPU test, each in its own process with a timeout; CTest prints the summary.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) -LE gpu --timeout 600

asan:
	$(MAKE) test BUILD=build-asan CMAKE_FLAGS="-DRELAY_SANITIZE=ON -DRELAY_WITH_CUDA=OFF"

# GPU tests (run on a GPU machine): make gputest
gputest: build
	cd $(BUILD) && ctest --output-on-failure -L gpu --timeout 900

clean:
	rm -rf build build-asan
