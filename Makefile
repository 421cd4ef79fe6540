# Thin wrapper over CMake so that a newcomer needs two commands:
#   make demo   install dependencies, build, plan the example model
#   make test   install dependencies, build, run every test through CTest
# Plain CMake works as well: cmake -S . -B build && cmake --build build.

BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
DEMO_MODEL ?= examples/hf/llama-3-8b.json
DEMO_GPUS ?= 16

.PHONY: all deps deps-mpi build demo test asan bench validate validate-calibrated validate-profile fuzz valgrind clean

all: build

deps:
	@sh scripts/install-deps.sh

# Open MPI as well, for `mpirun -np N autopar profile --mpi` across nodes;
# the next build finds it and compiles the profiler's MPI mode in.
deps-mpi:
	@AP_WITH_MPI=1 sh scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

demo: build
	./$(BUILD)/autopar graph $(DEMO_MODEL)
	./$(BUILD)/autopar plan $(DEMO_MODEL) --gpus $(DEMO_GPUS) -o plan.json

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# Every test again under AddressSanitizer and UndefinedBehaviorSanitizer.
asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan \
	  CMAKE_FLAGS="-DAP_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug $(CMAKE_FLAGS)"

# Planning speed and ILP sizes (docs/benchmarks.md); never part of `make test`.
bench: build
	./$(BUILD)/bench/bench_ilp
	sh bench/plan.sh ./$(BUILD)/autopar
	sh bench/graph_scale.sh ./$(BUILD)/autopar

# Predictions against published training runs (docs/validation.md).
validate: build
	sh bench/validate.sh ./$(BUILD)/autopar

validate-calibrated: build
	sh bench/validate.sh ./$(BUILD)/autopar --calibrated

validate-profile: build
	sh bench/validate.sh ./$(BUILD)/autopar --profile h100-sxm=examples/clusters/h100-sxm-profile.json \
	    --profile h200=examples/clusters/h200-profile.json

# libFuzzer harnesses (clang), FUZZ_SECONDS each, from fuzz/corpus/.
FUZZ_SECONDS ?= 60
fuzz:
	@AP_WITH_FUZZ=1 sh scripts/install-deps.sh
	@sh scripts/fuzz.sh $(FUZZ_SECONDS)

# Valgrind memcheck over the unit tests and the end-to-end CLI commands.
valgrind:
	@AP_WITH_VALGRIND=1 sh scripts/install-deps.sh
	@sh scripts/valgrind.sh

clean:
	rm -rf build build-asan build-fuzz build-valgrind
