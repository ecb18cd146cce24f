# The commands of the README and of docs/. Everything installs into .venv from PyPI; a fresh clone needs only Python 3.11.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# Bytecode is written whatever the environment says (PYTHONDONTWRITEBYTECODE is set on some machines):
# without it every process the suite starts from a new interpreter compiles the package from source.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test lint types schema client-models bench bench-recovery bench-waiting bench-client bench-step kill-trials mutants clean haproxy cluster evidence chromium screenshots pg-auto-failover

# --no-compile: pip would compile every module of every dependency (some 10 s of CPU, a third of the
# install); what is imported is compiled once on its first import, which writes its bytecode.
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[dev]'
	@touch $(STAMP)

# The example tool package (examples/ticketiq-tasks, docs/tools.md), which the suite installs and tests: a
# process finds its tools by the entry point in the venv's metadata. Installed once (editable, so an edit of
# its code needs no reinstall), and again only when its pyproject.toml changes or .venv was made anew.
EXAMPLES := $(VENV)/.installed-examples
$(EXAMPLES): $(STAMP) examples/ticketiq-tasks/pyproject.toml
	$(BIN)/python -m pip install --quiet --no-compile -e examples/ticketiq-tasks
	@touch $(EXAMPLES)

demo: $(STAMP)
	$(BIN)/ticketiq demo

