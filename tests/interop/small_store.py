"""The one small-store table of the interop tests: file sizes every broker of a test opens alike
(RocketMQ's keys for broker.conf, MessageStore's options for opening such a store directly).
Small files, so a few hundred messages cross CommitLog files and a few timers cross timer-log files."""

from __future__ import annotations

COMMITLOG_FILE_SIZE = 256 * 1024
CONSUME_QUEUE_FILE_SIZE = 20 * 1000  # 1,000 units of 20 bytes
TIMER_LOG_FILE_SIZE = 4096
HASH_SLOTS = 10_000
INDEX_ENTRIES = 40_000

SMALL_STORE: dict[str, str] = {
    "mappedFileSizeCommitLog": str(COMMITLOG_FILE_SIZE),
    "mappedFileSizeConsumeQueue": str(CONSUME_QUEUE_FILE_SIZE),
    "mappedFileSizeTimerLog": str(TIMER_LOG_FILE_SIZE),
    "maxHashSlotNum": str(HASH_SLOTS),
    "maxIndexNum": str(INDEX_ENTRIES),
}
SMALL_STORE_OPTIONS: dict[str, object] = {
    "mapped_file_size_commitlog": COMMITLOG_FILE_SIZE,
    "mapped_file_size_consume_queue": CONSUME_QUEUE_FILE_SIZE,
    "mapped_file_size_timer_log": TIMER_LOG_FILE_SIZE,
    "max_hash_slot_num": HASH_SLOTS,
    "max_index_num": INDEX_ENTRIES,
}
