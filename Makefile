# The README's commands. Everything installs into .venv from PyPI; a fresh clone needs only Python 3.11.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint types bench bench-recovery bench-waiting kill-trials clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ticketiq demo

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

types: $(STAMP)
	$(BIN)/mypy

test: lint types
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python bench/step_overhead.py

bench-recovery: $(STAMP)
	$(BIN)/python bench/recovery.py

bench-waiting: $(STAMP)
	$(BIN)/python bench/waiting.py

kill-trials: $(STAMP)
	TICKETIQ_KILL_TRIALS=$${TICKETIQ_KILL_TRIALS:-50} $(BIN)/python -m pytest tests/acceptance/test_kill_trials.py -q

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
