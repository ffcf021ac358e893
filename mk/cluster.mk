# Cluster tests: every MPI flavour, test hosts made with `ip netns`, and a
# real Slurm cluster on those hosts.
#   make ci-deps          the Debian packages those tests need (root; does nothing when present)
#   make test-multinode   the across-hosts tests alone (root): DDP over veth between namespaces
#   make test-slurm       the Slurm tests alone (root): munge, slurmdbd + MariaDB, slurmctld and
#                         a slurmd per test host; `snakemake --profile profiles/slurm` through them
# `make test-integration` runs them too (tests/integration/test_multinode.py,
# test_mpi_flavours.py, test_slurm.py). Each target checks root and the
# packages first and stops with one line that names the fix.
CI_DEBS := mpich openmpi-bin iproute2 util-linux make \
	slurmctld slurmd slurm-client munge slurmdbd mariadb-server

.PHONY: ci-deps test-multinode test-slurm test-slurm-time-limit

ci-deps:
	@missing=$$(for p in $(CI_DEBS); do \
		dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -z "$$missing" ]; then echo "ci-deps: $(CI_DEBS) installed"; \
	elif [ "$$(id -u)" != 0 ]; then echo "ci-deps: missing $$missing; run as root (apt-get)" >&2; exit 1; \
	else apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null \
		&& echo "ci-deps: installed $$missing"; fi

# Bounded: the namespaces go whatever happens (the tests' finally), and a
# run killed by this timeout leaves nothing the next run does not sweep.
test-multinode: need-root need-debs venv
	PATH=$(CURDIR)/$(BIN):$$PATH timeout 600 $(BIN)/python -m pytest -q -s tests/integration/test_multinode.py

# Bounded the same way: the daemons, jobs and namespaces go whatever happens
# (the fixture's finally; a killed run's are swept by the next).
test-slurm: need-root need-debs venv
	PATH=$(CURDIR)/$(BIN):$$PATH timeout 1800 $(BIN)/python -m pytest -q -s tests/integration/test_slurm.py \
		tests/integration/test_slurm_time_limit.py

# A training longer than its Slurm time limit (profiles/slurm's --signal),
# alone; make test runs it too.
test-slurm-time-limit: need-root need-debs venv
	PATH=$(CURDIR)/$(BIN):$$PATH timeout 1800 $(BIN)/python -m pytest -q -s tests/integration/test_slurm_time_limit.py

# The shaped-network test cluster (docs/scaling-plan.md, Measured on the shaped test cluster): 4 test hosts whose links
# get a bandwidth (tc tbf) and, where the kernel has sch_netem, a latency; the
# all-reduce measured against bytes, hosts and bandwidth, and the scaling
# plan checked against real DDP runs on 2, 3 and 4 hosts (within 15%).
#   make test-scaling [GBIT="0.5 1"] [LATENCY_US=0] [HOSTS="2 3 4"] [TIMING=gate|report]
# TIMING=report (CI) prints a timing outside its bound as one line instead of
# failing; a run that fails fails either way.
GBIT ?= 0.5 1
TIMING ?= gate
LATENCY_US ?= 0
HOSTS ?= 2 3 4
.PHONY: test-scaling
test-scaling: need-root need-debs venv
	CPUDDP_SCALING=1 CPUDDP_SCALING_GBIT="$(GBIT)" CPUDDP_SCALING_LATENCY_US="$(LATENCY_US)" CPUDDP_SCALING_HOSTS="$(HOSTS)" CPUDDP_SCALING_TIMING="$(TIMING)" \
		PATH=$(CURDIR)/$(BIN):$$PATH timeout 900 $(BIN)/python -m pytest -q -s tests/integration/test_scaling.py
