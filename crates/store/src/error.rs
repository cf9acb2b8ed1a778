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

    /// A message that cannot be stored as sent (RocketMQ: MESSAGE_ILLEGAL), e.g. a malformed batch.
    #[error("{0}")]
    MessageIllegal(String),

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

    /// A write refused before anything was stored: the disk holding `path` is fuller than
    /// `diskSpaceWarningLevelRatio`, or a file could not get its blocks (RocketMQ answers
    /// SERVICE_NOT_AVAILABLE). Writes are admitted again once there is room.
    #[error("service not available now: the broker's disk is full, nothing was stored ({} {detail})", path.display())]
    DiskFull { path: PathBuf, detail: String },

    /// Records from CommitLog `offset` on are stored but not yet in their consume queue or the
    /// index (creating a file there failed). Writes wait until they are, so that no queue
    /// offset is handed out twice; the store retries on its own.
    #[error("service not available now: messages from CommitLog offset {offset} are stored but not yet dispatched to their consume queues ({reason}); writes resume once they are")]
    DispatchBehind { offset: u64, reason: String },

    #[error("store was opened read-only")]
    ReadOnly,

    /// A timer message (`TIMER_DELIVER_MS`, `TIMER_DELAY_SEC`, `TIMER_DELAY_MS`) sent to a store
    /// whose timer wheel is off (RocketMQ: WHEEL_TIMER_NOT_ENABLE, answered SYSTEM_ERROR).
    #[error("accurate timer message is not enabled, timerWheelEnable is false")]
    TimerDisabled,

    /// A timer message due in a slot already holding more than `timerCongestNumEachSlot`
    /// (RocketMQ: WHEEL_TIMER_FLOW_CONTROL, answered SYSTEM_ERROR).
    #[error("timer message is under flow control, max num limit is {} or the current value is greater than {limit} and less than {}, trigger random flow control", limit * 2, limit * 2)]
    TimerFlowControl { limit: i64 },

    #[error("store is closed")]
    Closed,
}

pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// True for an I/O error that says the disk (or the user's quota) is full.
    pub fn is_no_space(&self) -> bool {
        matches!(self, StoreError::Io { source, .. }
            if matches!(source.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT)))
    }

    /// A write's preparation failed for want of room: nothing was stored, say so.
    pub(crate) fn into_disk_full(self) -> StoreError {
        match self {
            StoreError::Io { path, source }
                if matches!(
                    source.raw_os_error(),
                    Some(libc::ENOSPC) | Some(libc::EDQUOT)
                ) =>
            {
                StoreError::DiskFull {
                    path,
                    detail: format!("({source})"),
                }
            }
            other => other,
        }
    }
}

/// Attach a path to an `io::Error`; used as `.map_err(io_err(&path))`.
pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}
