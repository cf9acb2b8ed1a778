"""`read_topic` on a table topic whose table is in an S3 bucket (issue 44): the table's rows
read from a real S3-compatible server (versitygw, tools/s3_server.py) plus the log's tail equal
the `ferromq` source's rows. Skipped where the server cannot be built (no Go)."""

from __future__ import annotations

from pathlib import Path

import pytest
import s3_server
from pyspark.sql import SparkSession

from ferromq.spark import read_topic
from ferromq.tables import committed_offsets, open_table
from ferromq.tables.tiering import PAUSE_ENV
from ferromq.testing import BrokerProcess, wait_until
from tests.integration.test_table_topics_s3 import EAGER, WAIT, conf_keys, fully_tiered, produce
from tests.integration.test_table_topics_s3 import s3 as s3  # the fixture: the server, module-wide
from tests.interop.conftest import stop_ferromq
from tests.spark.test_table_topics import keyed, source

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]


def test_read_topic_reads_the_table_from_the_bucket_and_the_tail_from_the_log(
    spark: SparkSession, s3: s3_server.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = "TableOrders"  # tests.spark.test_table_topics.source reads this topic
    root = s3.bucket("spark") + "/tables"
    options = s3.storage_options()
    pause = tmp_path / "pause-before-commit"
    monkeypatch.setenv(PAUSE_ENV, str(pause))
    conf = {**EAGER, "tableTopics": topic, "tableTopicPath": root, **conf_keys(s3)}
    broker = BrokerProcess(tmp_path, conf).start()
    monkeypatch.delenv(PAUSE_ENV)
    try:
        sent = produce(broker.namesrv, topic, 0, 120)

        def released() -> bool:
            pause.unlink(missing_ok=True)
            return fully_tiered(broker.store, root, topic, options)

        wait_until(released, "tiered", timeout=WAIT, why=broker.log_tail, interval=0.2)
        sent.update(produce(broker.namesrv, topic, 120, 40))  # held: the log's tail
        wait_until(pause.exists, "the second commit held", timeout=WAIT, why=broker.log_tail)
        table = open_table(root, topic, options)
        assert table is not None and sum(committed_offsets(table).values()) == 120, "the first round"
        df = read_topic(spark, topic, path=str(broker.store), table_path=root, storage_options=options)
        got = keyed(df)
        assert got == keyed(source(spark, broker.store))
        body = df.columns.index("body")
        assert {k: row[body] for k, row in got.items()} == sent
        one = keyed(
            read_topic(
                spark, topic, path=str(broker.store), table_path=root, storage_options=options, queues="1"
            )
        )
        assert set(one) == {k for k in sent if k[0] == 1}
    finally:
        pause.unlink(missing_ok=True)
        stop_ferromq(broker)
