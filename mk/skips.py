"""Every test the lanes of `make test` skipped, and why (from their JUnit XML)."""

import sys
import xml.etree.ElementTree as ET


def skipped(paths: list[str]) -> list[tuple[str, str]]:
    found = []
    for path in paths:
        for case in ET.parse(path).getroot().iter("testcase"):
            skip = case.find("skipped")
            if skip is not None:
                name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
                found.append((name, skip.get("message", "").removeprefix("Skipped: ")))
    return found


if __name__ == "__main__":
    rows = skipped(sys.argv[1:])
    print(f"skipped: {len(rows)} test(s)")
    for name, reason in rows:
        print(f"  {name}: {reason}")
