"""The lock installs on every Python the README promises (any 3.11.x).

pip refuses a pin whose Requires-Python excludes the interpreter, and the
whole `make test` stops before its first test. pymdown-extensions 13 asked
for 3.11.5, so on Debian 12's python3 (3.11.2) a fresh clone could not
build its venv. The installed distributions carry each pin's metadata: no
download needed to check it."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

LOCK = Path(__file__).resolve().parents[2] / "requirements.lock"
OLDEST_PROMISED = "3.11.0"


def pins() -> dict[str, str]:
    out = {}
    for line in LOCK.read_text().splitlines():
        line = line.split("#")[0].split(";")[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[canonicalize_name(name)] = version.split()[0]
    return out


def test_every_pin_admits_the_oldest_python_the_readme_promises():
    locked = pins()
    refused = []
    for dist in metadata.distributions():
        name = canonicalize_name(dist.metadata["Name"])
        wants = dist.metadata.get("Requires-Python")
        if name in locked and wants and not SpecifierSet(wants).contains(OLDEST_PROMISED):
            refused.append(f"{name}=={dist.version} requires Python {wants}")
    assert not refused, "; ".join(refused)


def test_the_venv_holds_the_locked_versions():
    locked = pins()
    installed = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
    differ = {n: (v, installed.get(n)) for n, v in locked.items() if installed.get(n) != v}
    assert not differ, differ
