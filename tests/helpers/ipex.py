"""Whether IPEX is installed in this environment, and the mark of tests
that need it (they run in `make test-intel`)."""

from __future__ import annotations

import pytest

from workflow.scripts.common import intel

HAS_IPEX = intel.installed_versions()[intel.IPEX_MODULE] is not None
needs_ipex = pytest.mark.skipif(not HAS_IPEX, reason="IPEX is not installed here: runs in `make test-intel`")
