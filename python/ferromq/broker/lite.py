"""Lite topics' lifecycle (RocketMQ 5.5's LiteLifecycleManager): a lite topic of a LITE topic whose
`lite.topic.expiration` is set (minutes) is deleted once its newest message is older than that, and older
than `minLiteTTl`, whether or not its consumers are behind (5.5.0's hasConsumerLag says no lag). Its light
message queue goes from the store and its offsets from the offset table; a message to it afterwards makes
it again, at offset 0. Deleting a LITE topic deletes its lite topics.

The broker checks every `liteTtlCheckInterval`, once it has run `minLiteTTl` (a restarted broker does not
delete what it has not seen written to yet)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
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


def expired_lite_queues(
    store: MessageStore, topics: TopicConfigManager, now_ms: int, min_ttl_ms: int
) -> Iterator[tuple[str, str]]:
    """(parent topic, light message queue) of every lite topic expired at `now_ms`."""
    for tc in list(topics.topics.values()):
        minutes = tc.lite_topic_expiration
        if tc.message_type != LITE_MESSAGE_TYPE or minutes <= 0:
            continue
        for name, _, max_offset, _ in store.lmq_infos(lite_queue_prefix(tc.topic_name)):
            if max_offset <= 0:
                continue
            # A queue whose records retention took has no store time: it is as old as can be.
            newest = store.store_time(name, 0, max_offset - 1) or 0
            inactive = now_ms - newest
            if inactive >= min_ttl_ms and inactive > minutes * MINUTE_MS:
                yield tc.topic_name, name


def delete_lite_queue(store: MessageStore, offsets: ConsumerOffsetManager, name: str) -> None:
    store.delete_topic(name)
    offsets.remove_topic(name)


def clean_expired(
    store: MessageStore,
    topics: TopicConfigManager,
    offsets: ConsumerOffsetManager,
    now_ms: int,
    min_ttl_ms: int,
    deleted_queue: Callable[[str], None] | None = None,
) -> int:
    """Deletes the expired lite topics (`deleted_queue` is told each one's light message queue); how
    many."""
    deleted = 0
    for parent, name in list(expired_lite_queues(store, topics, now_ms, min_ttl_ms)):
        delete_lite_queue(store, offsets, name)
        if deleted_queue is not None:
            deleted_queue(name)
        logger.info("lite topic %s of %s expired: deleted", name, parent)
        deleted += 1
    return deleted


def clean_parent(store: MessageStore, offsets: ConsumerOffsetManager, parent: str) -> int:
    """Deletes every lite topic of `parent` (its LITE topic is deleted); how many."""
    names = [name for name, *_ in store.lmq_infos(lite_queue_prefix(parent))]
    for name in names:
        delete_lite_queue(store, offsets, name)
    return len(names)
