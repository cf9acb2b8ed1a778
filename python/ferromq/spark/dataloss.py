"""`failOnDataLoss`: what a read does about offsets it planned to read that retention removed.

As Spark's Kafka source: by default (`true`) the query fails with a `DataLossError` naming the
topic, the queue and the missing offsets; with `false` it logs a warning, skips the gap and reads
what is left. Loss is found on the driver (a starting or checkpointed offset below a queue's
current minimum) and in tasks (files deleted between planning and reading).
"""

from __future__ import annotations

import logging

from ferromq.errors import DataLossError

logger = logging.getLogger("ferromq.spark")

_HINT = (
    "Some data may have been lost because it is no longer in the store (retention removed it). "
    'If you want the query to go on reading what is left, set the option failOnDataLoss to "false".'
)


def report_loss(fail: bool, topic: str, queue_id: int, lost_from: int, lost_to: int, why: str) -> None:
    """Offsets `[lost_from, lost_to)` of `topic`/`queue_id` cannot be read: fail or warn."""
    what = f"ferromq data source: offsets [{lost_from}, {lost_to}) of {topic}/{queue_id} are gone ({why})"
    if fail:
        raise DataLossError(f"{what}. {_HINT}")
    logger.warning("%s; failOnDataLoss=false: skipping them", what)
