# The Intel stack (torch 2.8 + IPEX 2.8) in its own venv, kept outside the
# clone so that every clone and CI run on this machine reuses it.
#   make intel-venv    build it once (later calls return at once)
#   make test-intel    IPEX unit tests + a 2-rank workflow run with IPEX on
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
# a fresh clone reuses the cache, a changed pin rebuilds it.
INTEL_HASH := $(shell { cat $(INTEL_REQ); echo $(INTEL_CUDA_LIBS); } | sha256sum | cut -c1-16)
INTEL_STAMP := $(INTEL_VENV)/.built-$(INTEL_HASH)

INTEL_LOCK := $(INTEL_VENV).lock
INTEL_LOG := $(INTEL_VENV).log

.PHONY: intel-venv intel-venv-background test-intel test-intel-optional

intel-venv: $(INTEL_STAMP)

# From scratch every time: the stamp is written last, so a half-built or
# outdated env is never taken for a good one.
$(INTEL_STAMP):
	if [ -f $(INTEL_VENV)/pyvenv.cfg ]; then rm -rf $(INTEL_VENV); fi
	$(INTEL_PY) -m venv $(INTEL_VENV)
	$(INTEL_BIN)/pip install -q --upgrade pip
	$(INTEL_BIN)/pip install -q --no-deps -r $(INTEL_REQ) $(INTEL_CUDA_LIBS)
	$(INTEL_BIN)/python -c "import torch, intel_extension_for_pytorch" 2>/dev/null \
		|| $(INTEL_BIN)/python -c "import torch, intel_extension_for_pytorch"
	touch $@

test-intel: intel-venv
	CPUDDP_INTEL_STACK=1 PATH=$(INTEL_BIN):$$PATH $(INTEL_BIN)/python -m pytest -q \
		tests/test_intel.py tests/test_intel_stack.py tests/test_teardown.py

# `make test` starts building the Intel env (5-6 min, mostly download and
# unpacking) while the main suite runs; flock lets one build run at a time,
# so test-intel-optional waits for it and then finds the env built.
intel-venv-background:
	@if command -v $(INTEL_PY) >/dev/null && command -v flock >/dev/null && [ ! -f $(INTEL_STAMP) ]; then \
		mkdir -p $(dir $(INTEL_VENV)); \
		echo "building the Intel env in the background (log: $(INTEL_LOG))"; \
		nohup flock $(INTEL_LOCK) $(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) \
			intel-venv > $(INTEL_LOG) 2>&1 & \
	fi

# For `make test`: the Intel stack too, wherever its env can be built.
test-intel-optional:
	@if ! command -v $(INTEL_PY) >/dev/null; then \
		echo "test-intel skipped: $(INTEL_PY) not found (the Intel env needs it)"; \
	elif ! $(if $(shell command -v flock),flock $(INTEL_LOCK)) \
			$(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) intel-venv; then \
		echo "test-intel skipped: the Intel env could not be built (see above)"; \
	else \
		$(MAKE) --no-print-directory -f $(firstword $(MAKEFILE_LIST)) test-intel; \
	fi
