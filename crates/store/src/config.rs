//! Store configuration; names and defaults follow RocketMQ's `MessageStoreConfig`.

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::error::{Result, StoreError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushDiskType {
    /// Flush on a timer; an append returns once it is in the page cache.
    Async,
    /// Group commit: an append that asks to wait returns once its bytes are on disk.
    Sync,
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub root_dir: PathBuf,
    /// Defaults to `{root_dir}/commitlog`.
    pub commitlog_dir: Option<PathBuf>,
    pub mapped_file_size_commitlog: usize,
    /// Rounded up to a multiple of 20 bytes.
    pub mapped_file_size_consume_queue: usize,
    pub flush_disk_type: FlushDiskType,
    pub flush_interval_commitlog_ms: u64,
    pub flush_commitlog_least_pages: usize,
    pub flush_commitlog_thorough_interval_ms: u64,
    pub flush_interval_consume_queue_ms: u64,
    pub flush_consume_queue_least_pages: usize,
    pub flush_consume_queue_thorough_interval_ms: u64,
    pub sync_flush_timeout_ms: u64,
    pub max_message_size: usize,
    pub message_index_enable: bool,
    pub max_hash_slot_num: usize,
    pub max_index_num: usize,
    /// Delay of each level in milliseconds (level 1 is index 0).
    pub message_delay_level: Vec<i64>,
    /// `brokerIP1:listenPort`, written into every record and every offsetMsgId.
    pub store_host: SocketAddr,
    pub check_crc_on_recover: bool,
    /// `enableLmq`: a record naming light message queues (`%LMQ%...`) in INNER_MULTI_DISPATCH
    /// gets its offset in each (INNER_MULTI_QUEUE_OFFSET) at append.
    pub enable_lmq: bool,
    /// `enableMultiDispatch`: such a record is dispatched into those queues (see [`crate::lmq`]).
    pub enable_multi_dispatch: bool,
    /// Create and pre-touch the next CommitLog file in the background.
    pub warm_mapped_file_enable: bool,
    /// Bytes at the write end of each file queue (the CommitLog, each consume queue, the index
    /// file's entries, the timer log) whose pages stay mapped. After a flush the store lets go of
    /// its mapping of the flushed pages behind it (`madvise(MADV_DONTNEED)`): they stay in the
    /// page cache and on disk, and a read faults them back in without I/O, so the resident set
    /// holds a few windows instead of every page written. `None`: keep every page mapped.
    pub mapped_file_hot_window: Option<usize>,
    pub read_only: bool,
    // -- retention (RocketMQ's CleanCommitLogService / CleanConsumeQueueService) --
    /// `fileReservedTime`: hours a CommitLog file is kept after its last modification.
    pub file_reserved_time_hours: u64,
    /// `deleteWhen`: the local hours at which expired files are deleted, `"04"` or `"04;16"`.
    pub delete_when: String,
    /// `diskMaxUsedSpaceRatio` (percent; RocketMQ clamps it to 10..=95 when it reads it): above
    /// it, expired files are deleted at any hour.
    pub disk_max_used_space_ratio: u32,
    /// `diskSpaceCleanForciblyRatio` (percent; a JVM system property in RocketMQ, 85): above it,
    /// with `clean_file_forcibly_enable`, files are deleted whatever their age.
    pub disk_space_clean_forcibly_ratio: u32,
    /// `diskSpaceWarningLevelRatio` (percent; a JVM system property in RocketMQ, 90): above it,
    /// writes are refused until space returns, and files are deleted whatever their age.
    pub disk_space_warning_level_ratio: u32,
    /// `cleanFileForciblyEnable`.
    pub clean_file_forcibly_enable: bool,
    /// `deleteCommitLogFilesInterval`: pause between two CommitLog file deletions.
    pub delete_commitlog_files_interval_ms: u64,
    /// `deleteConsumeQueueFilesInterval`: pause after a queue that had files deleted.
    pub delete_consume_queue_files_interval_ms: u64,
    /// `destroyMapedFileIntervalForcibly`. RocketMQ waits up to this long for readers to release a
    /// file before unmapping it under them. Here a reader holds an `Arc` of the mapping, so the
    /// file is unlinked at once and unmapped when the last reader drops it: nothing ever waits
    /// and no file "hangs". Kept (and validated) so configurations carry over.
    pub destroy_mapped_file_interval_forcibly_ms: u64,
    /// `cleanResourceInterval`: how often the clean service runs a round.
    pub clean_resource_interval_ms: u64,
    // -- what one pull answer carries (RocketMQ's isTheBatchFull) --
    /// `maxTransferCountOnMessageInMemory` / `maxTransferBytesOnMessageInMemory`: the caps of an
    /// answer whose messages are still in memory (near the CommitLog's end).
    pub max_transfer_count_on_message_in_memory: usize,
    pub max_transfer_bytes_on_message_in_memory: usize,
    /// `maxTransferCountOnMessageInDisk` / `maxTransferBytesOnMessageInDisk`: the caps once a
    /// message lies further behind the end than `access_message_in_memory_max_ratio` percent of
    /// the machine's memory.
    pub max_transfer_count_on_message_in_disk: usize,
    pub max_transfer_bytes_on_message_in_disk: usize,
    /// `accessMessageInMemoryMaxRatio` (percent of physical memory).
    pub access_message_in_memory_max_ratio: u32,
    // -- timer messages (RocketMQ 5.x's TimerMessageStore) --
    /// `timerWheelEnable`: off, a timer message is refused and no timer files are opened.
    pub timer_wheel_enable: bool,
    /// `timerPrecisionMs`: 100, 200, 500 or 1000; deliver times are rounded down to it.
    pub timer_precision_ms: i64,
    /// `timerMaxDelaySec`: the furthest a timer message may be due.
    pub timer_max_delay_sec: i64,
    /// `timerRollWindowSlot`: a message due further than this many slots ahead waits in a
    /// nearer slot and is put back ("rolled") when that one is due.
    pub timer_roll_window_slot: i64,
    /// `timerCongestNumEachSlot`: sends due in a slot holding more are refused (flow control).
    pub timer_congest_num_each_slot: i64,
    /// `mappedFileSizeTimerLog`.
    pub mapped_file_size_timer_log: usize,
}

pub const DEFAULT_MESSAGE_DELAY_LEVEL: &str =
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

/// Default `mapped_file_hot_window`: readers that keep up with the writer (most consumers, the
/// timer's enqueue, the dispatch) read within it; older pages cost a minor fault to read again.
pub const DEFAULT_MAPPED_FILE_HOT_WINDOW: usize = 8 * 1024 * 1024;

impl StoreConfig {
    pub fn new(root_dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            root_dir: root_dir.into(),
            commitlog_dir: None,
            mapped_file_size_commitlog: 1024 * 1024 * 1024,
            mapped_file_size_consume_queue: 300_000 * 20,
            flush_disk_type: FlushDiskType::Async,
            flush_interval_commitlog_ms: 500,
            flush_commitlog_least_pages: 4,
            flush_commitlog_thorough_interval_ms: 10_000,
            flush_interval_consume_queue_ms: 1000,
            flush_consume_queue_least_pages: 2,
            flush_consume_queue_thorough_interval_ms: 60_000,
            sync_flush_timeout_ms: 5000,
            max_message_size: 4 * 1024 * 1024,
            message_index_enable: true,
            max_hash_slot_num: 5_000_000,
            max_index_num: 20_000_000,
            message_delay_level: parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL).unwrap(),
            store_host: "127.0.0.1:10911".parse().unwrap(),
            check_crc_on_recover: true,
            enable_lmq: false,
            enable_multi_dispatch: false,
            warm_mapped_file_enable: true,
            mapped_file_hot_window: Some(DEFAULT_MAPPED_FILE_HOT_WINDOW),
            read_only: false,
            file_reserved_time_hours: 72,
            delete_when: "04".to_string(),
            disk_max_used_space_ratio: 75,
            disk_space_clean_forcibly_ratio: 85,
            disk_space_warning_level_ratio: 90,
            clean_file_forcibly_enable: true,
            delete_commitlog_files_interval_ms: 100,
            delete_consume_queue_files_interval_ms: 100,
            destroy_mapped_file_interval_forcibly_ms: 120_000,
            clean_resource_interval_ms: 10_000,
            max_transfer_count_on_message_in_memory: 32,
            max_transfer_bytes_on_message_in_memory: 256 * 1024,
            max_transfer_count_on_message_in_disk: 8,
            max_transfer_bytes_on_message_in_disk: 64 * 1024,
            access_message_in_memory_max_ratio: 40,
            timer_wheel_enable: true,
            timer_precision_ms: 1000,
            timer_max_delay_sec: 3 * 24 * 3600,
            timer_roll_window_slot: 2 * 24 * 3600,
            timer_congest_num_each_slot: i32::MAX as i64,
            mapped_file_size_timer_log: 100 * 1024 * 1024,
        }
    }

    pub fn commitlog_path(&self) -> PathBuf {
        self.commitlog_dir
            .clone()
            .unwrap_or_else(|| self.root_dir.join("commitlog"))
    }

    /// Checks the values together; every problem is reported at once.
    pub fn validate(&self) -> Result<()> {
        let mut problems = Vec::new();
        if self.mapped_file_size_commitlog < 4096 {
            problems.push("mapped_file_size_commitlog must be at least 4096 bytes".to_string());
        }
        if self.mapped_file_size_consume_queue < 20 {
            problems.push(
                "mapped_file_size_consume_queue must hold at least one 20-byte unit".to_string(),
            );
        }
        if self.max_hash_slot_num == 0 || self.max_index_num < 2 {
            problems.push("max_hash_slot_num must be > 0 and max_index_num >= 2".to_string());
        }
        if self.message_delay_level.is_empty() {
            problems.push("message_delay_level needs at least one level".to_string());
        }
        if self.max_message_size == 0 {
            problems.push("max_message_size must be > 0".to_string());
        }
        if let Err(e) = parse_delete_when(&self.delete_when) {
            problems.push(e);
        }
        if self.disk_max_used_space_ratio > 100 {
            problems.push("disk_max_used_space_ratio must be a percentage (0-100)".to_string());
        }
        if self.disk_space_clean_forcibly_ratio > 100 {
            problems
                .push("disk_space_clean_forcibly_ratio must be a percentage (0-100)".to_string());
        }
        if self.disk_space_warning_level_ratio > 100 {
            problems
                .push("disk_space_warning_level_ratio must be a percentage (0-100)".to_string());
        }
        if self.max_transfer_count_on_message_in_memory == 0
            || self.max_transfer_count_on_message_in_disk == 0
        {
            problems.push("the max_transfer_count_* caps must be > 0".to_string());
        }
        if self.access_message_in_memory_max_ratio > 100 {
            problems.push(
                "access_message_in_memory_max_ratio must be a percentage (0-100)".to_string(),
            );
        }
        if ![100, 200, 500, 1000].contains(&self.timer_precision_ms) {
            problems.push("timer_precision_ms must be 100, 200, 500 or 1000".to_string());
        }
        if self.timer_max_delay_sec <= 0 {
            problems.push("timer_max_delay_sec must be > 0".to_string());
        }
        if self.mapped_file_size_timer_log < 4096 {
            problems.push("mapped_file_size_timer_log must be at least 4096 bytes".to_string());
        }
        if self.clean_resource_interval_ms == 0 {
            problems.push("clean_resource_interval_ms must be > 0".to_string());
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StoreError::InvalidArgument(problems.join("; ")))
        }
    }
}

