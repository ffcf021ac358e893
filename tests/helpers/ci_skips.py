"""Which skips CI may see (tests/conftest.py fails every other under CI=true).

A test may skip where it runs in another make target that CI calls, or where
it needs an instruction set this CPU lacks. A skip that names the target
now running is not one of them: the Intel lane skipping "runs in `make
test-intel`" means the Intel env is missing the package, which CI provides."""

from __future__ import annotations

import os
import re

ALLOWED = re.compile(r"runs in `make ([\w-]+)`|this CPU (has no|lacks)")
# The targets that mark their tests' environment (mk/intel.mk, mk/cluster.mk).
LANE_MARKS = {"test-intel": "CPUDDP_INTEL_STACK", "test-scaling": "CPUDDP_SCALING"}


def this_lane(environ=os.environ) -> str | None:
    """The make target running the tests, where it marks itself."""
    return next((target for target, variable in LANE_MARKS.items() if environ.get(variable) == "1"), None)


def allowed_in_ci(reason: str, lane: str | None) -> bool:
    """May CI see a skip for `reason` in `lane`?"""
    found = ALLOWED.search(reason)
    return bool(found) and (found.group(1) is None or found.group(1) != lane)
