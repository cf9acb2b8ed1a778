//! The store's one error type. The binding maps each variant to a Python exception,
//! and the broker maps those to RocketMQ response codes.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("I/O error on {path}: {source}")]
    Io { path: PathBuf, source: io::Error },

    /// Body larger than `maxMessageSize` (RocketMQ: MESSAGE_ILLEGAL).
    #[error("message body of {size} bytes exceeds maxMessageSize {max}")]
    MessageTooLarge { size: usize, max: usize },

    /// Properties string longer than a signed short can count (RocketMQ: PROPERTIES_SIZE_EXCEEDED).
    #[error("properties of {0} bytes exceed the 32767-byte limit")]
    PropertiesTooLarge(usize),

    #[error("invalid topic {topic:?}: {reason}")]
    InvalidTopic { topic: String, reason: &'static str },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// A store file whose content cannot be right (wrong size, bad name, bad record where one must be).
    #[error("corrupt store file {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },

    #[error("not a store directory: {0} (no commitlog/ inside)")]
    NotAStore(PathBuf),

    #[error("store {0} is locked by another process (is a broker running on it?)")]
    Locked(PathBuf),

    /// SYNC_FLUSH: the bytes were appended but not on disk within `syncFlushTimeout`.
    #[error("flush did not reach offset {offset} within {timeout_ms} ms")]
    FlushTimeout { offset: u64, timeout_ms: u64 },

    #[error("store was opened read-only")]
    ReadOnly,

    #[error("store is closed")]
    Closed,
}

pub type Result<T> = std::result::Result<T, StoreError>;

/// Attach a path to an `io::Error`; used as `.map_err(io_err(&path))`.
pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}
