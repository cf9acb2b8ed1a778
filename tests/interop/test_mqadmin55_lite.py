"""RocketMQ 5.5's admin additions through Apache RocketMQ 5.5.0's own mqadmin (rocketmq-tools 5.5.0's
MQAdminStartup, one JVM per side: tests/interop/mqadmin.py `MqadminShell`), against ferromq and against
the Java 5.5.0 broker side by side (both with enableLmq and enableMultiDispatch, fresh stores). Each side
gets the same traffic over remoting first: a LITE topic, a lite group bound to it, lite messages to two
lite topics, a client subscribed to both (LITE_SUBSCRIPTION_CTL) that pops them all (POP_LITE_MESSAGE)
and acks some of one.

- getParentTopicInfo, getLiteTopicInfo (-s: the subscribers), getLiteClientInfo (-s), getLiteGroupInfo
  (the top K by lag count; -l one lite topic's offsets), triggerLiteDispatch, getBrokerLiteInfo;
- switchTimerEngine -e F (the file time wheel: success on both), -e R (refused on both with the same
  code; the remark of ferromq says it has no RocksDB timer engine);
- deleteTopic -t "a;b;c" and deleteSubGroup -g "a;b": 5.5.0's mqadmin splits the name server address on
  ';', not the topic: one DELETE_TOPIC_IN_BROKER for the topic "a;b;c", which neither broker has, and
  both answer success and keep a, b and c; deleteSubGroup does not split either.

What is compared after masking what differs by nature: addresses, times (printed and in ms, and the
"s ago" that follows), the broker's client ids are the test's own.

Differences kept (asserted as such):
- getBrokerLiteInfo: the store type ("default" on both), the current LMQ count, the subscription,
  order info, offset table and event map sizes and the topic and group metadata agree; "#Max LMQ" is
  5.5.0's maxLmqConsumeQueueNum (20000) and -1 on ferromq (no bound on light message queues); the
  consume-queue table size counts each broker's own tables (5.5.0 counts its system topics' queues
  too) and is only checked to be a number;
- switchTimerEngine -e R: 5.5.0 says "timerRocksDBEnable must be configured true when broker start",
  ferromq says that and that it has no RocksDB timer engine (the exception text mqadmin prints differs
  by that remark);
- a refusal's FAQ line (the name server's words for "no route") differs: masked.

Run with `-s` to see what was compared.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest
from apache_rocketmq import ROCKETMQ_55_VERSION, have_java

from ferromq.protocol.codes import ResponseCode as R
from tests.integration.brokerkit import Client
from tests.integration.test_lite_consumers import ack_lite, lite_group, pop_until, sync
from tests.integration.test_lite_topics import LMQ_ON, send_lite
from tests.interop.mqadmin import scrub
from tests.interop.sides import CLUSTER, MQADMIN_CONF, GrpcSide, both, mqadmin_sides, same, serve_both
from tests.interop.sides import MqadminSide as Side
from tests.interop.test_priority_rocketmq55 import create_topic

pytestmark = [
    pytest.mark.skipif(not have_java(), reason="5.5.0's mqadmin and broker need `java` and `mvn` on PATH"),
    pytest.mark.timeout(900),
]

KINDS = ("ferromq", "rocketmq")
CONF = {**MQADMIN_CONF, **LMQ_ON}
RUN = uuid.uuid4().hex[:6]
PARENT = f"LiteAdm{RUN}"
GROUP = f"LiteAdmG{RUN}"
CLIENT = f"liteadm-client-{RUN}"
SENT = {"a": 5, "b": 3}
ACKED_A = 2
_MS = re.compile(r"\b1[6-9]\d{11}\b")
_AGO = re.compile(r"\(\d+ s ago\)")


def masked(side: Side, out: str) -> str:
    """`out` without what differs by nature: addresses, times, the "s ago" after them, blank lines."""
    out = _AGO.sub("(<n> s ago)", _MS.sub("<ms>", scrub(out, side.labels())))
    return "\n".join(line.rstrip() for line in out.splitlines() if line.strip())


_FAQ = re.compile(
    r"(For more information, please visit the url, |See )(https://\S+)( for further details\.)?"
)
_STACK = re.compile(r"^\s+(at |\.\.\. \d+ more)")


def refusal(out: str) -> str:
    """mqadmin's failure without its stack frames, and the FAQ line each name server words its own way."""
    return "\n".join(_FAQ.sub("<faq>", line) for line in out.splitlines() if not _STACK.match(line))


_REFUSAL = re.compile(r"CODE: (\d+)\s+DESC: (.*)$", re.MULTILINE)
JAVA_NO_ROCKSDB = "timerRocksDBEnable must be configured true when broker start"
FERROMQ_NO_ROCKSDB = "ferromq has no RocksDB timer engine: its timer is the file time wheel"
_NUMBERED = re.compile(r"^\d+\s+")