# HAProxy, the edge of `make cluster` and of its test (Debian/Ubuntu; sudo when not root).
haproxy:
	@command -v haproxy >/dev/null || test -x /usr/sbin/haproxy || \
	  { if [ "$$(id -u)" -eq 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	    else echo "haproxy is missing and this is not root (no sudo): install it as root" >&2; exit 1; fi; \
	    $$SUDO apt-get update && $$SUDO apt-get install -y haproxy; }

# pg_auto_failover (a monitor and pg_autoctl for PostgreSQL 15), the formation of `ticketiq db ha` and of its
# test (Debian/Ubuntu; sudo when not root).
pg-auto-failover:
	@{ command -v pg_autoctl >/dev/null || test -x /usr/bin/pg_autoctl; } && test -e /usr/lib/postgresql/15/lib/pgautofailover.so || \
	  { if [ "$$(id -u)" -eq 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	    else echo "pg_auto_failover is missing and this is not root (no sudo): install it as root" >&2; exit 1; fi; \
	    $$SUDO apt-get update && $$SUDO apt-get install -y postgresql-15-auto-failover pg-auto-failover-cli; }

# Chromium's headless shell, the browser of the console's tests (tests/browser/) and screenshots, driven by
# Playwright through its executable_path (Debian/Ubuntu; sudo when not root). The shell is the same Blink
# without the desktop browser around it: the 20 browser tests took a third of the CPU the full chromium took
# (11 s against 32 s on 2 cores), and Playwright's own headless mode is this shell.
chromium:
	@command -v chromium-headless-shell >/dev/null || test -x /usr/bin/chromium-headless-shell || \
	  { if [ "$$(id -u)" -eq 0 ]; then SUDO=; elif command -v sudo >/dev/null; then SUDO=sudo; \
	    else echo "chromium-headless-shell is missing and this is not root (no sudo): install it as root" >&2; exit 1; fi; \
	    $$SUDO apt-get update && $$SUDO apt-get install -y chromium-headless-shell; }

cluster: $(STAMP) haproxy
	$(BIN)/ticketiq cluster --processes 2 --port 8080

# ruff, and the direction of imports: the layers contract in pyproject.toml ([tool.importlinter]).
lint: $(STAMP)
	$(BIN)/ruff check src tests bench examples
	$(BIN)/ruff format --check src tests bench examples
	$(BIN)/lint-imports --no-cache --no-logo

types: $(EXAMPLES)
	$(BIN)/mypy

# The declared schema, src/ticketiq/storage/schema.sql, written again from the migrations (on an embedded
# Postgres in a temporary home); tests/integration/test_schema.py fails while the two disagree.
schema: $(STAMP)
	$(BIN)/python -m ticketiq.dbserver.declared_schema --write

# The typed results of the Python client, src/ticketiq/client/models.py, written again from the app's OpenAPI
# document (cli/client_models.py); tests/unit/test_client_models.py fails while the two disagree.
client-models: $(STAMP)
	$(BIN)/python -m ticketiq.cli.client_models --write

# The whole suite on TEST_WORKERS pytest-xdist workers, each with its own embedded Postgres; the slowest
# tests go out first and an idle worker takes tests over from a busy one (worksteal). Six keep 2 cores
# busy: the tests wait on processes, timers and each other's servers, and with four a core stood idle a
# quarter of the time. The type check runs beside them (mypy holds one core for some 20 s, most of it while
# the workers start), and `make test` fails if either fails. Among the tests, a smoke run of the kill
# trials (3 rounds behind HAProxy), so every CI run exercises the harness; it fixes its kill times (a seed
# whose events land 0.2-4 s in, mostly while runs are in flight): with 3 rounds a random draw of late
# kills can leave fewer than half the trials caught, which says nothing about the engine. The random draws
# are `make kill-trials` (the full 200) and `make evidence`.
# Before the workers start, one collection writes the bytecode of the package and of the test modules with
# their assertions rewritten (beside mypy, on the other core): six workers collecting from nothing each
# compiled and rewrote all of it, some 8 s of CPU a worker.
TEST_WORKERS ?= 6
test: lint $(EXAMPLES) haproxy chromium pg-auto-failover
	@echo "mypy beside the suite (its verdict follows the suite's); one collection first, to write bytecode"
	@$(BIN)/mypy > $(VENV)/types.log 2>&1 & types=$$!; \
	$(BIN)/python -m pytest --collect-only -q > /dev/null 2>&1; \
	LIYAGENT_KILL_TRIALS=3 LIYAGENT_KILL_SEED=407395787 LIYAGENT_KILL_RESULTS=$(VENV)/kill-smoke \
	  $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal; suite=$$?; \
	wait $$types; typed=$$?; cat $(VENV)/types.log; \
	test $$suite -eq 0 && test $$typed -eq 0

# The README's console screenshots (docs/console/*.png), taken by the browser the tests drive.
screenshots: $(STAMP) chromium
	$(BIN)/python -m tests.browser.screenshots docs/console

bench: $(STAMP)
	$(BIN)/python bench/step_overhead.py

bench-recovery: $(STAMP)
	$(BIN)/python bench/recovery.py

bench-waiting: $(STAMP)
	$(BIN)/python bench/waiting.py

# Runs as a user's client drives them (POST, then GET ?wait=30) beside d7c25d5 polled every 0.25 s, from a
# worktree and venv of its own kept in the temporary folder (bench/client.py, bench/baseline.py).
bench-client: $(STAMP)
	$(BIN)/python bench/client.py

# The agent step side by side with DBOS and LangGraph (bench/peers/step_bench.py). The peers live in a venv
# of their own under the temporary folder (made when missing, filled from bench/peers/requirements.txt),
# never in .venv: TicketIQ runs on .venv, each peer in a process on that venv.
PEERS_VENV ?= /tmp/peers-venv
PEERS_STAMP := $(PEERS_VENV)/.installed
$(PEERS_STAMP): bench/peers/requirements.txt
	@test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --no-compile -r bench/peers/requirements.txt
	@touch $(PEERS_STAMP)

bench-step: $(STAMP) $(PEERS_STAMP)
	$(BIN)/python bench/peers/step_bench.py --peers-python $(PEERS_VENV)/bin/python

evidence: $(STAMP) haproxy pg-auto-failover
	$(BIN)/python bench/evidence.py

kill-trials: $(STAMP) haproxy pg-auto-failover
	LIYAGENT_KILL_TRIALS=$${LIYAGENT_KILL_TRIALS:-200} $(BIN)/python -m pytest tests/unit/test_kill_trials.py -q

# Every fence of the SQL broken in turn (attempt conjunct dropped, `OR true`, row lock dropped, the job
# fence's `running` dropped) in a copy of src/, against the tests that guard it; exits 1 if a mutant
# survives. Not part of `make test`.
mutants: $(STAMP)
	$(BIN)/python -m tests.mutants

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
