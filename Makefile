# Two commands on a fresh machine: `make preview` and `make test`. Each builds the virtualenv
# on first use (and again when requirements.txt changes).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum requirements.txt | cut -d' ' -f1)
STACK ?= dev

.PHONY: help venv test preview

help:
	@echo "make preview [STACK=dev]   offline preview of a stack: plan, policy verdicts, figures"
	@echo "make test                  the test suite (offline)"

$(STAMP): requirements.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing requirements into $(VENV) (first run takes a few minutes)"
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -r requirements.txt
	@rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP)

test: $(STAMP)
	$(PY) -m pytest

preview: $(STAMP)
	$(PY) -m tools.preview --stack $(STACK)
