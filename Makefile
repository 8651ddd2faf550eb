# Two commands on a fresh machine: `make preview` and `make test`. Each builds the virtualenv on
# first use (and again when its lock changes). The locks are compiled from pyproject.toml (`make lock`),
# every version and hash pinned: `make preview` installs requirements-preview.txt (the runtime set
# `pulumi up` installs, requirements.txt, plus the policy pack's host), `make test`/`lint`/`preflight`/
# `verify` requirements-dev.txt (plus the tools' AWS and Kubernetes clients, Ray, moto, pytest, ruff,
# mypy, ...). The project itself is installed editable (`llm-pd-eks` console script, importable packages).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-preview-$(shell cat requirements-preview.txt | cksum | cut -d' ' -f1)
# `STAMP=` on the command line skips the virtualenv step for both sets (tests run make that way).
DEV_STAMP := $(if $(STAMP),$(VENV)/.installed-dev-$(shell cat requirements-preview.txt requirements-dev.txt | cksum | cut -d' ' -f1))
STACK ?= dev
# A make variable as one shell word: single-quoted, embedded quotes escaped. Tool arguments are passed
# as `--opt=$(call q,VALUE)`, so a value starting with `-` stays a value and nothing reaches the shell.
q = '$(subst ','\'',$(1))'
# Installs go through uv (pinned here; bootstrapped into the venv with pip): on a fresh clone it
# installs the preview set several times faster than pip (docs/timings.md).
# INSTALLER=pip uses plain pip instead, e.g. where no uv wheel exists for the platform.
INSTALLER ?= uv
UV_VERSION := 0.13.9
ifeq ($(INSTALLER),pip)
INSTALL := $(PY) -m pip install -q
BOOTSTRAP := true
else
# --compile-bytecode: the .pyc files written once at install. Where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines) Python never writes them itself, so every process would compile every module
# it imports (Pulumi's AWS SDK alone: a second), every tool run and every test's subprocess again.
INSTALL := $(VENV)/bin/uv pip install -q --compile-bytecode --python $(PY)
BOOTSTRAP := test -x $(VENV)/bin/uv || $(PY) -m pip install -q uv==$(UV_VERSION)
endif

.PHONY: help venv venv-dev test test-unit test-binaries lock preview preview-diff preflight lint promote-check placeholders resolve-image calibrate

help:
	@echo "make preview [STACK=dev]   offline preview of a stack: plan, policy verdicts, figures"
	@echo "make preview-diff BASE=<git rev> [STACK=dev]   the preview of BASE vs this working tree, as a diff"
	@echo "make test                  the test suite (offline; installs promtool/Prometheus/Alertmanager if missing)"
	@echo "make test-unit             the fast tier only: components with Pulumi's public mocks"
	@echo "make venv | venv-dev       just the runtime set | plus the test/tooling set (INSTALLER=pip: no uv)"
	@echo "make preflight [STACK=dev] can the stack deploy in its AWS account/region? (JSON=1, STRICT=1)"
	@echo "make lint                  ruff (lint and format), mypy, actionlint (with shellcheck) on the workflows"
	@echo "make lock                  recompile requirements*.txt from pyproject.toml (hash-pinned)"
	@echo "make promote-check FROM=staging TO=prod   may the commit move on? (chart/image/model/engine must match)"
	@echo "make config-doc            regenerate docs/configuration.md's table from llm_pd_eks/config/"
	@echo "make placeholders [STACK=dev] [RUNNER=label]   does the stack still carry example values? (deploy refuses it)"
	@echo "make resolve-image [STACK=dev]   pin serving.image in Pulumi.<stack>.yaml to its ECR Public digest (network)"
	@echo "make verify STACK=dev [KUBECONFIG=path] [TIMEOUT=600] [JSON=1]   after pulumi up: EFA, NIXL on LIBFABRIC, P/D, KV bytes"
	@echo "make cost-audit STACK=dev [SINCE=7d] [PROMETHEUS=url] [JSON=1]   spend, \$$/Mtok vs make size, idle GPUs, quota, advice"
	@echo "make size [STACK=dev] [WORKLOAD=workloads/<stack>.yaml] [WRITE=1] [JSON=1]   replicas, nodes, P:D, \$$/Mtok for a workload"
	@echo "make facts                 regenerate the GPU instance-type table (llm_pd_eks/data, policies/data) from EC2 data, the pack's KubeRay resource-name rules, the vLLM facts (downloads the wheel)"
	@echo "make calibrate STACK=dev [ENDPOINT=http://host:port] [NIXLBENCH=file] [TIMEOUT=1800]   after up: measure, fit, write calibration/<stack>.yaml"
	@echo "make realrun-dry           the GPU real run's cluster steps on this CPU with a stand-in app (docs/real-run.md)"
	@echo "make realrun-router        Ray Serve's routers on this CPU: where the prefix arms' requests land, saved as data"
	@echo "make realrun-two-dry       the two-GPU run's raylets and placements on this CPU with stand-in engines"