def ties_unordered(out: str) -> str:
    """getLiteGroupInfo's top K tables with their rows' numbers dropped and each table's rows sorted:
    5.5.0 lists lite topics of the same lag in its heap's order, ferromq by name."""
    lines, block = [], []
    for line in [*out.splitlines(), ""]:
        if _NUMBERED.match(line):
            block.append(_NUMBERED.sub("# ", line))
            continue
        lines += sorted(block)
        block = []
        lines.append(line)
    return "\n".join(lines[:-1])


def admin_both(sides: dict[str, Side], subcommand: str, *args: str) -> dict[str, str]:
    return both(sides, lambda s: masked(s, s.admin(subcommand, *args)))  # type: ignore[no-any-return]


async def traffic(side: Side) -> dict[str, Any]:
    """The same lite traffic on one side: what the pops gave."""
    c = await Client().connect(int(side.broker_addr.rsplit(":", 1)[1]))
    try:
        await create_topic(c, GrpcSide(side.kind, side.namesrv, side.broker_addr, ""), PARENT, 1, "LITE")
        await lite_group(c, GROUP, PARENT)
        for lite, n in SENT.items():
            for i in range(n):
                code, remark = await send_lite(c, PARENT, f"{lite}{i}".encode(), lite)
                assert code == R.SUCCESS, (side.kind, remark)
        r = await sync(c, "PARTIAL_ADD", CLIENT, GROUP, PARENT, list(SENT))
        assert r.code == R.SUCCESS, (side.kind, r.remark)
        got = await pop_until(c, CLIENT, GROUP, PARENT, sum(SENT.values()))
        # A message popped again (its invisible time ran out while a loaded machine was slow: seen
        # once on the Java side in a full run) counts once, acked by its newest receipt.
        latest = {m.body.decode(): (r, m) for r, m in got}
        acked = 0
        for _, (r, m) in sorted(latest.items()):
            if m.properties["__LITE_TOPIC"] == "a" and acked < ACKED_A:
                assert (await ack_lite(c, GROUP, PARENT, r, m)).code == R.SUCCESS
                acked += 1
        return {"popped": sorted(latest)}
    finally:
        await c.close()


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Side]]:
    with ExitStack() as stack:
        where = serve_both(stack, tmp_path_factory, "mqadmin55", CONF, ROCKETMQ_55_VERSION)
        out = mqadmin_sides(stack, where, ROCKETMQ_55_VERSION)
        popped = {k: asyncio.run(asyncio.wait_for(traffic(s), 120)) for k, s in out.items()}
        assert same(popped, "popped") == {"popped": ["a0", "a1", "a2", "a3", "a4", "b0", "b1", "b2"]}
        yield out


def test_lite_views(sides: dict[str, Side]) -> None:
    out = same(admin_both(sides, "getParentTopicInfo", "-p", PARENT), "getParentTopicInfo")
    assert GROUP in out and PARENT in out

    for args in (("-l", "a"), ("-l", "a", "-s"), ("-l", "none", "-s")):
        out = same(admin_both(sides, "getLiteTopicInfo", "-p", PARENT, *args), f"getLiteTopicInfo {args}")
    out = same(admin_both(sides, "getLiteTopicInfo", "-p", PARENT, "-l", "b", "-s"), "getLiteTopicInfo b")
    assert CLIENT in out and GROUP in out

    for args in ((), ("-s",)):
        out = same(
            admin_both(sides, "getLiteClientInfo", "-p", PARENT, "-g", GROUP, "-c", CLIENT, *args),
            f"getLiteClientInfo {args}",
        )
    for args in ((), ("-k", "1"), ("-l", "a"), ("-l", "b"), ("-l", "none")):
        outs = admin_both(sides, "getLiteGroupInfo", "-p", PARENT, "-g", GROUP, *args)
        if args == ("-k", "1"):
            # "a" and "b" are as far behind: which one the top 1 is, is the heap's choice on 5.5.0.
            outs = {k: re.sub(r"^(1\s+)[ab](\s)", r"\1<a|b>\2", v, flags=re.M) for k, v in outs.items()}
        out = same({k: ties_unordered(v) for k, v in outs.items()}, f"getLiteGroupInfo {args}")
        if args == ():  # "a" 3 behind (2 of 5 acked), "b" 3 (none of 3 acked)
            assert "Total Lag Count: 6" in out

    for args in ((), ("-c", CLIENT)):
        out = same(
            admin_both(sides, "triggerLiteDispatch", "-p", PARENT, "-g", GROUP, *args),
            f"triggerLiteDispatch {args}",
        )
        assert "dispatched" in out

    outs = both(sides, lambda s: masked(s, s.admin("getBrokerLiteInfo", "-c", CLUSTER, "-d")))
    for kind, value in outs.items():
        print(f"--- getBrokerLiteInfo -d [{kind}]\n{value}")
    # broker, store type, max LMQ, current LMQ, subscriptions, order infos, CQ table, offset table, events
    rows = {k: v.splitlines()[1].split() for k, v in outs.items()}
    assert rows["rocketmq"][2] == "20000" and rows["ferromq"][2] == "-1"  # the module's docstring
    assert all(x.isdigit() for x in rows["ferromq"][6:7] + rows["rocketmq"][6:7])
    kept = {k: r[:2] + r[3:6] + r[7:] for k, r in rows.items()}
    same(kept, "getBrokerLiteInfo (but max LMQ and CQ table size)")
    same({k: v.splitlines()[2:] for k, v in outs.items()}, "getBrokerLiteInfo's topic and group meta")


