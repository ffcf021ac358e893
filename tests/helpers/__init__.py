"""What test files share: workflow runs, experiments, ports and single-rank
environments, fake packages, the Slurm test cluster, models built once.

Test files import from here (tests/ is on pytest's `pythonpath`), never from
one another (tests/unit/test_tests.py checks it); fixtures built on these
helpers live in the conftest.py files."""
