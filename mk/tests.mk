# Tests, in lanes (docs/getting-started.md, Development and tests), named by
# what they need:
#   make test              any developer, no root: lint, tests/unit and every
#                          integration test that needs neither root nor the Intel
#                          env (real ranks over the venv's Intel MPI, workflow runs)
#   make test-fast         tests/unit: no processes, no training (about 30 s)
#   make test-integration  tests/integration without the `cluster` and `intel` tests
#   make test-cluster      the `cluster` tests: namespace hosts, a real Slurm
#                          cluster, Debian's MPICH and Open MPI, tmpfs (root, `make ci-deps`)
#   make test-intel        the Intel env's tests (mk/intel.mk)
#   make test-all          every test lane and `make docs`, each timed, then every skip
#                          and why (CI runs it, then `make test-scaling`: .ci/run)
# A test that needs what `make test` lacks carries a marker (`cluster`, `intel`;
# pytest.ini) and is not collected there. A target whose prerequisites are
# missing fails at once with one line that names the fix; it never passes by
# skipping. Under CI=true a skip fails the run unless the test runs in another
# target CI calls (tests/conftest.py).

.PHONY: cpu-by-test test test-all test-cluster test-fast test-integration test-integration-all lint test-teardown test-chaos need-root need-debs need-intel-python bytecode

LANE := mk/lane.sh
PYTEST := PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -rs

need-root:
	@test "$$(id -u)" = 0 || { echo "make $(MAKECMDGOALS): needs root (network namespaces, tc, the Slurm daemons): run it as root" >&2; exit 1; }

