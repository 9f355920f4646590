# relbook — one entry point for set-up, tests, the book and the experiments.
#   make test   CI's command: venv + install + export check + clean check + nbdev_test (smoke) + pytest
#   make book   builds the Jupyter Book into _build/html from the notebooks' stored outputs
# A GPU user picks their own torch build: make test TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128"
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
PROFILE ?= quick
NB_WORKERS ?= 2
# torch threads per notebook under nbdev_test: workers x threads <= cores, or OpenMP oversubscription
# slows the smoke run ~5x (measured: 151 s -> 31 s on 2 cores)
NB_THREADS ?= 1
BIN := $(VENV)/bin
STAMP := $(VENV)/.relbook-installed

.PHONY: help venv export check-export check-clean nbtest nbtest-cuda pytest test book notebooks experiments clean

help:
	@echo "make test | make book | make notebooks PROFILE=quick|full [NBS=nbs/05_object_sorting.ipynb] [STORED=1] | make experiments PROFILE=full"

$(STAMP): settings.ini setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

export: venv
	$(BIN)/nbdev_export

# The package is generated from the notebooks: exporting must not change what is committed.
check-export: export
	@if [ -n "$$(git status --porcelain -- relbook)" ]; then \
	  git status --short -- relbook; git --no-pager diff --stat -- relbook; \
	  echo "FAIL: nbdev_export changed relbook/ — export the notebooks and commit the result"; exit 1; fi
	@echo "ok: relbook/ matches the notebooks"

# Notebooks are committed clean (nbdev_clean): cleaning must not change them.
check-clean: venv
	$(BIN)/nbdev_clean
	@if [ -n "$$(git status --porcelain -- nbs)" ]; then \
	  git status --short -- nbs; echo "FAIL: notebooks are not clean — run nbdev_clean and commit"; exit 1; fi
	@echo "ok: notebooks are clean"

nbtest: export
	@echo "nbdev_test, smoke profile (timings: slowest notebook first)"
	OMP_NUM_THREADS=$(NB_THREADS) RELBOOK_PROFILE=smoke RELBOOK_PROGRESS=0 $(BIN)/nbdev_test --n_workers $(NB_WORKERS) --timing

# Every notebook at smoke on the GPU (a chapter that mixes devices fails here first); pass a CUDA torch via TORCH_SPEC.
nbtest-cuda: export
	OMP_NUM_THREADS=$(NB_THREADS) RELBOOK_DEVICE=cuda RELBOOK_PROFILE=smoke RELBOOK_PROGRESS=0 $(BIN)/nbdev_test --n_workers 1 --timing
	RELBOOK_PROFILE=smoke $(BIN)/python -m pytest tests/test_cuda.py -q

pytest: export
	RELBOOK_PROFILE=smoke $(BIN)/python -m pytest tests/ -q

test: check-export check-clean nbtest pytest
	@echo "make test: all checks passed"

book: export
	$(BIN)/jupyter-book build . --builder html -W --keep-going
	@echo "book: $$(pwd)/_build/html/index.html"

# Every page of the built book in headless Chromium (apt-get install chromium; skipped without it):
# tracebacks, untypeset math, broken images, cut-off equations; screenshots in _build/screenshots/.
.PHONY: browser-test
browser-test: book
	RELBOOK_BOOK_HTML=_build/html $(BIN)/python -m pytest tests/test_browser.py -q

# Re-run notebooks in place at a profile (quick on CPU, full on a GPU) and store their outputs: NBS names them (default: every
# one). STORED=1 trains nothing and renders each from its stored rows, after `relbook coverage` has found every sweep of the
# chapter whole at that profile (it stops, naming the sweeps that are not, where a page would see part of a grid or none).
NBS ?= nbs/[0-9]*.ipynb
STORED ?= 0
notebooks: export
	for nb in $(NBS); do \
	  if [ "$(STORED)" = 1 ]; then $(BIN)/relbook coverage --profile $(PROFILE) $$nb || exit 1; fi; \
	  RELBOOK_PROFILE=$(PROFILE) RELBOOK_STORED_ONLY=$(STORED) RELBOOK_PROGRESS=0 $(BIN)/jupyter nbconvert --to notebook --execute \
	    --inplace --ExecutePreprocessor.timeout=-1 $$nb || exit 1; done
	$(BIN)/nbdev_clean

# Run every registered experiment at a profile without Jupyter (what a GPU machine runs).
experiments: export
	$(BIN)/relbook run all --profile $(PROFILE)

clean:
	rm -rf _build