$(STAMP): requirements-preview.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the preview set (requirements-preview.txt) into $(VENV) with $(INSTALLER)" >&2
	@$(BOOTSTRAP)
	@$(INSTALL) -r requirements-preview.txt
	@$(INSTALL) --no-deps -e .
	@rm -f $(VENV)/.installed-* && touch $@

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	@echo "installing the test and tooling set (requirements-dev.txt) into $(VENV) with $(INSTALLER)" >&2
	@$(BOOTSTRAP)
	@$(INSTALL) -r requirements-dev.txt
	@rm -f $(VENV)/.installed-dev-* && touch $@

venv: $(STAMP)

venv-dev: $(DEV_STAMP)

# The binaries the tests run for real (promtool, Prometheus, Alertmanager): installed from Debian's
# packages where this machine can, else one line says what to install and `make test` fails.
test-binaries:
	@bash scripts/test-binaries.sh

# Every test, on pytest-xdist workers (`-n auto`: two more than the cores, tests/conftest.py says
# why); `--dist loadfile` gives each module to one worker, so a module's fixtures (one Ray cluster,
# one provider process) start once, longest modules first (`--no-loadscope-reorder` keeps
# conftest's order). The three stacks' recorded runs are shared between the workers.
# The project's own modules are compiled first, for the reason given at INSTALL.
test: $(DEV_STAMP) test-binaries
	@$(PY) -m compileall -q -j 0 llm_pd_eks llm_pd_eks_tools policies tests __main__.py >/dev/null
	$(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder

# The fast tier alone: components and policies in-process with Pulumi's public mocks (seconds).
test-unit: $(DEV_STAMP)
	$(PY) -m pytest tests/unit

# Recompiles the three locks from pyproject.toml (needs the package index; commit the result).
LOCK := $(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --no-header --quiet
lock: $(STAMP)
	@$(BOOTSTRAP)
	@$(LOCK) -o requirements.txt
	@$(LOCK) --extra preview -o requirements-preview.txt
	@$(LOCK) --all-extras --group test --group lint -o requirements-dev.txt

preview: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.preview --stack=$(call q,$(STACK))

# Previews BASE (in a temporary git worktree) and the working tree; writes build/preview-diff/<stack>/diff.md.
preview-diff: $(STAMP)
	@test -n $(call q,$(BASE)) || { echo "usage: make preview-diff BASE=<git rev> [STACK=dev]" >&2; exit 2; }
	@$(PY) -m llm_pd_eks_tools.preview.diff --base=$(call q,$(BASE)) --stack=$(call q,$(STACK))

# Needs AWS credentials (standard chain) and network; AWS_ENDPOINT_URL points it at an emulator.
preflight: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.preflight --stack=$(call q,$(STACK)) $(if $(JSON),--json) $(if $(STRICT),--strict)

# Static checks: ruff and mypy (configured in pyproject.toml), actionlint on .github/workflows
# (its shellcheck pass uses the pinned shellcheck in the venv, so every machine checks the same).
lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/actionlint -shellcheck=$(VENV)/bin/shellcheck

# Names every config key that differs between two stacks; fails on one that must be promoted.
FROM ?= staging
TO ?= prod
promote-check: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.promote_check --from=$(call q,$(FROM)) --to=$(call q,$(TO))

# Tool recipes are silent (`@`): stdout carries only the tool's output (`make preflight JSON=1` is
# pure JSON). GNU make itself exits 2 whenever a recipe fails ("The exit status of make is always
# one of three values", GNU make manual, "Running"); the tool's own code is in make's last line on
# stderr, `make: *** [Makefile:NN: preflight] Error 5` (docs/exit-codes.md).

# The config table in docs/configuration.md, generated from the config model (a test fails when it is stale).
.PHONY: config-doc
config-doc: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.config_doc

# Documentation CIDRs, the example account 123456789012, a private endpoint with no runner: exit 1.
placeholders: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.placeholders --stack=$(call q,$(STACK)) $(if $(RUNNER),--runner=$(call q,$(RUNNER)))

# The serving image's tag -> its digest on ECR Public (anonymous), written into Pulumi.<stack>.yaml as
# repo:tag@sha256:...; offline it says so in one line and exits 5 (llm_pd_eks_tools/resolve_image.py).
resolve-image: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.resolve_image --stack=$(call q,$(STACK))

# After `pulumi up`: proves the deployed stack (nodes, EFA devices, P/D placement, one completion,
# NIXL on LIBFABRIC, KV bytes/failures/throughput). Kubeconfig from KUBECONFIG or the stack output,
# read by the `kubernetes` package of the tools set (requirements-dev.txt), as calibrate reads it.
.PHONY: verify
# TIMEOUT is each tool's own budget: verify's 600 s unless given, calibrate's 1800 s (a sweep takes longer).
VERIFY_TIMEOUT = $(or $(TIMEOUT),600)
verify: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.verify --stack=$(call q,$(STACK)) --timeout=$(call q,$(VERIFY_TIMEOUT)) $(if $(KUBECONFIG),--kubeconfig=$(call q,$(KUBECONFIG))) $(if $(JSON),--json)

# Sizes the stack for a workload, offline (llm_pd_eks_tools/sizing/); WRITE=1 puts the sized replica bounds and
# GPU node-group sizes into Pulumi.<stack>.yaml (comments kept).
.PHONY: size
WORKLOAD ?= workloads/$(STACK).yaml
size: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.size --stack=$(call q,$(STACK)) --workload=$(call q,$(WORKLOAD)) $(if $(WRITE),--write) $(if $(JSON),--json)

# The EFA GPU instance-type table, from EC2 DescribeInstanceTypes data (moto's capture): writes the
# program's copy (llm_pd_eks/data/) and the policy pack's own (policies/data/). Then the pack's copy of
# KubeRay's resource-name rules (policies/data/kuberay_resource_flags.json) from llm_pd_eks/ray_resources.py,
# and the pack's inert resource types (policies/data/inert_types.txt) from the installed provider SDKs.
# Last, the vLLM facts the tests judge by (tests/data/vllm/) from the DLC's vLLM wheel
# (llm_pd_eks/versions.py; downloaded from PyPI, read with ast, never imported).
.PHONY: facts
facts: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.gen_instance_types
	@$(PY) -m llm_pd_eks_tools.gen_ray_resources
	@$(PY) -m llm_pd_eks_tools.gen_resource_types
	@$(PY) -m llm_pd_eks_tools.gen_vllm_facts
# After `pulumi up`: vllm bench serve sweep (a Job on the system nodes, or ENDPOINT directly) and
# nixlbench's LIBFABRIC output (NIXLBENCH) -> calibration/<stack>.yaml, used by `make size` and the preview.
CALIBRATE_TIMEOUT = $(or $(TIMEOUT),1800)
calibrate: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.calibrate --stack=$(call q,$(STACK)) $(if $(ENDPOINT),--endpoint=$(call q,$(ENDPOINT))) $(if $(NIXLBENCH),--nixlbench-output=$(call q,$(NIXLBENCH))) --timeout=$(call q,$(CALIBRATE_TIMEOUT)) $(if $(KUBECONFIG),--kubeconfig=$(call q,$(KUBECONFIG)))
# Before GPU time goes on the real run (docs/real-run.md): its cluster steps (raylets, deploys, Serve
# shutdowns, scrapes) on this machine's CPU with the tools' Ray and a stand-in application, timed.
.PHONY: realrun-dry
realrun-dry: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.realrun.dry_run
# Ray Serve's own routers (default, PrefixCacheAffinityRouter as the prefix arm renders it) on this CPU,
# stand-in replicas with a prefix cache: where the prefix arms' requests land -> realrun/data/router/.
.PHONY: realrun-two-dry
realrun-two-dry: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.realrun.two_gpu_dry

.PHONY: realrun-router
realrun-router: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.realrun.router_run
# What the stack cost and served over SINCE (Cost Explorer by tag, the cluster's Prometheus at
# PROMETHEUS, the GPU quota, make size's prediction): build/cost-audit/<stack>/report.{md,json}, spend.png.
.PHONY: cost-audit
SINCE ?= 7d
cost-audit: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.cost_audit --stack=$(call q,$(STACK)) --since=$(call q,$(SINCE)) $(if $(PROMETHEUS),--prometheus=$(call q,$(PROMETHEUS))) $(if $(JSON),--json)
