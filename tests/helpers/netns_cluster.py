"""Test hosts in network namespaces (tests/netns), as a module-scoped
fixture's body: made once per test file, removed whatever happens."""

from __future__ import annotations

import sys

import pytest

from helpers.workflow import REPO

sys.path.insert(0, str(REPO / "tests" / "netns"))
import hosts as netns

# Test hosts need root, iproute2 (ip netns) and unshare: `make test-cluster`
# (tests/conftest.py fails such a test run without root).
needs_root = pytest.mark.cluster


def netns_cluster(tmp_path_factory, count: int):
    """(work folder, host names, ssh mapping) of `count` test hosts."""
    netns.sweep()
    work = tmp_path_factory.mktemp("netns")
    prefix, hosts, mapping = netns.create(count, work)
    try:
        yield work, hosts, mapping
    finally:
        netns.remove(prefix)
        assert not [ns for ns in netns.namespaces() if ns.startswith(prefix)]
