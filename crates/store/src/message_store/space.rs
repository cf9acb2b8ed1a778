//! Disk-full handling: a write is refused before it starts when the store cannot hold it, and a
//! message that was stored is never answered with an error.
//!
//! - Above `diskSpaceWarningLevelRatio` (90 % by default, as RocketMQ 4.9.7's
//!   `rocketmq.broker.diskSpaceWarningLevelRatio`) of the CommitLog's or the consume queues'
//!   partition, writes are refused (`StoreError::DiskFull`, SERVICE_NOT_AVAILABLE to clients)
//!   until usage falls below it again. The writer itself looks at the partitions every
//!   [`SPACE_CHECK_INTERVAL_MS`], and sooner once it has written half the room left under the
//!   warning level (a small disk fills up within such an interval).
//! - Below that, a write whose files cannot get their blocks (`ENOSPC` from `fallocate` or from
//!   creating a file) is refused the same way: the blocks of the CommitLog record, its consume
//!   queue unit and its index entries are all reserved before the record is written.
//! - Should dispatching a stored record still fail, the message stays acknowledged: the store
//!   notes the CommitLog offset, refuses further writes (their queue offsets would repeat) and
//!   dispatches again from the CommitLog, as RocketMQ's reput does, until it succeeds.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};

use super::{now_ms, Inner};
use crate::error::{Result, StoreError};
use crate::message_store::retention::{partition_usage, used_ratio};

/// How often (at least) a writer measures the disks.
pub const SPACE_CHECK_INTERVAL_MS: i64 = 100;
/// ... and at the latest after writing this fraction of the room left under the warning level.
const ROOM_FRACTION_BETWEEN_CHECKS: u128 = 4;

/// No record waits to be dispatched.
const NOTHING_BEHIND: u64 = u64::MAX;

pub(super) struct DiskSpace {
    /// Refusing writes: a partition is above the warning level.
    full: AtomicBool,
    /// Used percent of the fuller partition at the last look (-1 unknown).
    used_percent: AtomicI64,
    /// Which partition: 0 the CommitLog's, 1 the consume queues'.
    fuller: AtomicU32,
    last_check_ms: AtomicI64,
    /// CommitLog end at which the writer measures again, whatever the time.
    check_at_offset: AtomicU64,
    /// The first CommitLog offset whose record is not fully dispatched.
    dispatch_behind: AtomicU64,
}

impl Default for DiskSpace {
    fn default() -> Self {
        DiskSpace {
            full: AtomicBool::new(false),
            used_percent: AtomicI64::new(-1),
            fuller: AtomicU32::new(0),
            last_check_ms: AtomicI64::new(i64::MIN),
            check_at_offset: AtomicU64::new(0),
            dispatch_behind: AtomicU64::new(NOTHING_BEHIND),
        }
    }
}

/// What the store says of its disks (for runtime info and tools).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SpaceStatus {
    /// Writes are being refused because a disk is above the warning level.
    pub disk_full: bool,
    /// Used fraction of the fuller partition at the last look (-1 when unknown).
    pub used_ratio: f64,
    /// The CommitLog offset from which records wait to be dispatched again, if any.
    pub dispatch_behind: Option<u64>,
}

impl Inner {
    /// Called under the put lock before a write: refuses it when the disks are too full or
    /// stored records still wait for their consume-queue units.
    pub(super) fn admit_write(&self) -> Result<()> {
        self.check_space(false);
        let space = &self.space;
        if space.full.load(Ordering::Acquire) {
            let used = space.used_percent.load(Ordering::Relaxed);
            let path = if space.fuller.load(Ordering::Relaxed) == 0 {
                self.config.commitlog_path()
            } else {
                self.cq_root.clone()
            };
            return Err(StoreError::DiskFull {
                path,
                detail: format!(
                    "is {used}% used; writes stop above diskSpaceWarningLevelRatio {}%",
                    self.config.disk_space_warning_level_ratio
                ),
            });
        }
        self.dispatch_pending()
    }

    /// Measures the partitions if due (see the module's comment) or `force`, and sets or
    /// clears the disk-full state.
    pub(super) fn check_space(&self, force: bool) {
        let space = &self.space;
        let now = now_ms();
        let end = self.commitlog.max_offset();
        let last = space.last_check_ms.load(Ordering::Relaxed);
        if !force
            && now.saturating_sub(last) < SPACE_CHECK_INTERVAL_MS
            && end < space.check_at_offset.load(Ordering::Relaxed)
        {
            return;
        }
        space.last_check_ms.store(now, Ordering::Relaxed);
        // One look at each partition gives both its used ratio and its room under the limit.
        let percent = self.config.disk_space_warning_level_ratio as u128;
        let usage = [
            partition_usage(&self.config.commitlog_path()),
            partition_usage(&self.cq_root),
        ];
        let [physic, logics] =
            usage.map(|u| u.map_or(-1.0, |(used, entire)| used_ratio(used, entire)));
        let (ratio, which) = if logics > physic {
            (logics, 1)
        } else {
            (physic, 0)
        };
        let room = usage
            .into_iter()
            .flatten()
            .map(|(used, entire)| (entire * percent / 100).saturating_sub(used))
            .min()
            .unwrap_or(u128::MAX);
        let next = (room / ROOM_FRACTION_BETWEEN_CHECKS).min(u64::MAX as u128) as u64;
        space
            .check_at_offset
            .store(end.saturating_add(next.max(1)), Ordering::Relaxed);
        let limit = percent as f64 / 100.0;
        let full = ratio > limit;
        space
            .used_percent
            .store((ratio * 100.0).round() as i64, Ordering::Relaxed);
        space.fuller.store(which, Ordering::Relaxed);
        let was = space.full.swap(full, Ordering::AcqRel);
        if full && !was {
            log::error!(
                "disk full: {:.0}% of the {} partition is used (diskSpaceWarningLevelRatio {}%): refusing writes until space returns",
                ratio * 100.0,
                if which == 0 { "CommitLog" } else { "consume queue" },
                self.config.disk_space_warning_level_ratio
            );
        } else if was && !full {
            log::info!(
                "disk space back to {:.0}% used: accepting writes again",
                ratio * 100.0
            );
        }
    }

