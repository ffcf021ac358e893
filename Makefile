# cpuddp: `make demo` and `make test` bootstrap .venv from the pinned lock.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOCK_FILES := requirements.lock requirements.txt tests/reference/requirements.txt
LOCK_HASH := $(shell { cat $(LOCK_FILES); $(PY) -V; } | sha256sum | cut -c1-16)
STAMP := $(VENV)/.installed-$(LOCK_HASH)
# VENV_CACHE=<folder> (CI sets it): .venv is a link to <folder>/venv-<hash>,
# built once per lock and shared by every clone on this machine. Unset, .venv
# is a folder of the clone, as cluster nodes need it (the same path on every
# node, docs/clusters.md; a cache under $HOME may not be shared).
VENV_CACHE ?=

.PHONY: venv demo bench bench-levers bench-accuracy bench-quant clean report compare plan

include mk/tests.mk
include mk/cluster.mk
include mk/intel.mk
include mk/docs.mk

venv: $(STAMP)

$(STAMP):
ifeq ($(VENV_CACHE),)
	mk/venv.sh $(VENV) $(PY) $(LOCK_HASH)
else
	mkdir -p $(VENV_CACHE)
	flock $(VENV_CACHE)/.lock mk/venv.sh $(VENV_CACHE)/venv-$(LOCK_HASH) $(PY) $(LOCK_HASH)
	if [ -d $(VENV) ] && [ ! -L $(VENV) ]; then rm -rf $(VENV); fi
	ln -sfn $(VENV_CACHE)/venv-$(LOCK_HASH) $(VENV)
endif

demo: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --profile profiles/local --configfile experiments/demo.yaml
	@echo "Summary: results/demo/summary.json"
	@echo "Report:  results/demo/report.html"

# The profile that report, plan and compare read the experiment under (its cluster
# file): on a Slurm login node, make report PROFILE=profiles/slurm EXP=... needs
# no hostfile.
PROFILE ?= profiles/local

# The report of an experiment, results/<experiment>/report.html (every run
# writes it; this brings it up to date without training what is done):
#   make report EXP=demo-sweep            (experiments/demo-sweep.yaml)
#   make report EXP=path/to/my.yaml       (any experiment file)
# REPORT_ARGS: more snakemake arguments, e.g. "--directory /scratch/work".
EXP ?= demo
EXP_FILE = $(if $(wildcard experiments/$(EXP).yaml),experiments/$(EXP).yaml,$(EXP))
REPORT_ARGS ?=
report: venv
	@test -f '$(EXP_FILE)' || { echo "make report: no experiment file '$(EXP)' (EXP=<name in experiments/> or EXP=path/to/file.yaml)" >&2; exit 2; }
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --profile $(PROFILE) $(REPORT_ARGS) report_summary \
		--configfile '$(EXP_FILE)'

# Two experiments side by side and against their published figures:
# make compare A=blog-mrpc-nodes [B=other-experiment]
compare: venv
	@test -n "$(A)" || { echo "usage: make compare A=<experiment> [B=<experiment>]" >&2; exit 2; }
	$(BIN)/python -m workflow.scripts.report.compare --cluster-profile $(PROFILE) $(A) $(B)

# The scaling plan of an experiment (docs/scaling-plan.md): one node's step
# measured here once (results/<EXP>/plan/profile.json; delete it to measure
# again), then the prediction for 1-64 nodes, each lever and the experiment's
# plan.bandwidth_gbit networks (table, recommendation, chart):
#   make plan EXP=blog-mrpc-nodes [PLAN_ARGS="--bandwidth-gbit 10 25 --latency-us 50 --step-seconds 1.35"]
# With a hostfile, `snakemake --profile profiles/xeon plan --configfile ...`
# also measures the network between the nodes.
PLAN_ARGS ?=
plan: venv results/$(EXP)/plan/profile.json
	$(BIN)/python -m workflow.scripts.plan.plan --profile results/$(EXP)/plan/profile.json \
		--config experiments/$(EXP).yaml --cluster-profile $(PROFILE) --out-dir results/$(EXP)/plan $(PLAN_ARGS)

results/%/plan/profile.json:
	@test -f experiments/$*.yaml || { echo "make plan: no experiments/$*.yaml (EXP=<experiment name>)" >&2; exit 2; }
	mkdir -p $(@D)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m workflow.scripts.plan.profile --config experiments/$*.yaml --cluster-profile $(PROFILE) --out $@

clean:
	rm -rf results logs .snakemake

# Training speed as a user sees it: whole one-epoch runs on MRPC- and SST-2-length
# data (real GLUE histograms), cpuddp's defaults against the transformers Trainer
# at its best at both layouts, 3 paired rounds (median and spread), then where one
# rank's step goes at SST-2, STS-B (MNLI/QQP-like) and MRPC lengths.
# BENCH_ARGS="--train-size 67349 --tasks sst2" trains all of SST-2.
# BENCH_ARGS=--fp32 runs both sides (and the breakdown) in fp32, as on a CPU without native bf16;
# BENCH_ARGS=--isa=avx2 also holds every library on both sides to AVX2 (bench/isa.py).
# Per row and lever: make bench-levers. Accuracy over seeds: make bench-accuracy.
BENCH_ARGS ?=
bench: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.glue_runs $(BENCH_ARGS)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.step_breakdown $(filter --fp32 --isa=%,$(BENCH_ARGS))

# Every row of cpuddp's levers against the Trainer (short bursts, prints a table),
# the startup from `snakemake` to the first training step, and int8.
bench-levers: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.train_bench
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.startup
	$(MAKE) --no-print-directory bench-quant

# The judge of the speed defaults (docs/performance.md): cpuddp exact, bf16_master
# and defaults against each other and the Trainer at its best, 3 seeds x 3 epochs
# on MRPC- and STS-B-shaped pairs (~45 min on a quiet 2-core node); a smoke run:
# make bench-accuracy ACCURACY_ARGS="--seeds 1 --max-steps 4 --train-size 64 --json /tmp/a.json --plot /tmp/a.png"
ACCURACY_ARGS ?=
bench-accuracy: venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.accuracy_seeds --json bench/results/accuracy-seeds.json \
		--plot docs/accuracy-seeds.png $(ACCURACY_ARGS)

# INT8 and inference on this CPU (docs/int8-and-deploy.md): eager fp32,
# OpenVINO fp32 and int8, dynamic shapes and buckets, side by side, the CPU's
# model and int8/bf16 flags beside every figure; the demo's model is trained
# first when missing. Another model: make bench-quant QUANT_ARGS="--model M --data D --task T"
QUANT_ARGS ?=
bench-quant: venv
	test -d results/demo/default/model || PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --profile profiles/local \
		results/demo/default/model results/demo/data/raw --configfile experiments/demo.yaml
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.quant_bench --json results/quant_bench.json $(QUANT_ARGS)
