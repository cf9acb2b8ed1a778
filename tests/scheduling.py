"""How `--dist loadfile` (scripts/test.sh) hands the suite to its workers: a module at a time, as
pytest-xdist's own LoadFileScheduling, with two changes.

- Modules that share session fixtures are one unit, so those fixtures are built once in the run,
  not once on every worker that happens to draw one of the modules: the Spark modules (a Spark
  session, whose JVM costs tens of CPU seconds to start and warm up, and the store `produced`
  fills), the 5.x clients' side-by-side modules (Apache RocketMQ 5.3.3's proxy, a ferromq
  broker and an mqadmin JVM for each: tests/interop/conftest.py), and the two modules with
  Apache RocketMQ 5.5.0's proxy.
- Units go out heaviest first: whole directories by what their modules typically cost (Spark, the
  multi-host cluster, the side-by-side tests with Java servers), then the integration and unit
  modules, which fill the workers' last minutes. xdist's own order (by number of tests) would start
  a long Java module of few tests last and leave the other workers idle while it runs.
"""

from __future__ import annotations

from collections import OrderedDict

from xdist.scheduler import LoadFileScheduling
from xdist.workermanage import WorkerController

# Modules that form one unit (they share session-scoped fixtures), by path prefix; a unit is named
# for its first prefix.
SHARED_UNITS = (
    ("tests/spark/",),
    ("tests/interop/test_grpc_java_client.py", "tests/interop/test_grpc_python_client.py"),
    ("tests/interop/test_priority_rocketmq55.py", "tests/interop/test_rocketmq55_reference.py"),
)
# Directories from the heaviest modules to the lightest; a directory not listed goes last.
HEAVIEST_FIRST = ("tests/spark/", "tests/cluster/", "tests/interop/", "tests/integration/", "tests/unit/")


def unit_of(nodeid: str) -> str:
    """The work unit of a test: its module, or the unit of SHARED_UNITS holding it."""
    path = nodeid.split("::", 1)[0]
    return next((unit[0] for unit in SHARED_UNITS if path.startswith(unit)), path)


def weight_order(unit: str, tests: int) -> tuple[int, int]:
    """Sort key of a unit: its directory's rank, then more tests first."""
    rank = next((i for i, d in enumerate(HEAVIEST_FIRST) if unit.startswith(d)), len(HEAVIEST_FIRST))
    return rank, -tests


class ModuleUnits(LoadFileScheduling):
    """LoadFileScheduling with SHARED_UNITS and the HEAVIEST_FIRST order (module doc)."""

    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return unit_of(nodeid)

    def _assign_work_unit(self, node: WorkerController) -> None:
        # The first assignment comes right after schedule() filled the queue.
        if not self._ordered:
            units = sorted(self.workqueue.items(), key=lambda kv: weight_order(kv[0], len(kv[1])))
            self.workqueue = OrderedDict(units)
            self._ordered = True
        super()._assign_work_unit(node)
