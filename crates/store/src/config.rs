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
    /// Create and pre-touch the next CommitLog file in the background.
    pub warm_mapped_file_enable: bool,
    pub read_only: bool,
}

pub const DEFAULT_MESSAGE_DELAY_LEVEL: &str =
    "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h";

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
            warm_mapped_file_enable: true,
            read_only: false,
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
        if problems.is_empty() {
            Ok(())
        } else {
            Err(StoreError::InvalidArgument(problems.join("; ")))
        }
    }
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
}
