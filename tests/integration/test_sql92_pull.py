"""SQL92 subscriptions filter on the broker when enablePropertyFilter is on."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson

from ferromq.message import decode_messages
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.testing.waiting import until

from .brokerkit import Client, properties, pull_ext, running, send_ext


def test_sql92_pull_returns_exactly_the_matching_messages(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path, enable_property_filter=True) as (_, broker):
            c = await Client().connect(broker.port)
            await c.call(RC.UPDATE_AND_CREATE_TOPIC, {"topic": "S", "readQueueNums": 1, "writeQueueNums": 1})
            for i in range(40):
                props = properties(TAGS=["A", "B"][i % 2], price=str(i), region=["EU", "US", "APAC"][i % 3])
                await c.call(RC.SEND_MESSAGE, send_ext("S", 0, props), f"{i}".encode())
            expr = "price BETWEEN 10 AND 30 AND region IN ('EU', 'APAC') AND TAGS = 'A'"
            got, offset = [], 0
            for _ in range(50):
                r = await c.call(
                    RC.PULL_MESSAGE,
                    pull_ext("G", "S", 0, offset, subscription=expr, expressionType="SQL92", maxMsgNums=7),
                )
                if r.code == R.SUCCESS:
                    got += [int(m.body) for m in decode_messages(r.body)]
                elif r.code != R.PULL_RETRY_IMMEDIATELY:
                    assert r.code == R.PULL_NOT_FOUND
                    break
                offset = int(r.ext["nextBeginOffset"])
            want = [i for i in range(10, 31) if i % 2 == 0 and i % 3 in (0, 2)]
            assert got == want
            r = await c.call(
                RC.PULL_MESSAGE, pull_ext("G", "S", 0, 0, subscription="price >", expressionType="SQL92")
            )
            assert r.code == R.SUBSCRIPTION_PARSE_FAILED
            check = {
                "clientId": "c",
                "group": "G",
                "subscriptionData": {"expressionType": "SQL92", "subString": "a ="},
            }
            r = await c.call(RC.CHECK_CLIENT_CONFIG, body=orjson.dumps(check))
            assert r.code == R.SUBSCRIPTION_PARSE_FAILED
            check["subscriptionData"]["subString"] = "a = 1"  # type: ignore[index]
            assert (await c.call(RC.CHECK_CLIENT_CONFIG, body=orjson.dumps(check))).code == R.SUCCESS
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_sql92_refused_when_property_filter_is_off(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            c = await Client().connect(broker.port)
            await c.call(RC.SEND_MESSAGE, send_ext("S", 0), b"x")
            r = await c.call(
                RC.PULL_MESSAGE, pull_ext("G", "S", 0, 0, subscription="a = 1", expressionType="SQL92")
            )
            assert r.code == R.SYSTEM_ERROR and "SQL92" in (r.remark or "")
            await c.close()

    asyncio.run(asyncio.wait_for(main(), 60))


def test_python_push_consumer_with_sql92_gets_exactly_the_matches(tmp_path: Path) -> None:
    from ferromq.client import ConsumeStatus, Message, Producer, PushConsumer, ReceivedMessage

    async def main() -> None:
        async with running(tmp_path, enable_property_filter=True) as (ns, _):
            namesrv = f"127.0.0.1:{ns.port}"
            got: list[int] = []

            async def on_messages(msgs: list[ReceivedMessage]) -> ConsumeStatus:
                got.extend(int(m.body) for m in msgs)
                return ConsumeStatus.CONSUME_SUCCESS

            async with Producer("PSQL", namesrv) as p:
                await p.send(Message("Sql", b"-1"))  # creates the topic
                consumer = PushConsumer(
                    "CSQL", namesrv, consume_from_where="CONSUME_FROM_FIRST_OFFSET", rebalance_interval=1.0
                )
                consumer.subscribe("Sql", "price >= 20 AND (color = 'red' OR color IS NULL)", "SQL92")
                consumer.register_listener(on_messages)
                async with consumer:
                    for i in range(40):
                        props = {"price": str(i)} | ({"color": ["red", "blue"][i % 2]} if i % 3 else {})
                        await p.send(Message("Sql", f"{i}".encode(), properties=props))
                    want = [i for i in range(20, 40) if i % 3 == 0 or i % 2 == 0]
                    await until(lambda: len(got) >= len(want), "the matching messages", timeout=10)
                    await asyncio.sleep(0.3)  # the observation: no unmatched message follows
            assert sorted(got) == want

    asyncio.run(asyncio.wait_for(main(), 60))
