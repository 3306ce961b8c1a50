# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test bench load install clean

$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python app.py --server.port 8501 --server.headless true

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

bench: $(STAMP)
	$(BIN)/python -m tests.bench

# Classroom load: one local server, 40 concurrent sessions (LOAD_ARGS="--sessions 60 --stagger 20")
load: $(STAMP)
	$(BIN)/python -m tests.load $(LOAD_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache
