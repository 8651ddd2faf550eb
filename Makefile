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
# What a user gives make (on the command line or in the environment) is data, never make syntax: each
# is read with `$(value NAME)`, which does not expand it, and none is exported to the recipes (make
# expands an exported variable's value to build their environment, running a `$(shell ...)` in it).
# The tools get every value as an option (`$(call v,NAME)`), never from the environment.
USER_VARS := STACK WORKLOAD TIMEOUT KUBECONFIG SINCE ENDPOINT NIXLBENCH RUNNER FROM TO BASE PROMETHEUS JSON STRICT WRITE
USER_VARS += PULUMI_STACK FIRST PULUMI_EKS PULUMI_EKS_COMMIT REFERENCE RESOURCES SHAPE
STACK ?= dev
FROM ?= staging
TO ?= prod
SINCE ?= 7d
unexport $(USER_VARS)
# A make variable as one shell word: single-quoted, embedded quotes escaped. Tool arguments are passed
# as `--opt=$(call q,VALUE)`, so a value starting with `-` stays a value and nothing reaches the shell.
q = '$(subst ','\'',$(1))'
# The user's variable NAME, unexpanded, as one quoted word.
v = $(call q,$(value $(1)))
# Installs go through uv (pinned here; bootstrapped into the venv with pip): on a fresh clone it
# installs the preview set several times faster than pip (docs/timings.md).
# INSTALLER=pip uses plain pip instead, e.g. where no uv wheel exists for the platform.
INSTALLER ?= uv
UV_VERSION := 0.13.9
# The installers print their progress (uv: what it resolved, downloaded and installed; pip: each package),
# so a first install that takes minutes on a slow network is never silent (on stderr: a tool's stdout stays its own).
ifeq ($(INSTALLER),pip)
INSTALL := $(PY) -m pip install --progress-bar on
BOOTSTRAP := true
else
# --compile-bytecode: the .pyc files written once at install. Where PYTHONDONTWRITEBYTECODE is set (as on
# this project's machines) Python never writes them itself, so every process would compile every module
# it imports (Pulumi's AWS SDK alone: a second), every tool run and every test's subprocess again.
INSTALL := $(VENV)/bin/uv pip install --compile-bytecode --python $(PY)
BOOTSTRAP := test -x $(VENV)/bin/uv || { echo "bootstrapping uv $(UV_VERSION) into $(VENV) with pip" >&2; $(PY) -m pip install -q uv==$(UV_VERSION); }
endif

.PHONY: help venv venv-dev test test-fast test-binaries lock preview preview-diff preflight lint promote-check placeholders resolve-image calibrate

