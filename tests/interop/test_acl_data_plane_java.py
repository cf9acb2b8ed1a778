"""The official Java client with AclClientRPCHook against a broker with aclEnable=true: its signed
sends are verified and served by the data plane (they do not reach the Python dispatcher, but for
one that may beat the connection's open to Python), and a send to a topic it may not publish to is
refused by Python with Java's remark."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest

from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode
from tests.integration.brokerkit import Client, running
from tests.integration.test_acl import ADMIN, PRODUCER, home, java_remark, signed_call
from tests.integration.test_acl_data_plane import PLAIN_ACL, python_sends
from tests.integration.test_data_plane import count_python_requests
from tests.interop.side_by_side import Endpoint, build_jar, run_java

HAVE_JAVA = shutil.which("mvn") is not None and shutil.which("java") is not None

pytestmark = [
    pytest.mark.skipif(not HAVE_JAVA, reason="needs `java` and `mvn` (the official Java client)"),
    pytest.mark.timeout(600),
]


def test_java_signed_sends_are_served_by_the_plane(tmp_path: Path) -> None:
    build_jar()

    async def main() -> None:
        root = home(tmp_path, PLAIN_ACL)
        async with running(tmp_path, acl_enable=True, rocketmq_home=str(root)) as (ns, broker):
            seen = count_python_requests(broker)
            c = await Client().connect(broker.port)
            for topic in ("PlaneTopic", "DeniedTopic"):
                ext = {"topic": topic, "readQueueNums": 2, "writeQueueNums": 2, "perm": 6}
                r = await signed_call(c, RC.UPDATE_AND_CREATE_TOPIC, ext, ADMIN)
                assert r.code == ResponseCode.SUCCESS, r.remark
            await c.close()
            ep = Endpoint("ferromq", f"127.0.0.1:{ns.port}", broker.config.broker_addr, tmp_path)
            common = {"ak": PRODUCER[0], "sk": PRODUCER[1], "group": "JavaPlanePG", "timeout": 60}
            sent = await asyncio.to_thread(
                run_java, ep, "AclProbe", "produce", topic="PlaneTopic", count=20, **common
            )
            assert [(e["event"], e.get("status")) for e in sent] == [("sent", "SEND_OK")] * 20
            assert python_sends(seen) <= 1, "the Java client's signed sends are the plane's"
            assert sum(broker.store.max_offset("PlaneTopic", q) for q in range(2)) == 20
            denied = await asyncio.to_thread(
                run_java, ep, "AclProbe", "produce", topic="DeniedTopic", count=1, **common
            )
            remark = java_remark("No default permission for topic:DeniedTopic", "checkPerm:610")
            assert [(e["event"], e.get("code"), e.get("remark")) for e in denied] == [("refused", 1, remark)]

    asyncio.run(asyncio.wait_for(main(), 300))
