"""Lite topics' lifecycle (RocketMQ 5.5's LiteLifecycleManager): a lite topic of a LITE topic whose
`lite.topic.expiration` is set (minutes) is deleted once its newest message is older than that, and older
than `minLiteTTl`, whether or not its consumers are behind (5.5.0's hasConsumerLag says no lag). Its light
message queue goes from the store and its offsets from the offset table; a message to it afterwards makes
it again, at offset 0. Deleting a LITE topic deletes its lite topics.

The broker checks every `liteTtlCheckInterval`, once it has run `minLiteTTl` (a restarted broker does not
delete what it has not seen written to yet)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ferromq.broker.topics import LITE_MESSAGE_TYPE, LMQ_PREFIX

if TYPE_CHECKING:
    from ferromq.broker.offsets import ConsumerOffsetManager
    from ferromq.broker.topics import TopicConfigManager
    from ferromq.store import MessageStore

logger = logging.getLogger(__name__)

MINUTE_MS = 60_000


def lite_queue_prefix(parent: str) -> str:
    """The names of `parent`'s light message queues start with this (LiteUtil.toLmqName)."""
    return f"{LMQ_PREFIX}${parent}$"


def expire(
    store: MessageStore,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    now_ms: int,
    min_ttl_ms: int,
) -> list[str]:
    """Deletes the lite topics expired at `now_ms` (newest message older than their parent's expiration
    and than `min_ttl_ms`) and their offsets; their light message queues. The store finds and deletes
    them in Rust (a million lite topics), so this may run off the event loop."""
    deleted: list[str] = []
    for tc in list(topics.topics.values()):
        minutes = tc.lite_topic_expiration
        if tc.message_type != LITE_MESSAGE_TYPE or minutes <= 0:
            continue
        cutoff = min(now_ms - min_ttl_ms, now_ms - minutes * MINUTE_MS - 1)
        idle = store.idle_lmqs(lite_queue_prefix(tc.topic_name), cutoff)
        if idle:
            deleted += store.delete_lmqs(idle, idle_until_ms=cutoff)
    if deleted:
        offsets.remove_topics(deleted)
        logger.info("%d expired lite topics deleted (%s ...)", len(deleted), ", ".join(deleted[:3]))
    return deleted


def clean_expired(
    store: MessageStore,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    now_ms: int,
    min_ttl_ms: int,
    deleted_queue: Callable[[str], None] | None = None,
) -> int:
    """`expire`, then `deleted_queue` told each light message queue deleted; how many."""
    deleted = expire(store, topics, offsets, now_ms, min_ttl_ms)
    if deleted_queue is not None:
        for name in deleted:
            deleted_queue(name)
    return len(deleted)


def clean_parent(store: MessageStore, offsets: ConsumerOffsetManager, parent: str) -> int:
    """Deletes every lite topic of `parent` (its LITE topic is deleted); how many."""
    deleted = store.delete_lmqs([name for name, *_ in store.lmq_infos(lite_queue_prefix(parent))])
    offsets.remove_topics(deleted)
    return len(deleted)
