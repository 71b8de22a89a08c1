# kvtier: `make demo` runs the main job, `make test` runs every test. Each installs what it needs:
# `make build`/`make demo`/`make deb`/`make install` the build's packages only (scripts/install-deps.sh
# --demo: no server); `make python` those and Python's (--python); `make test` and the targets below it
# also the tools and servers the tests start (install-deps.sh).
BUILD    ?= build
# One CMake installation configures, builds, tests and packages: ctest and cpack are taken from the
# directory of $(CMAKE), never separately from PATH (pip's CMake 4.x may stand before Debian's 3.25 there,
# and CPack 3.x and 4.x write a .deb's ldconfig differently). Supported: CMake 3.25 (Debian 12,
# /usr/bin/cmake) through 4.4; `make CMAKE=/usr/bin/cmake test BUILD=build-3.25` builds with Debian's
# (a build directory keeps the CMake that configured it).
CMAKE    ?= cmake
CMAKE_BINDIR := $(dir $(shell command -v $(CMAKE) 2>/dev/null))
CTEST    ?= $(CMAKE_BINDIR)ctest
CPACK    ?= $(CMAKE_BINDIR)cpack
JOBS     ?= 2
CMAKE_FLAGS ?= -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKVTIER_WERROR=ON
CTEST_FLAGS ?= --output-on-failure -j$(JOBS) --no-tests=error

.PHONY: deps deps-build deps-python configure build demo deb install test python wheel test-asan test-tsan check-locking fuzz fuzz-smoke fuzz-build clean test-engines

deps:
	@bash scripts/install-deps.sh

deps-build:
	@bash scripts/install-deps.sh --demo

deps-python:
	@bash scripts/install-deps.sh --python

configure: deps-build
	@$(CMAKE) -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null

build: configure
	@$(CMAKE) --build $(BUILD) -j$(JOBS)

# The demo needs the CLI only: the tests and benchmarks are built by `make build` and `make test`.
demo: configure
	@$(CMAKE) --build $(BUILD) -j$(JOBS) --target kvtier_cli
	@$(BUILD)/src/tools/kvtier demo

# What is installed (cmake/KvtierInstall.cmake): the CLI, libkvtier.so.1, kvtier.h, the CMake package and
# kvtier.pc. `make install` puts them under PREFIX; `make deb` packs them, under /usr, into
# $(BUILD)/kvtier_<version>_<arch>.deb (CPack; dependencies from dpkg-shlibdeps).
PREFIX ?= /usr/local
install: configure
	@$(CMAKE) --build $(BUILD) -j$(JOBS) --target kvtier_cli kvtier_shared
	@$(CMAKE) --install $(BUILD) --prefix $(PREFIX)

deb: configure
	@$(CMAKE) --build $(BUILD) -j$(JOBS) --target kvtier_cli kvtier_shared
	@$(CPACK) --config $(BUILD)/CPackConfig.cmake -B $(BUILD) >$(BUILD)/cpack.log || { cat $(BUILD)/cpack.log; exit 1; }
	@ls $(BUILD)/kvtier_*.deb

test: deps build
	@$(CTEST) --test-dir $(BUILD) $(CTEST_FLAGS)

# The Python package in place (python/kvtier): builds libkvtier.so and puts a copy inside the package
# (git-ignored), so that `/usr/bin/python3 examples/save_load.py` and the tests find it. An installed
# package needs no `make python`: `pip install ./python` builds its own copy (`make wheel` below).
# The package needs only the build's packages and Python's (no server, no test tool).
python: deps-python
	@$(CMAKE) -S . -B $(BUILD) $(CMAKE_FLAGS) >/dev/null
	@$(CMAKE) --build $(BUILD) -j$(JOBS) --target kvtier_shared
	@cp -f $(BUILD)/src/capi/libkvtier.so python/kvtier/libkvtier.so
	@echo "python: python/kvtier/libkvtier.so ready"

# A wheel of the Python package with libkvtier.so inside, into $(WHEEL_DIR) (git-ignored):
# kvtier-<version>-py3-none-<platform>.whl. pip runs the package's in-tree build backend
# (python/build_backend/kvtier_build.py), which builds only kvtier_shared with $(CMAKE) (Release, no
# tests, benchmarks or CUDA; in build-wheel/cmake-<version>/, or $$KVTIER_CMAKE_BUILD_DIR; through
# ccache). Offline.
# `pip install ./python` in a venv does the same build and installs the package; no `make python` first.
WHEEL_DIR ?= dist
wheel: deps-python
	@mkdir -p $(WHEEL_DIR)
	@CMAKE="$(CMAKE)" /usr/bin/python3 -m pip wheel --quiet --no-deps --no-build-isolation --no-index \
	  -w $(WHEEL_DIR) ./python
	@ls $(WHEEL_DIR)/kvtier-*.whl

# Sanitizer runs shrink the heavy tests (KVTIER_TEST_SCALE) and stop at the first report.
SAN_SCALE ?= 0.25
SAN_ENV = KVTIER_TEST_SCALE=$(SAN_SCALE) UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1 \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/reliability/tsan.supp

test-asan:
	@$(SAN_ENV) $(MAKE) --no-print-directory test BUILD=build-asan \
	  CMAKE_FLAGS="$(CMAKE_FLAGS) -DKVTIER_SANITIZE=address -DKVTIER_BUILD_BENCH=OFF"

