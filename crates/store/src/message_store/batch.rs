//! When a read's answer is full: RocketMQ's `isTheBatchFull`, the one place the pull caps live.

use std::sync::OnceLock;

use crate::config::StoreConfig;

/// A count and a byte cap on one answer.
#[derive(Debug, Clone, Copy)]
struct Caps {
    count: usize,
    bytes: usize,
}

/// The caps a queue walk stops at. The first message always goes; after it the answer is full
/// at `max_count` messages, or when the next message would pass the caps of where it lies: a
/// record further than `disk_behind` bytes behind the CommitLog's end is read from disk and
/// gets the smaller caps (Java: `maxTransfer*OnMessageInDisk` past `accessMessageInMemoryMaxRatio`
/// percent of physical memory), the others the in-memory caps.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchLimit {
    pub(crate) max_count: usize,
    memory: Caps,
    disk: Caps,
    disk_behind: u64,
    log_end: u64,
}

impl BatchLimit {
    /// At most `max_count` messages and about `max_bytes` of records, wherever they lie.
    pub(crate) fn uniform(max_count: usize, max_bytes: usize) -> Self {
        let caps = Caps {
            count: usize::MAX,
            bytes: max_bytes,
        };
        BatchLimit {
            max_count: max_count.max(1),
            memory: caps,
            disk: caps,
            disk_behind: u64::MAX,
            log_end: 0,
        }
    }

    /// A pull of at most `max_count` messages under the store's transfer caps, with the
    /// CommitLog ending at `log_end`.
    pub(crate) fn pull(config: &StoreConfig, max_count: usize, log_end: u64) -> Self {
        let ratio = u64::from(config.access_message_in_memory_max_ratio);
        BatchLimit {
            max_count: max_count.max(1),
            memory: Caps {
                count: config.max_transfer_count_on_message_in_memory,
                bytes: config.max_transfer_bytes_on_message_in_memory,
            },
            disk: Caps {
                count: config.max_transfer_count_on_message_in_disk,
                bytes: config.max_transfer_bytes_on_message_in_disk,
            },
            disk_behind: physical_memory().saturating_mul(ratio) / 100,
            log_end,
        }
    }

    /// Whether an answer of `count` messages and `bytes` bytes is full before the next one, of
    /// `size` bytes at CommitLog offset `offset`.
    pub(crate) fn full(&self, count: usize, bytes: usize, size: usize, offset: u64) -> bool {
        if count == 0 {
            return false;
        }
        if count >= self.max_count {
            return true;
        }
        let caps = if self.on_disk(offset) {
            self.disk
        } else {
            self.memory
        };
        bytes + size > caps.bytes || count >= caps.count
    }

    /// Whether a record at CommitLog offset `offset` is read from disk, not memory.
    pub(crate) fn on_disk(&self, offset: u64) -> bool {
        self.log_end.saturating_sub(offset) > self.disk_behind
    }
}

/// The machine's physical memory in bytes (what Java's `TOTAL_PHYSICAL_MEMORY_SIZE` reads, once:
/// every pull asks).
fn physical_memory() -> u64 {
    static BYTES: OnceLock<u64> = OnceLock::new();
    *BYTES.get_or_init(|| {
        // SAFETY: sysconf has no preconditions; it returns -1 for a name it does not know.
        let (pages, page_size) = unsafe {
            (
                libc::sysconf(libc::_SC_PHYS_PAGES),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        if pages <= 0 || page_size <= 0 {
            return u64::MAX;
        }
        (pages as u64).saturating_mul(page_size as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limit(log_end: u64) -> BatchLimit {
        let mut config = StoreConfig::new("/nonexistent");
        config.max_transfer_count_on_message_in_memory = 4;
        config.max_transfer_bytes_on_message_in_memory = 1000;
        config.max_transfer_count_on_message_in_disk = 2;
        config.max_transfer_bytes_on_message_in_disk = 300;
        let mut l = BatchLimit::pull(&config, 50, log_end);
        l.disk_behind = 10_000;
        l
    }

    #[test]
    fn the_first_message_always_goes() {
        assert!(!limit(0).full(0, 0, 1 << 30, 0));
    }

    #[test]
    fn memory_caps_near_the_end_disk_caps_far_behind_it() {
        let near = limit(20_000);
        assert!(!near.full(3, 300, 100, 15_000));
        assert!(near.full(4, 400, 100, 15_000), "count cap in memory");
        assert!(near.full(1, 950, 100, 15_000), "byte cap in memory");
        assert!(near.full(2, 200, 100, 5_000), "count cap on disk");
        assert!(near.full(1, 250, 100, 5_000), "byte cap on disk");
        assert!(!near.full(1, 100, 100, 5_000));
    }

    #[test]
    fn uniform_limits_ignore_where_records_lie() {
        let l = BatchLimit::uniform(3, 1000);
        assert!(!l.full(2, 800, 200, 0));
        assert!(l.full(2, 900, 200, 0));
        assert!(l.full(3, 0, 1, 0));
    }
}
