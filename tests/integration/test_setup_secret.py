"""setup_nodes' secret URL never appears on a command line, where `ps`
shows it to every user of the node: it reaches the nodes through the
launcher's environment, named (-genvlist, -x NAME) but never valued."""

from __future__ import annotations

import json
import sys

import pytest

from workflow.scripts.settings import config as cfg
from workflow.scripts.launch import command, mpi, reach
from workflow.scripts.nodes import setup
from workflow.scripts.settings.views import DistributedSettings, EnvironmentView

SECRET = "http://127.0.0.1:1/0123456789abcdef-secret"


@pytest.mark.parametrize("flavour, named", [("intel", ["-genvlist", "CPUDDP_SETUP_URL"]),
                                            ("mpich", ["-genvlist", "CPUDDP_SETUP_URL"]),
                                            ("openmpi", ["-x", "CPUDDP_SETUP_URL"])])
def test_a_passed_variable_is_named_not_valued(flavour, named):
    argv = command.mpirun_argv(flavour, "mpirun", 2, 1, {"A": "1"}, ["prog"], passed=("CPUDDP_SETUP_URL",))
    assert " ".join(named) in " ".join(argv) and argv[-1] == "prog"


def test_setup_gives_the_url_to_the_launchers_environment_only(monkeypatch, tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("localhost\n")
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "a/b",
                           "distributed": {"hostfile": str(hostfile)}})
    seen = {}

    def reach_each(dist, launcher, hosts, program, timeout, env, kind, secret):
        seen.update(program=program, env=env, secret=secret)
        return [{"rank": 0, "written": 0, "make": 0}], []

    monkeypatch.setattr(setup, "reach_each", reach_each)
    monkeypatch.setattr(mpi, "detect_launcher", lambda dist: {"mpirun": "mpirun", "flavour": "intel"})
    setup.setup(EnvironmentView.pick(config), 10)
    url = seen["secret"]["CPUDDP_SETUP_URL"]
    assert url.startswith("http://") and len(url.rsplit("/", 1)[1]) == 32  # the token
    assert url not in json.dumps(seen["program"]) and url not in json.dumps(seen["env"])
    assert "CPUDDP_SETUP_URL" not in seen["env"]


# The rank: every command line of every process of the node, while mpirun
# and its proxies are running, and the value it was given.
LOOK = """
import json, os
found = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            if os.environ["SECRET_NEEDLE"].encode() in handle.read():
                found.append(pid)
    except OSError:
        pass
print("CPUDDP-LOOK " + json.dumps({"rank": 0, "in_argv": found, "got": os.environ.get("CPUDDP_SETUP_URL")}))
"""


def test_no_command_line_of_the_launch_holds_the_secret():
    config = cfg.validate({"experiment": "x", "task": "mrpc", "model": "a/b"})
    dist = DistributedSettings.of(config["distributed"])
    launcher = mpi.detect_launcher(dist)
    needle = SECRET.rsplit("/", 1)[1]  # given reversed, so that only the secret itself can match
    program = [sys.executable, "-c", LOOK.replace('os.environ["SECRET_NEEDLE"]', 'os.environ["SECRET_NEEDLE"][::-1]')]
    reports, problems = reach.reach_each(dist, launcher, None, program, 120, {"SECRET_NEEDLE": needle[::-1]},
                                         kind="LOOK", secret={"CPUDDP_SETUP_URL": SECRET})
    assert not problems, problems
    assert reports[0]["got"] == SECRET  # it arrived
    assert reports[0]["in_argv"] == []  # and no process of the node shows it
