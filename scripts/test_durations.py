"""Write tests/durations.json from a JUnit XML report: each test module's seconds (setup, call and
teardown of its tests), rounded. tests/conftest.py starts the slowest modules first, so the parallel
workers finish together instead of one running a long module at the end.

    .venv/bin/python scripts/test_durations.py build/junit.xml

`scripts/test.sh` writes build/junit.xml on every full run; refresh the file after tests are added or
become much faster or slower (an unknown module counts as a few seconds; a stale one only schedules
worse, never fails).
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "durations.json"


def module_seconds(junit: Path) -> dict[str, int]:
    seconds: Counter[str] = Counter()
    for case in ET.parse(junit).iter("testcase"):
        # classname is the module's dotted path, with a class name after it for tests in classes.
        parts = case.get("classname", "").split(".")
        while parts and not parts[-1].startswith("test_"):
            parts.pop()
        if parts:
            seconds["/".join(parts) + ".py"] += float(case.get("time") or 0)
    return {module: round(s) for module, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/test_durations.py JUNIT_XML")
    table = module_seconds(Path(sys.argv[1]))
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{OUT.relative_to(ROOT)}: {len(table)} modules, {sum(table.values())} s in all")


if __name__ == "__main__":
    main()