test-tsan:
	@$(SAN_ENV) $(MAKE) --no-print-directory test BUILD=build-tsan \
	  CMAKE_FLAGS="$(CMAKE_FLAGS) -DKVTIER_SANITIZE=thread -DKVTIER_BUILD_BENCH=OFF"

# Compiler-checked locking (src/core/thread_annotations.h): a clang build of the libraries and the CLI
# in which every finding of the thread-safety analysis, and every other warning, is an error. Unoptimised:
# only the compile-time check counts (the tests run in the builds above).
LOCKING_CMAKE_FLAGS = -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DKVTIER_WERROR=ON \
  -DKVTIER_BUILD_TESTS=OFF -DKVTIER_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS=-Wthread-safety -Wthread-safety-beta -Werror=thread-safety -Werror=thread-safety-beta"

check-locking: deps
	@$(CMAKE) -S . -B build-locking $(LOCKING_CMAKE_FLAGS) >/dev/null
	@$(CMAKE) --build build-locking -j$(JOBS)

# libFuzzer targets (fuzz/): a clang build with ASan+UBSan; `fuzz` runs each target FUZZ_SECONDS,
# `fuzz-smoke` a few seconds each (CI).
FUZZ_SECONDS ?= 60
FUZZ_CMAKE_FLAGS = -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS_DEBUG=-O1 -DCMAKE_CXX_FLAGS_DEBUG=-O1 \
  -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DKVTIER_BUILD_FUZZ=ON -DKVTIER_BUILD_TESTS=OFF -DKVTIER_BUILD_BENCH=OFF \
  "-DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link,address,undefined"

fuzz-build: deps
	@$(CMAKE) -S . -B build-fuzz $(FUZZ_CMAKE_FLAGS) >/dev/null
	@$(CMAKE) --build build-fuzz -j$(JOBS) --target kvtier_fuzz_all

fuzz: fuzz-build
	@bash fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	@bash fuzz/run.sh build-fuzz 5

clean:
	rm -rf build build-asan build-tsan build-fuzz build-locking build-wheel dist

# kvtier inside the real engines (issue 41): scripts/engines-venv.sh builds, or reuses when its pins match,
# one venv per engine outside the clone (KVTIER_ENGINES_DIR, default /var/cache/kvtier-engines; LMCache
# 0.5.6, SGLang 0.5.23's storage classes, vLLM 0.32's CPU backend; 1-2.5 min each to build, needs PyPI)
# and installs this clone's kvtier into it. The tests import this clone's package first (PYTHONPATH, which
# vLLM's processes inherit), so two clones sharing a venv never run each other's code.
# vLLM runs KvtierConnector end to end (python/tests/engines/vllm_cpu_e2e.py, 3-5.5 min on 2 cores), then
# with salt / LoRA keying deliberately removed (vllm_cpu_identity_e2e.py, 2.5-5 min), and KvtierHybridConnector
# on a sliding-window layer (vllm_cpu_window_e2e.py, about 2 min). A
# failed install fails the target. The last line runs README.md's quickstart as written (quickstart_e2e.py: a new
# venv over the pinned one, `pip install ./python`, `vllm serve` with kvtier, two requests).
test-engines: python
	@venv="$$(bash scripts/engines-venv.sh lmcache)" && PYTHONPATH="$(CURDIR)/python" \
	  KVTIER_LIBRARY="$(abspath $(BUILD))/src/capi/libkvtier.so" "$$venv/bin/python" -m pytest -q -p no:cacheprovider \
	  -p no:warnings python/tests/engines/lmcache_l2_adapter.py python/tests/engines/lmcache_connector.py
	@venv="$$(bash scripts/engines-venv.sh sglang)" && PYTHONPATH="$(CURDIR)/python" \
	  KVTIER_LIBRARY="$(abspath $(BUILD))/src/capi/libkvtier.so" "$$venv/bin/python" -m pytest -q -p no:cacheprovider \
	  -p no:warnings python/tests/engines/sglang_hicache.py python/tests/engines/sglang_connector.py \
	  python/tests/engines/sglang_identity.py python/tests/engines/sglang_hybrid.py
	@venv="$$(bash scripts/engines-venv.sh vllm)" && PYTHONPATH="$(CURDIR)/python" \
	  KVTIER_LIBRARY="$(abspath $(BUILD))/src/capi/libkvtier.so" "$$venv/bin/python" python/tests/engines/vllm_cpu_e2e.py
	@venv="$$(bash scripts/engines-venv.sh vllm)" && PYTHONPATH="$(CURDIR)/python" \
	  KVTIER_LIBRARY="$(abspath $(BUILD))/src/capi/libkvtier.so" "$$venv/bin/python" python/tests/engines/vllm_cpu_identity_e2e.py \
	  && PYTHONPATH="$(CURDIR)/python" KVTIER_LIBRARY="$(abspath $(BUILD))/src/capi/libkvtier.so" \
	  "$$venv/bin/python" python/tests/engines/vllm_cpu_window_e2e.py
	@venv="$$(bash scripts/engines-venv.sh vllm)" && "$$venv/bin/python" python/tests/engines/quickstart_e2e.py "$$venv"