help:
	@echo "make preview [STACK=dev] [FIRST=1]   offline preview of a stack: plan, policy verdicts, figures (FIRST=1: as a first preview)"
	@echo "make preview-diff BASE=<git rev> [STACK=dev]   the preview of BASE vs this working tree, as a diff"
	@echo "make test                  the test suite (offline; installs promtool/Prometheus/Alertmanager if missing)"
	@echo "make test-fast             the inner loop: the unit tier (functions, components with Pulumi's mocks, the sizing model)"
	@echo "make venv | venv-dev       just the runtime set | plus the test/tooling set (INSTALLER=pip: no uv)"
	@echo "make preflight [STACK=dev] can the stack deploy in its AWS account/region? (JSON=1, STRICT=1)"
	@echo "make cutover-replicas STACK=prod [WRITE=1]   start the next Ray cluster at the live replica counts (what fits)"
	@echo "make destroy-check STACK=prod [PULUMI_STACK=org/prod]   before destroy: what outside the state holds the VPC"
	@echo "make up-guard STACK=prod [PULUMI_STACK=org/prod] [KUBECONFIG=path]   may \`up\` run? (no pending delete of a serving node group)"
	@echo "make lint                  ruff (lint and format), mypy, actionlint (with shellcheck) on the workflows"
	@echo "make lock                  recompile requirements*.txt from pyproject.toml (hash-pinned)"
	@echo "make promote-check FROM=staging TO=prod   may the commit move on? (chart/image/model/engine must match)"
	@echo "make config-doc            regenerate docs/configuration.md's table from llm_pd_eks/config/"
	@echo "make placeholders [STACK=dev] [RUNNER=label]   does the stack still carry example values? (deploy refuses it)"
	@echo "make resolve-image [STACK=dev]   pin serving.image in Pulumi.<stack>.yaml to its ECR Public digest (network)"
	@echo "make verify STACK=dev [KUBECONFIG=path] [TIMEOUT=600] [JSON=1] [REFERENCE=url]   after pulumi up: EFA, NIXL on LIBFABRIC, P/D, KV bytes, the traffic gate"
	@echo "make cost-audit STACK=dev [SINCE=7d] [PROMETHEUS=url] [JSON=1]   spend, \$$/Mtok vs make size, idle GPUs, quota, advice"
	@echo "make size [STACK=dev] [WORKLOAD=workloads/<stack>.yaml] [WRITE=1] [JSON=1]   replicas, nodes, P:D, \$$/Mtok for a workload"
	@echo "make facts                 regenerate the GPU instance-type table (llm_pd_eks/data, policies/data) from EC2 data, the pack's KubeRay resource-name rules, the vLLM facts (downloads the wheel)"
	@echo "make eks-children PULUMI_EKS=<git dir of pulumi/pulumi-eks> [PULUMI_EKS_COMMIT=rev]   record what pulumi-eks's own code registers inside eks:index:Cluster (node, npm)"
	@echo "make calibrate STACK=dev [ENDPOINT=http://host:port] [NIXLBENCH=file] [TIMEOUT=1800]   after up: measure, fit, write calibration/<stack>.yaml"
	@echo "make realrun-dry           the GPU real run's cluster steps on this CPU with a stand-in app (docs/real-run.md)"
	@echo "make realrun-router        Ray Serve's routers on this CPU: where the prefix arms' requests land, saved as data"
	@echo "make bench-policies [RESOURCES=10000] [SHAPE=mixed]   time the policy pack on a large stack (a benchmark, not a test)"
	@echo "make realrun-two-dry       the two-GPU run's raylets and placements on this CPU with stand-in engines"

$(STAMP): requirements-preview.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing the preview set (requirements-preview.txt) into $(VENV) with $(INSTALLER)" >&2
	@$(BOOTSTRAP)
	@$(INSTALL) -r requirements-preview.txt >&2
	@$(INSTALL) --no-deps -e . >&2
	@rm -f $(VENV)/.installed-* && touch $@

$(DEV_STAMP): $(STAMP) requirements-dev.txt
	@echo "installing the test and tooling set (requirements-dev.txt) into $(VENV) with $(INSTALLER)" >&2
	@$(BOOTSTRAP)
	@$(INSTALL) -r requirements-dev.txt >&2
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
	@$(PY) -m compileall -q -j 0 llm_pd_eks llm_pd_eks_tools llm_pd_eks_sizing policies tests __main__.py >/dev/null
	$(PY) -m pytest -n auto --dist loadfile --no-loadscope-reorder

# The inner loop: tests/unit/ alone, in one process (functions, components with Pulumi's public mocks,
# the sizing model, the import rules). tests/stack/ (the three stacks' recorded runs, Ray's own schemas)
# and tests/integration/ (tools as processes, the pack over its protocol, servers) are `make test`'s.
test-fast: $(DEV_STAMP)
	$(PY) -m pytest tests/unit