def test_lite_refusals(sides: dict[str, Side]) -> None:
    for sub, args in (
        ("getParentTopicInfo", ("-p", f"Nope{RUN}")),
        ("getLiteGroupInfo", ("-p", PARENT, "-g", f"NopeG{RUN}")),
        ("getLiteClientInfo", ("-p", PARENT, "-g", f"NopeG{RUN}", "-c", CLIENT)),
        ("triggerLiteDispatch", ("-p", PARENT, "-g", f"NopeG{RUN}")),
    ):
        outs = admin_both(sides, sub, *args)
        same({k: refusal(v) for k, v in outs.items()}, f"{sub} {args}")


def test_switch_timer_engine(sides: dict[str, Side]) -> None:
    outs = both(sides, lambda s: masked(s, s.admin("switchTimerEngine", "-b", s.broker_addr, "-e", "F")))
    out = same(outs, "switchTimerEngine -e F")
    assert "success" in out
    outs = both(sides, lambda s: masked(s, s.admin("switchTimerEngine", "-b", s.broker_addr, "-e", "R")))
    for kind, value in outs.items():
        print(f"--- switchTimerEngine -e R [{kind}]\n{value}")
    answers = {k: _REFUSAL.search(v) for k, v in outs.items()}
    assert all(answers.values()), outs
    assert {k: (m.group(1), m.group(2).strip()) for k, m in answers.items() if m} == {
        "rocketmq": ("29", JAVA_NO_ROCKSDB),
        "ferromq": (
            "29",
            f"{JAVA_NO_ROCKSDB} (ferromq has no RocksDB timer engine: its timer is the file time wheel)",
        ),
    }
    out = same(admin_both(sides, "switchTimerEngine", "-c", CLUSTER, "-e", "X"), "switchTimerEngine -e X")


def test_delete_topic_and_group_with_semicolons(sides: dict[str, Side]) -> None:
    names = [f"Del{RUN}{x}" for x in "abc"]

    async def make(side: Side) -> None:
        c = await Client().connect(int(side.broker_addr.rsplit(":", 1)[1]))
        try:
            for t in names:
                await create_topic(c, GrpcSide(side.kind, side.namesrv, side.broker_addr, ""), t, 1, "NORMAL")
        finally:
            await c.close()

    for s in sides.values():
        asyncio.run(make(s))
    joined = ";".join(names)
    same(admin_both(sides, "deleteTopic", "-t", joined, "-c", CLUSTER), "deleteTopic a;b;c")
    outs = admin_both(sides, "topicList", "-c", CLUSTER)
    # One request for the topic "a;b;c": a, b and c are all still there.
    assert same({k: sorted(t for t in names if t in v) for k, v in outs.items()}, "topics left") == names
    for t in names:
        same(admin_both(sides, "topicRoute", "-t", t), f"topicRoute {t}")
    # deleteSubGroup sends the name whole too (and deletes the %RETRY% and %DLQ% topics of that name):
    # success on both, and both groups are still there.
    groups = [f"G1{RUN}", f"G2{RUN}"]
    for g in groups:
        assert "success" in same(
            admin_both(sides, "updateSubGroup", "-c", CLUSTER, "-g", g), "updateSubGroup"
        )
    out = same(admin_both(sides, "deleteSubGroup", "-g", ";".join(groups), "-c", CLUSTER), "deleteSubGroup")
    assert "success" in out
    for g in groups:
        out = same(admin_both(sides, "getConsumerConfig", "-g", g), f"getConsumerConfig {g}")
        assert re.search(rf"^groupName\s+=\s+{g}$", out, re.MULTILINE), out
