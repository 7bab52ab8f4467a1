# The README's two commands: `make demo` and `make test`. Both set up .venv first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo lint setup clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip >/dev/null
	# torch first, pinned: an unpinned torch pulls several GB of CUDA wheels.
	$(BIN)/python -m pip install "torch==2.13.0"
	$(BIN)/python -m pip install -e ".[test]"
	# the explorer page's browser test (tests/serve) drives Debian's headless Chromium, and the
	# features guide's R blocks run in R (r-base-core, r-cran-reticulate); where apt-get cannot
	# install them (no root), those tests skip and say why (in CI they fail instead)
	(command -v chromium && command -v chromedriver && command -v Rscript && \
		Rscript -e 'library(reticulate)') >/dev/null 2>&1 || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
		--no-install-recommends chromium chromium-driver r-base-core r-cran-reticulate) \
		|| echo "note: headless Chromium or R could not be installed; their tests will skip"
	touch $(STAMP)

setup: $(STAMP)

# ruff, then the import contracts (pyproject's tool.importlinter): the library never imports
# the applications built on it, and no two modules import each other
lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks studies gpu_check
	$(BIN)/lint-imports

# Two workers (pytest-xdist), a test file each at a time: the training tests run on one thread,
# so one process leaves a core idle; a file's module fixtures are built once.
test: lint
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(BIN)/python -m pytest -q -n 2 --dist loadfile tests

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(BIN)/bertkit demo $(if $(CORPUS),--corpus $(CORPUS))

clean:
	rm -rf $(VENV) build *.egg-info