    /// Records that the record at `offset` (and what follows) still needs dispatching.
    pub(super) fn dispatch_failed(&self, offset: u64, e: &StoreError) {
        let before = self
            .space
            .dispatch_behind
            .fetch_min(offset, Ordering::AcqRel);
        if before == NOTHING_BEHIND {
            log::error!(
                "dispatching the record at CommitLog offset {offset} failed ({e}); the message is stored and acknowledged, writes wait until it is dispatched again"
            );
        }
    }

    /// Dispatches again the records that failed to (caller holds the put lock). Ok when nothing
    /// is behind any more.
    pub(super) fn dispatch_pending(&self) -> Result<()> {
        let from = self.space.dispatch_behind.load(Ordering::Acquire);
        if from == NOTHING_BEHIND {
            return Ok(());
        }
        let walked = self.commitlog.walk(from, false, |v| self.dispatch(v));
        match walked {
            Ok(_) => {
                self.space
                    .dispatch_behind
                    .store(NOTHING_BEHIND, Ordering::Release);
                log::info!(
                    "records from CommitLog offset {from} dispatched again: accepting writes"
                );
                Ok(())
            }
            Err(e) => Err(StoreError::DispatchBehind {
                offset: from,
                reason: e.to_string(),
            }),
        }
    }

    /// For the clean service: retries a pending dispatch even when no write comes.
    pub(super) fn retry_dispatch(&self) {
        if self.space.dispatch_behind.load(Ordering::Acquire) != NOTHING_BEHIND {
            let _guard = self.put_lock.lock().unwrap();
            let _ = self.dispatch_pending();
        }
    }

    pub(super) fn space_status(&self) -> SpaceStatus {
        let s = &self.space;
        let behind = s.dispatch_behind.load(Ordering::Acquire);
        SpaceStatus {
            disk_full: s.full.load(Ordering::Acquire),
            used_ratio: s.used_percent.load(Ordering::Relaxed) as f64 / 100.0,
            dispatch_behind: (behind != NOTHING_BEHIND).then_some(behind),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StoreConfig;
    use crate::message::MessageMeta;
    use crate::message_store::MessageStore;

    fn meta(queue_id: i32) -> MessageMeta<'static> {
        MessageMeta {
            topic: "T",
            queue_id,
            flag: 0,
            sys_flag: 0,
            born_timestamp: 1_700_000_000_000,
            born_host: "127.0.0.1:5555".parse().unwrap(),
            reconsume_times: 0,
            prepared_transaction_offset: 0,
        }
    }

    #[test]
    fn a_record_left_undispatched_is_dispatched_before_the_next_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = MessageStore::open(StoreConfig::new(dir.path())).unwrap();
        let first = store
            .put_message(&meta(0), b"one", "KEYS\u{1}k1\u{2}")
            .unwrap();
        // As if creating its consume-queue file had failed after the record was written.
        let inner = &store.inner;
        let cq = inner.queue("T", 0).unwrap();
        cq.truncate_dirty(first.physical_offset).unwrap();
        assert_eq!(cq.max_offset(), 0);
        inner.dispatch_failed(first.physical_offset as u64, &StoreError::Closed);
        assert_eq!(
            store.space_status().dispatch_behind,
            Some(first.physical_offset as u64)
        );

        // The next write dispatches the first record again before it takes a queue offset.
        let second = store.put_message(&meta(0), b"two", "").unwrap();
        assert_eq!(
            second.queue_offset, 1,
            "no queue offset is handed out twice"
        );
        assert_eq!(store.space_status().dispatch_behind, None);
        let got = store.get_messages("T", 0, 0, 10, 1 << 20, None).unwrap();
        assert_eq!(got.queue_offsets, vec![0, 1]);
        assert_eq!(
            store
                .query_by_key("T", "k1", 10, 0, i64::MAX)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn writes_are_refused_above_the_warning_level() {
        let dir = tempfile::tempdir().unwrap();
        let used = crate::message_store::retention::disk_used_ratio(dir.path());
        assert!(used >= 0.0, "statvfs works on the test's directory");
        let mut config = StoreConfig::new(dir.path());
        // A limit just under the disk's current use: full now.
        config.disk_space_warning_level_ratio = ((used * 100.0) as u32).saturating_sub(1);
        let store = MessageStore::open(config).unwrap();
        let err = store.put_message(&meta(0), b"x", "").unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, StoreError::DiskFull { .. }), "{text}");
        assert!(text.contains("diskSpaceWarningLevelRatio"), "{text}");
        assert!(text.contains("nothing was stored"), "{text}");
        assert!(store.space_status().disk_full);
        assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), 0);
        assert_eq!(store.max_physical_offset(), 0);
    }
}