# Recompiles the three locks from pyproject.toml (needs the package index; commit the result).
LOCK := $(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 --generate-hashes --no-header --quiet
lock: $(STAMP)
	@$(BOOTSTRAP)
	@$(LOCK) -o requirements.txt
	@$(LOCK) --extra preview -o requirements-preview.txt
	@$(LOCK) --all-extras --group test --group lint -o requirements-dev.txt

# FIRST=1: as the first `pulumi preview` of a new stack (every id and computed output unknown).
preview: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.plan.preview --stack=$(call v,STACK) $(if $(value FIRST),--first-preview)

# Previews BASE (in a temporary git worktree) and the working tree; writes build/preview-diff/<stack>/diff.md.
preview-diff: $(STAMP)
	@test -n $(call v,BASE) || { echo "usage: make preview-diff BASE=<git rev> [STACK=dev]" >&2; exit 2; }
	@$(PY) -m llm_pd_eks_tools.plan.preview.diff --base=$(call v,BASE) --stack=$(call v,STACK)

# Before every `pulumi up`: refuses (exit 1) while the state would first delete a node group the serving
# Ray cluster still runs on (a cut-over that failed half-way, docs/day-two.md). Exports the state with the
# Pulumi CLI (PULUMI_STACK: the backend's stack name, default STACK); reads the cluster only when a node
# group is pending delete (the stack's kubeconfig output, or KUBECONFIG).
.PHONY: up-guard
BACKEND_STACK = $(or $(value PULUMI_STACK),$(value STACK))
up-guard: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.gates.pending_deletes check --stack=$(call q,$(BACKEND_STACK)) $(if $(value KUBECONFIG),--kubeconfig=$(call v,KUBECONFIG))

# Before `pulumi up`: the next Ray cluster (a NewCluster cut-over) starts at the serving cluster's replica
# counts, as many as fit gpuNodes.maxSize (WRITE=1 sets serving.<role>.cutoverReplicas in Pulumi.<stack>.yaml).
.PHONY: cutover-replicas
cutover-replicas: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.plan.cutover_replicas --stack=$(call v,STACK) --pulumi-stack=$(call q,$(BACKEND_STACK)) $(if $(value KUBECONFIG),--kubeconfig=$(call v,KUBECONFIG)) $(if $(value WRITE),--write)

# Before `pulumi destroy`: what the state does not own in the stack's VPC and would stop its deletion
# (leaked VPC CNI interfaces, a load balancer of a Kubernetes Service, GuardDuty's endpoint), with what to do.
.PHONY: destroy-check
destroy-check: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.ops.destroy_check --stack=$(call q,$(BACKEND_STACK))

# Needs AWS credentials (standard chain) and network; AWS_ENDPOINT_URL points it at an emulator.
preflight: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.ops.preflight --stack=$(call v,STACK) $(if $(value JSON),--json) $(if $(value STRICT),--strict)

# Static checks: ruff and mypy (configured in pyproject.toml), actionlint on .github/workflows
# (its shellcheck pass uses the pinned shellcheck in the venv, so every machine checks the same).
lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/actionlint -shellcheck=$(VENV)/bin/shellcheck

# Names every config key that differs between two stacks; fails on one that must be promoted.
promote-check: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.gates.promote_check --from=$(call v,FROM) --to=$(call v,TO)

# Tool recipes are silent (`@`): stdout carries only the tool's output (`make preflight JSON=1` is
# pure JSON). GNU make itself exits 2 whenever a recipe fails ("The exit status of make is always
# one of three values", GNU make manual, "Running"); the tool's own code is in make's last line on
# stderr, `make: *** [Makefile:NN: preflight] Error 5` (docs/exit-codes.md).

# The config table in docs/configuration.md, generated from the config model (a test fails when it is stale).
.PHONY: config-doc
config-doc: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.maint.config_doc

# Documentation CIDRs, the example account 123456789012, a private endpoint with no runner: exit 1.
placeholders: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.gates.placeholders --stack=$(call v,STACK) $(if $(value RUNNER),--runner=$(call v,RUNNER))

# The serving image's tag -> its digest on ECR Public (anonymous), written into Pulumi.<stack>.yaml as
# repo:tag@sha256:...; offline it says so in one line and exits 5 (llm_pd_eks_tools/ops/resolve_image.py).
resolve-image: $(STAMP)
	@$(PY) -m llm_pd_eks_tools.ops.resolve_image --stack=$(call v,STACK)

# After `pulumi up`: proves the deployed stack (nodes, EFA devices, P/D placement, one completion,
# NIXL on LIBFABRIC, KV bytes/failures/throughput). Kubeconfig from KUBECONFIG or the stack output,
# read by the `kubernetes` package of the tools set (requirements-dev.txt), as calibrate reads it.
.PHONY: verify
# TIMEOUT is each tool's own budget: verify's 600 s unless given, calibrate's 1800 s (a sweep takes longer).
VERIFY_TIMEOUT = $(or $(value TIMEOUT),600)
verify: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.ops.verify --stack=$(call v,STACK) --timeout=$(call q,$(VERIFY_TIMEOUT)) $(if $(value KUBECONFIG),--kubeconfig=$(call v,KUBECONFIG)) $(if $(value JSON),--json) $(if $(value REFERENCE),--reference=$(call v,REFERENCE))

# Sizes the stack for a workload, offline (llm_pd_eks_sizing/model/); WRITE=1 (for workloads/<stack>.yaml only) puts the recommended serving.mode, the sized replica bounds and
# GPU node-group sizes into Pulumi.<stack>.yaml (comments kept).
.PHONY: size
size: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_sizing.size --stack=$(call v,STACK) --workload=$(call q,$(or $(value WORKLOAD),workloads/$(value STACK).yaml)) $(if $(value WRITE),--write) $(if $(value JSON),--json)

# The EFA GPU instance-type table, from EC2 DescribeInstanceTypes data (moto's capture): writes the
# program's copy (llm_pd_eks/data/) and the policy pack's own (policies/data/). Then the pack's copy of
# KubeRay's resource-name rules (policies/data/kuberay_resource_flags.json) from llm_pd_eks/ray_resources.py,
# and the pack's inert resource types (policies/data/inert_types.txt) from the installed provider SDKs.
# Last, the vLLM facts the tests judge by (tests/data/vllm/) from the DLC's vLLM wheel
# (llm_pd_eks/versions.py; downloaded from PyPI, read with ast, never imported).
.PHONY: facts
facts: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.maint.gen_instance_types
	@$(PY) -m llm_pd_eks_tools.maint.gen_ray_resources
	@$(PY) -m llm_pd_eks_tools.maint.gen_resource_types
	@$(PY) -m llm_pd_eks_tools.maint.gen_vllm_facts
# What pulumi-eks's plugin registers inside each stack's eks:index:Cluster, recorded by running its
# own TypeScript (nodejs/eks at PULUMI_EKS_COMMIT, built under build/eks-children with node and npm)
# under the Node SDK's mocks: llm_pd_eks_tools/plan/preview/eks_children.json (the offline preview puts
# the children back) and policies/data/eks_component_types.txt. Rerun when pulumi-eks or the
# program's arguments to it change; a test says when they did.
.PHONY: eks-children
eks-children: $(DEV_STAMP)
	@test -n $(call v,PULUMI_EKS) || { echo "usage: make eks-children PULUMI_EKS=<git dir of github.com/pulumi/pulumi-eks> [PULUMI_EKS_COMMIT=<rev>]" >&2; exit 2; }
	@$(PY) -m llm_pd_eks_tools.maint.gen_eks_children --pulumi-eks=$(call v,PULUMI_EKS) --commit=$(call q,$(or $(value PULUMI_EKS_COMMIT),HEAD))
# After `pulumi up`: vllm bench serve sweep (a Job on the system nodes, or ENDPOINT directly) and
# nixlbench's LIBFABRIC output (NIXLBENCH) -> calibration/<stack>.yaml, used by `make size` and the preview.
CALIBRATE_TIMEOUT = $(or $(value TIMEOUT),1800)
calibrate: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_sizing.calibrate --stack=$(call v,STACK) $(if $(value ENDPOINT),--endpoint=$(call v,ENDPOINT)) $(if $(value NIXLBENCH),--nixlbench-output=$(call v,NIXLBENCH)) --timeout=$(call q,$(CALIBRATE_TIMEOUT)) $(if $(value KUBECONFIG),--kubeconfig=$(call v,KUBECONFIG))
# Before GPU time goes on the real run (docs/real-run.md): its cluster steps (raylets, deploys, Serve
# shutdowns, scrapes) on this machine's CPU with the tools' Ray and a stand-in application, timed.
.PHONY: realrun-dry
realrun-dry: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_sizing.realrun.dry_run
# The policy pack on a stack of RESOURCES resources through the analyzer protocol (docs/policies.md "Speed").
.PHONY: bench-policies
bench-policies: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_tools.maint.bench_policies --resources=$(call q,$(or $(value RESOURCES),10000)) --shape=$(call q,$(or $(value SHAPE),mixed))
# Ray Serve's own routers (default, PrefixCacheAffinityRouter as the prefix arm renders it) on this CPU,
# stand-in replicas with a prefix cache: where the prefix arms' requests land -> realrun/data/router/.
.PHONY: realrun-two-dry
realrun-two-dry: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_sizing.realrun.two_gpu_dry

.PHONY: realrun-router
realrun-router: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_sizing.realrun.router_run
# What the stack cost and served over SINCE (Cost Explorer by tag, the cluster's Prometheus at
# PROMETHEUS, the GPU quota, make size's prediction): build/cost-audit/<stack>/report.{md,json}, spend.png.
.PHONY: cost-audit
cost-audit: $(DEV_STAMP)
	@$(PY) -m llm_pd_eks_sizing.cost_audit --stack=$(call v,STACK) --since=$(call v,SINCE) $(if $(value PROMETHEUS),--prometheus=$(call v,PROMETHEUS)) $(if $(value JSON),--json)
