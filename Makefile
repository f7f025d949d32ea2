# pystore — the two commands that matter: `make demo` and `make test` (both build what they need).
PY       ?= python3.11
VENV     := .venv
VPY      := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
PYX      := $(wildcard pystore/*.pyx pystore/*.pxd pystore/*.h)
BUILT    := pystore/.built

.PHONY: venv build debug annotate lint typecheck test test-fast fuzz bench peers demo clean

venv: $(STAMP) $(BUILT)

$(STAMP): pyproject.toml setup.py
	@command -v $(PY) >/dev/null || { echo "pystore needs $(PY) on PATH"; exit 1; }
	@command -v gcc >/dev/null || command -v cc >/dev/null || { echo "pystore needs a C compiler (gcc)"; exit 1; }
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "setuptools>=77" wheel "Cython>=3.0,<4"
	$(VPY) -m pip install -q --no-build-isolation -e ".[test,bench,spark,dev]"
	touch $(STAMP)

# Compile the extensions in place (the editable install imports them from pystore/).
$(BUILT): $(STAMP) $(PYX) setup.py
	$(VPY) setup.py -q build_ext --inplace -j 2
	touch $(BUILT)

build: $(BUILT)

debug: $(STAMP)
	PYSTORE_DEBUG=1 $(VPY) setup.py -q build_ext --inplace --force -j 2
	rm -f $(BUILT)

annotate: $(STAMP)
	PYSTORE_ANNOTATE=1 $(VPY) setup.py -q build_ext --inplace --force -j 2
	@echo "annotations: pystore/*.html"

lint: venv
	$(VENV)/bin/ruff check pystore tests bench
	$(VENV)/bin/cython-lint pystore/*.pyx pystore/*.pxd

typecheck: venv
	$(VENV)/bin/mypy pystore

test: venv
	$(VPY) -m pytest -q -p no:cacheprovider tests

test-fast: venv
	$(VPY) -m pytest -q -p no:cacheprovider -m "not slow and not spark" tests

# Store-folder mutation fuzzer (tests/fuzz): N damaged copies of a small reference store, every read path on
# each in a child process with a time limit; a table of outcomes. One case: $(VPY) -m tests.fuzz --case SEED:I
N        ?= 1000
SEED     ?= 1
fuzz: venv
	$(VPY) -m tests.fuzz -n $(N) --seed $(SEED) --workers 2

bench: venv
	$(VPY) -m pytest -q -p no:cacheprovider bench --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

peers: venv
	$(VPY) bench/peers.py

demo: venv
	$(VENV)/bin/pystore demo

clean:
	rm -rf build dist *.egg-info pystore/*.c pystore/*.so pystore/*.html $(BUILT) .pytest_cache .benchmarks