need-debs:
	@missing=$$(for p in $(CI_DEBS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
		| grep -q 'install ok installed' || echo $$p; done); \
	test -z "$$missing" || { echo "make $(MAKECMDGOALS): missing Debian packages" $$missing"; run \`make ci-deps\` as root" >&2; exit 1; }

need-intel-python:
	@command -v $(INTEL_PY) >/dev/null || { echo "make $(MAKECMDGOALS): $(INTEL_PY) not found, which the Intel env needs; install it, then \`make intel-venv\`" >&2; exit 1; }

test: venv
	@rm -rf .lanes
	@$(LANE) lint $(MAKE) --no-print-directory lint
	@$(LANE) unit $(MAKE) --no-print-directory test-fast
	@$(LANE) integration $(MAKE) --no-print-directory test-integration
	@echo "== lanes"; cat .lanes/times
	@echo "== skips"; $(BIN)/python mk/skips.py .lanes/*.xml

# The lanes run one after the other, but for the docs lane, beside the Intel
# lane. Running the Intel lane beside the integration lane was tried
# (2026-11-28): it gained 1-9% in one CI run (26:22 for both, within the VM's
# hour-to-hour swing), and in the next, on a slower VM hour, it stretched the
# Intel lane from 8-10 to 25 minutes and a sweep test's wait for a rank ran
# out. Four busy processes on 2 cores cost more in flaky waits than the idle
# 15% they would fill. The Intel lane alone leaves a sixth of the 2 cores idle
# (161 s, 267 CPU-s; 2026-12-03, AMD EPYC), about the docs lane's CPU (24 s,
# 41 CPU-s), a short lane with no wait of its own to run out.
test-all: need-root need-debs need-intel-python venv
	@rm -rf .lanes
	@$(MAKE) --no-print-directory intel-venv-background
	@$(LANE) lint $(MAKE) --no-print-directory lint
	@$(LANE) unit $(MAKE) --no-print-directory test-fast
	@$(LANE) integration+cluster $(MAKE) --no-print-directory test-integration-all
	@$(MAKE) --no-print-directory -j2 --output-sync=target lane-intel lane-docs
	@echo "== lanes"; cat .lanes/times
	@echo "== skips"; $(BIN)/python mk/skips.py .lanes/*.xml

.PHONY: lane-intel lane-docs
lane-intel:
	@$(LANE) intel $(MAKE) --no-print-directory test-intel
lane-docs:
	@$(LANE) docs $(MAKE) --no-print-directory docs

# The repository's modules compiled once, then read by every process: where the
# environment sets PYTHONDONTWRITEBYTECODE (CI's does), every step, rank and
# test process would otherwise compile them again (0.1-0.3 s a process, about
# a thousand processes a lane). Python checks each file's mtime and size, so an
# edited module is compiled afresh, never read stale.
bytecode: venv
	@$(BIN)/python -m compileall -q -j 0 workflow bench tests >/dev/null

# Two workers: 34 s instead of 44 s on 2 cores (2026-12-03, AMD EPYC); more
# workers would each pay torch's import for a lane of 1,000 short tests.
test-fast: venv bytecode
	$(PYTEST) -n 2 --junitxml=.lanes/unit.xml tests/unit

# Three workers, whole files each (a file's fixtures, such as its Slurm cluster,
# start once; the files that read one shared run go together: SHARED_RUNS in
# tests/conftest.py), longest files first (tests/conftest.py): in one process a
# good part of this lane is waiting, which other workers' work fills; then the
# 2 cores are saturated, so the lane's time follows its CPU work: 17:48 for
# `make test`'s, 21:00 for test-all's with the cluster tests (2026-11-28;
# 4 workers, passive OpenMP: 22:56).
# WORKERS=0 runs it in this process.
# OMP_WAIT_POLICY=PASSIVE: an OpenMP thread with nothing to do sleeps at once
# instead of spinning for the next parallel region. Three workers' processes
# share 2 cores here, so a spinning thread takes the core another worker's
# process is waiting for: measured on the three heaviest files (architectures,
# demo experiments, quantize; -n 3, AMX Xeon, 2026-11-28) 705 s of user CPU and
# 414 s wall by default against 610 s and 384 s passive. A test lane's setting
# only: no test times anything, and a user's run keeps the OpenMP default.
WORKERS ?= 3
INTEGRATION := OMP_WAIT_POLICY=PASSIVE $(PYTEST) -n $(WORKERS) --dist loadfile --no-loadscope-reorder
test-integration: venv bytecode
	$(INTEGRATION) -m "not cluster and not intel" --junitxml=.lanes/integration.xml tests/integration

test-cluster: need-root need-debs venv bytecode
	$(INTEGRATION) -m cluster --junitxml=.lanes/cluster.xml tests/integration

# test-all's integration lane: both, in one pool of workers (the cluster
# tests' waiting is filled by the others'); the `intel` tests there skip
# with "runs in `make test-intel`".
test-integration-all: need-root need-debs venv bytecode
	$(INTEGRATION) --junitxml=.lanes/integration.xml tests/integration

# Style: ruff on the Python, snakefmt on the rules, Snakemake's own lint.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --lint --configfile experiments/demo.yaml

# The exit-time deadlock was a race: many 2-rank trainings in a row, gloo and
# ccl, in the default env and the Intel env (about 7 s each; RUNS=30: ~15 min).
RUNS ?= 30
test-teardown: venv intel-venv
	CPUDDP_TEARDOWN_RUNS=$(RUNS) $(PYTEST) -s tests/integration/test_teardown.py -k always_end
	CPUDDP_TEARDOWN_RUNS=$(RUNS) CPUDDP_INTEL_STACK=1 PATH=$(INTEL_BIN):$$PATH $(INTEL_BIN)/python -m pytest -q -s \
		tests/integration/test_teardown.py -k always_end

# Seeded rounds of random faults (rank kill, SIGSTOP, SIGTERM to a rank or to
# mpirun, a corrupted newest checkpoint) in one run, which must end with the
# weights of a clean run (`make test` runs 3 rounds): make test-chaos ROUNDS=8
ROUNDS ?= 8
test-chaos: venv
	CPUDDP_CHAOS_ROUNDS=$(ROUNDS) $(PYTEST) -s tests/integration/test_self_healing.py -k chaos

# Where a lane's CPU goes, by kind of process and by test (mk/cpu_by_test.py):
# on 2 saturated cores a lane's time follows its CPU, so this is where to
# look before shortening it. make cpu-by-test [LANE_TO_PROFILE=test-cluster]
LANE_TO_PROFILE ?= test-integration
# The log lives beside .lanes/, which `make test` and `make test-all` start by removing.
cpu-by-test: venv
	$(BIN)/python mk/cpu_by_test.py .cpu-by-test.jsonl -- $(MAKE) --no-print-directory $(LANE_TO_PROFILE)
