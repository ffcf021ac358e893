# The Intel stack (torch 2.8 + IPEX 2.8 + oneCCL bindings built from source)
# in its own venv, kept outside the clone so that every clone and CI run on
# this machine reuses it.
#   make intel-venv    build it once (later calls return at once)
#   make test-intel    IPEX unit tests + 2-rank workflow runs with IPEX and with ccl
#   make bench-comm    all-reduce and training speed, gloo against ccl (bench/comm_bench.py)
INTEL_PY ?= python3.11
INTEL_VENV ?= $(HOME)/.cache/cpuddp/intel-venv
INTEL_REQ := envs/requirements-intel.txt
INTEL_BIN := $(INTEL_VENV)/bin

# PyPI's torch 2.8.0 is the CUDA build. `import torch` loads libtorch_cuda.so
# even for CPU work, and that needs these libraries (its DT_NEEDED entries).
# The other GPU wheels torch lists (cusolver, nvrtc, nvtx, triton) are loaded
# only on a GPU: skipped, about 1 GB less. The CPU build of torch needs none.
INTEL_CUDA_LIBS := nvidia-cublas-cu12==12.8.4.1 nvidia-cuda-cupti-cu12==12.8.90 \
	nvidia-cuda-runtime-cu12==12.8.90 nvidia-cudnn-cu12==9.10.2.21 nvidia-cufft-cu12==11.3.3.83 \
	nvidia-cufile-cu12==1.13.1.3 nvidia-curand-cu12==10.3.9.90 nvidia-cusparse-cu12==12.5.8.93 \
	nvidia-cusparselt-cu12==0.7.1 nvidia-nccl-cu12==2.27.3 nvidia-nvjitlink-cu12==12.8.93

# The stamp is named by the content that defines the env, not by file times:
# a fresh clone reuses the cache, a changed pin rebuilds it (comments do not).
INTEL_HASH := $(shell { grep -v "^\#" $(INTEL_REQ); echo $(INTEL_CUDA_LIBS); } | sha256sum | cut -c1-16)
INTEL_STAMP := $(INTEL_VENV)/.built-$(INTEL_HASH)

# oneCCL Bindings for PyTorch have no release for torch 2.8: built from the
# source of intel/torch-ccl at its last commit (envs/torch-ccl/build.py). A
# copy of that source sits next to the clone (CCL_SRC) for offline builds.
CCL_COMMIT := 1fc0c383a8665a83f274e2c863e6d1d323b02856
CCL_SRC_SHA256 := 425b8db666e82a4b58c75adc258ed12cd4645d65e3dfb80440f1741cff259f39
CCL_SRC ?= $(CURDIR)/../shared/vendor/torch-ccl-1fc0c38.tar.gz
CCL_SRC_FALLBACK := /work/shared/vendor/torch-ccl-1fc0c38.tar.gz
CCL_BUILD := $(INTEL_PY) envs/torch-ccl/build.py --source $(CCL_SRC) --fallback $(CCL_SRC_FALLBACK) \
	--sha256 $(CCL_SRC_SHA256) --commit $(CCL_COMMIT)
