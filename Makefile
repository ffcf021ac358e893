# cpuddp: `make demo` and `make test` bootstrap .venv from the pinned lock.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv demo bench bench-quant clean report compare plan

include mk/tests.mk
include mk/cluster.mk
include mk/intel.mk
include mk/docs.mk

venv: $(STAMP)

# torch first, pinned, so nothing can pull the CUDA build in its place.
$(STAMP): requirements.lock requirements.txt tests/reference/requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -r requirements.lock
	$(BIN)/pip download -q --no-deps --require-hashes -r tests/reference/requirements.txt -d $(VENV)/reference
	touch $(STAMP)

demo: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --profile profiles/local --configfile experiments/demo.yaml
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --profile profiles/local --configfile experiments/demo.yaml \
		--report results/demo/report.html
	@echo "Summary: results/demo/summary.json"
	@echo "Report:  results/demo/report.html"

# The HTML report of an experiment that has run: make report EXP=demo-sweep
EXP ?= demo
report: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --profile profiles/local --configfile experiments/$(EXP).yaml \
		--report results/$(EXP)/report.html
	@echo "Report: results/$(EXP)/report.html"

# Two experiments side by side and against their published figures:
# make compare A=blog-mrpc-nodes [B=other-experiment]
compare: venv
	@test -n "$(A)" || { echo "usage: make compare A=<experiment> [B=<experiment>]" >&2; exit 2; }
	$(BIN)/python -m workflow.scripts.report.compare $(A) $(B)

# The scaling plan of an experiment (README, Scaling): one node's step
# measured here once (results/<EXP>/plan/profile.json; delete it to measure
# again), then the prediction for 1-64 nodes, each lever and the experiment's
# plan.bandwidth_gbit networks (table, recommendation, chart):
#   make plan EXP=blog-mrpc-nodes [PLAN_ARGS="--bandwidth-gbit 10 25 --latency-us 50 --step-seconds 1.35"]
# With a hostfile, `snakemake --profile profiles/xeon plan --configfile ...`
# also measures the network between the nodes.
PLAN_ARGS ?=
plan: venv results/$(EXP)/plan/profile.json
	$(BIN)/python -m workflow.scripts.plan.plan --profile results/$(EXP)/plan/profile.json \
		--config experiments/$(EXP).yaml --out-dir results/$(EXP)/plan $(PLAN_ARGS)

results/%/plan/profile.json:
	@test -f experiments/$*.yaml || { echo "make plan: no experiments/$*.yaml (EXP=<experiment name>)" >&2; exit 2; }
	mkdir -p $(@D)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m workflow.scripts.plan.profile --config experiments/$*.yaml --out $@

clean:
	rm -rf results logs .snakemake

# Training speed: cpuddp vs the transformers Trainer on the same work (prints a
# table), then the startup from `snakemake` to the first training step.
# Accuracy too (3 epochs, ~15 min): .venv/bin/python -m bench.train_bench --accuracy
bench: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.train_bench
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.startup
	$(MAKE) --no-print-directory bench-quant

# INT8 and inference on this CPU (README, Static INT8 quantization): eager fp32,
# OpenVINO fp32 and int8, dynamic shapes and buckets, side by side, the CPU's
# model and int8/bf16 flags beside every figure; the demo's model is trained
# first when missing. Another model: make bench-quant QUANT_ARGS="--model M --data D --task T"
QUANT_ARGS ?=
bench-quant: venv
	test -d results/demo/default/model || PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --profile profiles/local \
		results/demo/default/model results/demo/data/raw --configfile experiments/demo.yaml
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.quant_bench --json results/quant_bench.json $(QUANT_ARGS)
