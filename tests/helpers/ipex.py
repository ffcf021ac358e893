"""Whether IPEX is installed in this environment, and the mark of tests
that need it (they run in `make test-intel`)."""

from __future__ import annotations

import pytest

from workflow.scripts.probes import intel

HAS_IPEX = intel.installed_versions()[intel.IPEX_MODULE] is not None
_skip = pytest.mark.skipif(not HAS_IPEX, reason="IPEX is not installed here: runs in `make test-intel`")


def needs_ipex(test):
    """Marked `intel` (not collected by `make test`), skipped outside the Intel env."""
    return pytest.mark.intel(_skip(test))
