# kvtier: `make demo` runs the main job, `make test` runs every test. Both install what they need.
BUILD    ?= build
JOBS     ?= 2
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_WERROR=ON
CTEST_FLAGS ?= --output-on-failure -j$(JOBS) --no-tests=error

.PHONY: deps build demo test test-asan test-tsan fuzz clean

deps:
	@bash scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

demo: build
	@$(BUILD)/src/tools/kvtier demo

test: build
	@ctest --test-dir $(BUILD) $(CTEST_FLAGS)

test-asan:
	@$(MAKE) --no-print-directory test BUILD=build-asan \
	  CMAKE_FLAGS="$(CMAKE_FLAGS) -DKVTIER_SANITIZE=address -DKVTIER_BUILD_BENCH=OFF"

test-tsan:
	@$(MAKE) --no-print-directory test BUILD=build-tsan \
	  CMAKE_FLAGS="$(CMAKE_FLAGS) -DKVTIER_SANITIZE=thread -DKVTIER_BUILD_BENCH=OFF"

clean:
	rm -rf build build-asan build-tsan build-fuzz
