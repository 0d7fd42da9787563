# Set-up and checks for jaxkeras. Each target creates .venv when it is missing.
# PY picks the interpreter: the default python3 gets .venv, any other its own venv
# (make test PY=python3.13: .venv-python3.13), each with the JAX that interpreter resolves.
PY ?= python3
ifeq ($(PY),python3)
VENV := .venv
else
VENV := .venv-$(notdir $(PY))
endif
BIN := $(VENV)/bin
# A shell command that prints the path of interpreter $(1): $(1) itself where it runs, else
# the one pyenv has installed under that name (pyenv's shims run only the versions it selects)
FIND_PY = { $(1) -c 'import sys; print(sys.executable)' 2>/dev/null || \
	PYENV_VERSION=$$(pyenv versions --bare 2>/dev/null | tr '\n' :) pyenv which $(1) 2>/dev/null; }
STAMP := $(VENV)/.installed-dev
# Keras 2.3.1's own test tree, from its source distribution on PyPI (never committed)
KERAS_TESTS := $(VENV)/keras-2.3.1-tests
KERAS_SUITE := $(KERAS_TESTS)/tests/conftest.py

BENCH_VENV := .venv-bench

.PHONY: test test-fast test-matrix demo lint docs bench bench-quick gpu-check clean

# The Pythons pyproject.toml's classifiers name (jaxlib 0.10 and later need 3.11); test-matrix
# runs make test on each this machine has. Make rather than nox or tox: nothing more to
# install, and the same venvs and targets as make test PY=...
PYTHONS := 3.11 3.12 3.13

$(BIN)/python:
	@python=$$($(call FIND_PY,$(PY))) || { echo "make: no $(PY) on this machine" >&2; exit 1; }; \
	echo "$$python -m venv $(VENV)"; $$python -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

$(KERAS_SUITE): | $(BIN)/python
	mkdir -p $(KERAS_TESTS)
	$(BIN)/python -m pip download -q --no-deps --no-binary :all: keras==2.3.1 -d $(KERAS_TESTS)
	tar xzf $(KERAS_TESTS)/Keras-2.3.1.tar.gz -C $(KERAS_TESTS) --strip-components=1 \
		Keras-2.3.1/tests
	rm $(KERAS_TESTS)/Keras-2.3.1.tar.gz

# Keras 2.2.0 and 2.2.4 (never committed), each importable from its own folder (the venv's
# Keras is 2.3.1), 2.2.0 with the Keras-Applications and -Preprocessing it pins (2.2.4 takes
# the venv's), and Keras 2.2.4's backend tests from its source distribution. tests/test_keras22.py
# finds them in the venv that runs it (sys.prefix/keras-2.2)
KERAS22 := $(VENV)/keras-2.2
KERAS22_READY := $(KERAS22)/.ready

$(KERAS22_READY): | $(BIN)/python
	rm -rf $(KERAS22)
	$(BIN)/python -m pip install -q --no-deps --target $(KERAS22)/2.2.0 keras==2.2.0 \
		keras_applications==1.0.2 keras_preprocessing==1.0.1
	$(BIN)/python -m pip install -q --no-deps --target $(KERAS22)/2.2.4 keras==2.2.4
	mkdir -p $(KERAS22)/2.2.4-tests
	$(BIN)/python -m pip download -q --no-deps --no-binary :all: keras==2.2.4 -d $(KERAS22)
	tar xzf $(KERAS22)/Keras-2.2.4.tar.gz -C $(KERAS22)/2.2.4-tests --strip-components=1 \
		Keras-2.2.4/tests/conftest.py Keras-2.2.4/tests/keras/backend/backend_test.py \
		Keras-2.2.4/tests/keras/backend/reference_operations.py
	rm $(KERAS22)/Keras-2.2.4.tar.gz
	touch $@