CCL_HASH := $(shell { cat envs/torch-ccl/*; echo $(CCL_SRC_SHA256); } | sha256sum | cut -c1-16)
CCL_STAMP := $(INTEL_VENV)/.ccl-built-$(CCL_HASH)

INTEL_LOCK := $(INTEL_VENV).lock
INTEL_LOG := $(INTEL_VENV).log

.PHONY: intel-venv intel-venv-background test-intel bench-comm demo-ccl

intel-venv: $(CCL_STAMP)

# From scratch every time: the stamp is written last, so a half-built or
# outdated env is never taken for a good one. The bindings' source is
# checked first, before minutes of installing.
$(INTEL_STAMP):
	@$(CCL_BUILD) --venv $(INTEL_VENV) --check-only
	if [ -f $(INTEL_VENV)/pyvenv.cfg ]; then rm -rf $(INTEL_VENV); fi
	$(INTEL_PY) -m venv $(INTEL_VENV)
	$(INTEL_BIN)/pip install -q --upgrade pip
	$(INTEL_BIN)/pip install -q --no-deps -r $(INTEL_REQ) $(INTEL_CUDA_LIBS)
	$(INTEL_BIN)/python -c "import torch, intel_extension_for_pytorch" 2>/dev/null \
		|| $(INTEL_BIN)/python -c "import torch, intel_extension_for_pytorch"
	touch $@

# The bindings (about 1 min on 2 cores), into the same venv as oneccl; a
# rebuilt venv has lost this stamp too, so they are rebuilt with it.
$(CCL_STAMP): $(INTEL_STAMP)
	$(CCL_BUILD) --venv $(INTEL_VENV)
	touch $@

# The ccl tests run on the compiled bindings; test_multinode's ccl run needs
# root (network namespaces). A build that `make test` started in the
# background is waited for (flock), then found built.
# Two workers, whole files each, as the integration lane runs (mk/tests.mk):
# 3:30 against 4:50 in one process (alone, 2026-11-29; 3:39-3:51 in CI), the
# files' waiting filled.
test-intel: need-intel-python need-root
	$(if $(shell command -v flock),flock $(INTEL_LOCK)) $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) intel-venv
	CPUDDP_INTEL_STACK=1 OMP_WAIT_POLICY=PASSIVE PATH=$(INTEL_BIN):$$PATH $(INTEL_BIN)/python -m pytest -q -rs \
		-n 2 --dist loadfile --no-loadscope-reorder --junitxml=.lanes/intel.xml \
		tests/integration/test_intel.py tests/integration/test_intel_ccl.py tests/integration/test_intel_stack.py tests/integration/test_teardown.py \
		tests/integration/test_multinode.py::test_ccl_training_across_hosts "tests/integration/test_demo_experiments.py::test_a_demo_experiment_runs_as_checked_in[demo-ccl]"

# gloo against ccl through the workflow (experiments/demo-ccl.yaml), then its
# report with the two runs side by side.
demo-ccl: intel-venv
	PATH=$(INTEL_BIN):$$PATH $(INTEL_BIN)/snakemake --profile profiles/local --configfile experiments/demo-ccl.yaml
	PATH=$(INTEL_BIN):$$PATH $(INTEL_BIN)/snakemake --profile profiles/local --configfile experiments/demo-ccl.yaml \
		--report results/demo-ccl/report.html
	@echo "Report: results/demo-ccl/report.html"

# gloo against ccl: all-reduce of MiniLM's gradient buckets and training
# samples/s, 2 ranks on this node and (as root) across two namespace hosts.
# Run it on a quiet machine; BENCH_ARGS="--out comm.json --runs 3" etc.
BENCH_ARGS ?= --hosts
bench-comm: intel-venv
	PATH=$(INTEL_BIN):$$PATH HF_HUB_OFFLINE=1 $(INTEL_BIN)/python -m bench.comm_bench $(BENCH_ARGS)

# `make test` starts building the Intel env (5-6 min, mostly download and
# unpacking) while the main suite runs; flock lets one build run at a time,
# so test-intel waits for it and then finds the env built.
intel-venv-background:
	@if command -v $(INTEL_PY) >/dev/null && command -v flock >/dev/null && [ ! -f $(CCL_STAMP) ]; then \
		mkdir -p $(dir $(INTEL_VENV)); \
		echo "building the Intel env in the background (log: $(INTEL_LOG))"; \
		nohup flock $(INTEL_LOCK) $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) \
			intel-venv > $(INTEL_LOG) 2>&1 & \
	fi

# Training samples/s, fp32 and bf16, in the default env and then the Intel
# env (torch 2.8 + IPEX 2.8) on the same CPU and data (docs/intel-stack.md).
.PHONY: bench-intel
bench-intel: venv intel-venv
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m bench.env_bench --label "default env"
	PATH=$(INTEL_BIN):$$PATH HF_HUB_OFFLINE=1 $(INTEL_BIN)/python -m bench.env_bench --label "Intel env"