/// Parses RocketMQ's `deleteWhen`: hours of the day separated by `;` (`"04"`, `"04;16"`).
pub fn parse_delete_when(spec: &str) -> std::result::Result<Vec<u32>, String> {
    spec.split(';')
        .map(|h| match h.trim().parse::<u32>() {
            Ok(hour) if hour < 24 => Ok(hour),
            _ => Err(format!(
                "delete_when must be hours 0-23 separated by ';' (like \"04\" or \"04;16\"), not {spec:?}"
            )),
        })
        .collect()
}

/// Parses RocketMQ's `messageDelayLevel` (`1s 5s 10m 2h 1d`) into milliseconds per level.
pub fn parse_delay_levels(spec: &str) -> Result<Vec<i64>> {
    spec.split_whitespace()
        .map(|item| {
            let (num, unit) = item.split_at(item.len().saturating_sub(1));
            let factor = match unit {
                "s" => 1000,
                "m" => 60_000,
                "h" => 3_600_000,
                "d" => 86_400_000,
                _ => 0,
            };
            match num.parse::<i64>() {
                Ok(n) if factor > 0 && n >= 0 => Ok(n * factor),
                _ => Err(StoreError::InvalidArgument(format!(
                    "bad messageDelayLevel item {item:?} (want a number and one of s, m, h, d)"
                ))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_delay_levels() {
        let levels = parse_delay_levels(DEFAULT_MESSAGE_DELAY_LEVEL).unwrap();
        assert_eq!(levels.len(), 18);
        assert_eq!(levels[0], 1000);
        assert_eq!(levels[2], 10_000);
        assert_eq!(levels[17], 7_200_000);
        assert!(parse_delay_levels("1s 5x").is_err());
        assert_eq!(parse_delay_levels("1d").unwrap(), vec![86_400_000]);
    }

    #[test]
    fn delete_when_lists() {
        assert_eq!(parse_delete_when("04").unwrap(), vec![4]);
        assert_eq!(parse_delete_when("04;16").unwrap(), vec![4, 16]);
        assert!(parse_delete_when("24").is_err());
        assert!(parse_delete_when("4h").is_err());
        assert!(parse_delete_when("").is_err());
    }
}