# keras-contrib (keras-team's; never committed) is not on PyPI, so `make test` cannot fetch it:
# `make keras-contrib KERAS_CONTRIB_GIT=<a clone of keras-team/keras-contrib>` puts its last
# commit's package and tests into the venv, where tests/test_keras_contrib.py and
# tests/test_keras_contrib_suite.py find them (sys.prefix/keras-contrib); without it they skip
KERAS_CONTRIB := $(VENV)/keras-contrib
KERAS_CONTRIB_COMMIT := 3fc5ef709e061416f4bc8a92ca3750c824b5d2b0

.PHONY: keras-contrib
keras-contrib: | $(BIN)/python
	@test -n "$(KERAS_CONTRIB_GIT)" || { echo "make keras-contrib: KERAS_CONTRIB_GIT must name \
	a clone of keras-team/keras-contrib (it is not on PyPI)" >&2; exit 1; }
	rm -rf $(KERAS_CONTRIB) && mkdir -p $(KERAS_CONTRIB)
	git -C $(KERAS_CONTRIB_GIT) archive $(KERAS_CONTRIB_COMMIT) keras_contrib tests \
		| tar x -C $(KERAS_CONTRIB)

# the tests find this venv's Keras 2.3.1 tree through JAXKERAS_KERAS_TESTS
RUN_TESTS := JAXKERAS_KERAS_TESTS=$(abspath $(KERAS_TESTS)) $(BIN)/python -m pytest

test: $(STAMP) $(KERAS_SUITE) $(KERAS22_READY)
	$(RUN_TESTS) -n 2 tests
	$(BIN)/python -m pytest -p no:cacheprovider --doctest-modules jaxkeras

# The fast suite (what CI runs on the newest Python): the tests not marked slow, then Keras
# 2.3.1's own suite (marked slow; alone, as it runs its two workers itself)
test-fast: $(STAMP) $(KERAS_SUITE) $(KERAS22_READY)
	$(RUN_TESTS) -n 2 -m "not slow" tests
	$(RUN_TESTS) tests/test_keras2_suite.py

# make test on each supported Python this machine has (the default python3's in .venv)
test-matrix:
	@default=$$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])'); failed=; \
	for v in $(PYTHONS); do \
		if [ "$$v" = "$$default" ]; then py=python3; \
		elif $(call FIND_PY,python$$v) >/dev/null; then py=python$$v; \
		else echo "test-matrix: no python$$v on this machine, skipped"; continue; fi; \
		echo "test-matrix: Python $$v ($$py)"; \
		$(MAKE) --no-print-directory test PY=$$py || failed="$$failed $$v"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-matrix: failed on Python$$failed" >&2; exit 1; fi

demo: $(STAMP)
	$(BIN)/python examples/digits_demo.py

# the guides and the API reference (Sphinx: MyST Markdown, autodoc, napoleon, furo) into site/
# (git-ignored); any warning fails the build. make test builds it too (tests/test_docs.py)
docs: $(STAMP)
	$(BIN)/sphinx-build -W --keep-going -b html docs site

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

$(BENCH_VENV)/.installed: pyproject.toml
	$(PY) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/python -m pip install -q --upgrade pip
	$(BENCH_VENV)/bin/python -m pip install -q -e '.[bench]'
	touch $@

# One markdown table of every benchmark's ratios, also written to benchmarks/RESULTS.md
bench: $(STAMP) $(BENCH_VENV)/.installed
	$(BIN)/python benchmarks/run_all.py

# The same at reduced sizes and repetitions (about ten minutes on two cores)
bench-quick: $(STAMP) $(BENCH_VENV)/.installed
	$(BIN)/python benchmarks/run_all.py --quick

# The accelerator check: train steps, mixed precision, multi-step calls and a Keras fit on the
# default JAX platform (a GPU where there is one), one table in benchmarks/RESULTS-gpu.md
gpu-check: $(STAMP)
	$(BIN)/python benchmarks/gpu_check.py --output benchmarks/RESULTS-gpu.md

clean:
	rm -rf $(VENV) $(BENCH_VENV) build site *.egg-info .pytest_cache
