# Set-up and checks for jaxkeras. Each target creates .venv when it is missing.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
# Keras 2.3.1's own test tree, from its source distribution on PyPI (never committed)
KERAS_TESTS := $(VENV)/keras-2.3.1-tests
KERAS_SUITE := $(KERAS_TESTS)/tests/conftest.py

BENCH_VENV := .venv-bench

.PHONY: test demo lint docs bench bench-quick gpu-check clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
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

test: $(STAMP) $(KERAS_SUITE)
	$(BIN)/python -m pytest -n 2 tests
	$(BIN)/python -m pytest -p no:cacheprovider --doctest-modules jaxkeras

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
