"""tests/scheduling.py, through a real `pytest -n 2 --dist loadfile` run of a throwaway project laid
out as this suite: the modules of one shared unit run on one worker, and the heaviest directories go
out first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SCHEDULING = Path(__file__).resolve().parents[1] / "scheduling.py"

# Loads tests/scheduling.py by path: the throwaway project has a `tests` directory of its own.
CONFTEST = f"""
import importlib.util
import pytest

spec = importlib.util.spec_from_file_location("suite_scheduling", {str(SCHEDULING)!r})
scheduling = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scheduling)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    return scheduling.ModuleUnits(config, log)
"""

# Each test records its worker and the order it ran in on that worker.
TEST = """
import json, os, time
from pathlib import Path

def test_{name}():
    record = Path({record!r})
    with record.open("a") as f:
        f.write(json.dumps({{"test": {name!r}, "worker": os.environ["PYTEST_XDIST_WORKER"],
                            "at": time.monotonic()}}) + "\\n")
"""


def test_spark_modules_share_a_worker_and_heavy_directories_go_first(pytester: pytest.Pytester) -> None:
    record = pytester.path / "ran.jsonl"
    layout = {
        "tests/unit/test_u1.py": "u1",
        "tests/unit/test_u2.py": "u2",
        "tests/integration/test_i1.py": "i1",
        "tests/spark/test_s1.py": "s1",
        "tests/spark/test_s2.py": "s2",
        "tests/spark/test_s3.py": "s3",
        "tests/interop/test_grpc_java_client.py": "g1",
        "tests/interop/test_grpc_python_client.py": "g2",
        "tests/interop/test_j1.py": "j1",
    }
    pytester.makeconftest(CONFTEST)
    for path, name in layout.items():
        target = pytester.path / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(TEST.format(name=name, record=str(record)))
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist", "loadfile", "-p", "no:cacheprovider", timeout=120
    )
    result.assert_outcomes(passed=len(layout))

    runs = [json.loads(line) for line in record.read_text().splitlines()]
    worker = {r["test"]: r["worker"] for r in runs}
    assert worker["s1"] == worker["s2"] == worker["s3"], worker
    assert worker["g1"] == worker["g2"], worker
    # The Spark unit went out first, the two gRPC modules (an interop unit of two tests) second: each
    # is the first its worker ran.
    first = {
        w: min((r for r in runs if r["worker"] == w), key=lambda r: r["at"])["test"]
        for w in set(worker.values())
    }
    assert sorted(first.values()) == ["g1", "s1"], runs
