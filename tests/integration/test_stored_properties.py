"""Which properties a broker stores for a send, as Apache RocketMQ 4.9.7 stores them: WAIT (the producer's
wait-for-disk wish) is dropped from a plain message, but kept where 4.9.7 re-encodes the properties: delayed
messages (the SCHEDULE_TOPIC_XXXX record, and so the delivered message), transaction half messages and the
messages of a batch; CLUSTER is added. The same sends against the real Java broker are checked by
tests/interop/test_apache_rocketmq_launcher.py with `SENDS` and `expected_properties` from here."""

from __future__ import annotations

import asyncio
from pathlib import Path

from ferromq.client.message import encode_batch
from ferromq.message import decode_properties
from ferromq.protocol.codes import RequestCode as RC
from ferromq.protocol.codes import ResponseCode as R
from ferromq.protocol.headers import SEND_V2_NAMES

from .brokerkit import Client, properties, running, send_ext

TOPIC = "PropsT"
# (name, properties sent, sysFlag, batch)
SENDS = [
    ("plain", properties(TAGS="A", KEYS="k1", WAIT="true", u="1"), 0, False),
    ("delayed", properties(TAGS="B", KEYS="k2", WAIT="true", DELAY="2"), 0, False),
    ("half", properties(TAGS="C", KEYS="k3", WAIT="true", TRAN_MSG="true", PGROUP="PG"), 0x4, False),
    ("batch", properties(WAIT="true"), 0, True),
]
V2_LETTER = {name: letter for letter, name in SEND_V2_NAMES.items()}
BATCH_ITEMS = [properties(TAGS="D", KEYS=f"b{i}", UNIQ_KEY=f"U{i}") for i in range(2)]


def expected_properties(name: str, sent: str, queue_id: int) -> list[dict[str, str]]:
    """The stored properties of each message of a send from SENDS (one per batch item)."""
    props = decode_properties(sent)
    if name == "plain":
        props.pop("WAIT")
    if name == "delayed":
        props.update(REAL_TOPIC=TOPIC, REAL_QID=str(queue_id))
    if name == "half":
        props.update(REAL_TOPIC=TOPIC, REAL_QID=str(queue_id))
    props["CLUSTER"] = "DefaultCluster"
    if name == "batch":
        return [{**decode_properties(item), **props} for item in BATCH_ITEMS]
    return [props]


def batch_body() -> bytes:
    return encode_batch([(f"item{i}".encode(), 0, p) for i, p in enumerate(BATCH_ITEMS)])


async def send_all(port: int) -> dict[str, tuple[int, list[int]]]:
    """Sends SENDS to queue 1 of TOPIC on the broker at `port`; name -> (queue id, CommitLog offsets)."""
    b = await Client().connect(port)
    out = {}
    for name, props, sys_flag, batch in SENDS:
        code = RC.SEND_BATCH_MESSAGE if batch else RC.SEND_MESSAGE
        ext = send_ext(TOPIC, 1, props, sysFlag=sys_flag)
        if batch:  # Java reads SEND_BATCH_MESSAGE's header only in its V2 form (one-letter names)
            ext = {V2_LETTER[k]: v for k, v in {**ext, "batch": "true"}.items()}
        body = batch_body() if batch else name.encode()
        r = await b.call(code, ext, body)
        if r.code == R.TOPIC_NOT_EXIST:  # a Java broker may not have created the topic on the first try
            r = await b.call(code, ext, body)
        assert r.code == R.SUCCESS, (name, r.remark)
        out[name] = (1, [int(msg_id[16:], 16) for msg_id in r.ext["msgId"].split(",")])
    await b.close()
    return out


def test_stored_properties_follow_rocketmq(tmp_path: Path) -> None:
    async def main() -> None:
        async with running(tmp_path) as (_, broker):
            sent = await send_all(broker.port)
            for name, props, _, _ in SENDS:
                queue_id, offsets = sent[name]
                stored = [broker.store.read(o) for o in offsets]
                got = [m.properties if m is not None else None for m in stored]
                assert got == expected_properties(name, props, queue_id), name

    asyncio.run(asyncio.wait_for(main(), 60))
