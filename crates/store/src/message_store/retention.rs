//! Retention, as Apache RocketMQ 4.9.7's `DefaultMessageStore` does it: every
//! `cleanResourceInterval` a round of `CleanCommitLogService` (delete CommitLog files older than
//! `fileReservedTime` at the `deleteWhen` hour, or when the disk is filling up, or any age when
//! it is nearly full) and `CleanConsumeQueueService` (consume-queue and index files that only
//! point below the new CommitLog start go too, and queue min offsets move up).
//!
//! The clock, the hour and the disk usage of a round come in a [`CleanInput`], so tests choose
//! them; the service thread takes them from the system.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::Timelike;

use super::{now_ms, Inner, SCHEDULE_TOPIC};
use crate::config::parse_delete_when;
use crate::error::{io_err, Result, StoreError};

/// `executeDeleteFilesManually` (the DELETE_EXPIRED_COMMITLOG request) makes this many rounds
/// delete expired files whatever the hour.
pub const MAX_MANUAL_DELETE_FILE_TIMES: u64 = 20;
/// At most this many CommitLog files go in one round (`MappedFileQueue.DELETE_FILES_BATCH_MAX`).
pub const DELETE_FILES_BATCH_MAX: usize = 10;
/// RocketMQ runs the first round a minute after the start.
pub const FIRST_ROUND_DELAY: Duration = Duration::from_secs(60);

/// What a clean round looks at: the time, the local hour and how full the disks are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CleanInput {
    pub now_ms: i64,
    /// Hour of the day (0-23) compared with `deleteWhen`.
    pub hour: u32,
    /// Used fraction (0.0-1.0, or -1 when unknown) of the CommitLog's partition.
    pub physic_used_ratio: f64,
    /// Used fraction (0.0-1.0, or -1) of the consume queues' partition.
    pub logics_used_ratio: f64,
}

impl CleanInput {
    /// The system clock, the local hour and the real disk usage of the store's directories.
    pub fn from_system(commitlog_dir: &Path, consume_queue_dir: &Path) -> Self {
        CleanInput {
            now_ms: now_ms(),
            hour: chrono::Local::now().hour(),
            physic_used_ratio: disk_used_ratio(commitlog_dir),
            logics_used_ratio: disk_used_ratio(consume_queue_dir),
        }
    }
}

/// What one round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanReport {
    /// It was a `deleteWhen` hour.
    pub time_up: bool,
    /// A disk was above `diskMaxUsedSpaceRatio` (or its usage unknown).
    pub space_full: bool,
    /// One of the rounds asked for by `execute_delete_files_manually`.
    pub manual: bool,
    /// Files were deleted whatever their age (a disk above `diskSpaceCleanForciblyRatio`).
    pub clean_at_once: bool,
    pub commitlog_files_deleted: usize,
    pub consume_queue_files_deleted: usize,
    pub index_files_deleted: usize,
    /// CommitLog start after the round.
    pub min_physical_offset: i64,
}

/// Totals since the store was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionStats {
    pub rounds: u64,
    pub commitlog_files_deleted: u64,
    pub consume_queue_files_deleted: u64,
    pub index_files_deleted: u64,
    pub consume_queues_destroyed: u64,
}

/// No retention floor: CommitLog files go by age and disk usage alone.
const NO_FLOOR: u64 = u64::MAX;

pub(super) struct Retention {
    /// Serialises rounds (the service thread and explicit calls); holds the CommitLog start the
    /// consume queues were last cleaned for (`CleanConsumeQueueService.lastPhysicalMinOffset`).
    pub(super) round: std::sync::Mutex<u64>,
    pub(super) manual_times: AtomicU64,
    rounds: AtomicU64,
    commitlog_files_deleted: AtomicU64,
    consume_queue_files_deleted: AtomicU64,
    index_files_deleted: AtomicU64,
    consume_queues_destroyed: AtomicU64,
    /// Tiered storage's floor: CommitLog files that end past it are kept whatever their age or
    /// the disk usage (their messages are not in the bucket yet). [`NO_FLOOR`] without tiering.
    floor: AtomicU64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            round: Default::default(),
            manual_times: AtomicU64::new(0),
            rounds: AtomicU64::new(0),
            commitlog_files_deleted: AtomicU64::new(0),
            consume_queue_files_deleted: AtomicU64::new(0),
            index_files_deleted: AtomicU64::new(0),
            consume_queues_destroyed: AtomicU64::new(0),
            floor: AtomicU64::new(NO_FLOOR),
        }
    }
}

impl Retention {
    /// The CommitLog offset retention may delete up to (files that end at or before it), or
    /// None to clear the floor.
    pub(super) fn set_floor(&self, floor: Option<u64>) {
        self.floor
            .store(floor.unwrap_or(NO_FLOOR), Ordering::Release);
    }

    pub(super) fn keep_from(&self) -> Option<u64> {
        let floor = self.floor.load(Ordering::Acquire);
        (floor != NO_FLOOR).then_some(floor)
    }

    pub(super) fn stats(&self) -> RetentionStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RetentionStats {
            rounds: get(&self.rounds),
            commitlog_files_deleted: get(&self.commitlog_files_deleted),
            consume_queue_files_deleted: get(&self.consume_queue_files_deleted),
            index_files_deleted: get(&self.index_files_deleted),
            consume_queues_destroyed: get(&self.consume_queues_destroyed),
        }
    }
}

/// RocketMQ's `UtilAll.getDiskPartitionSpaceUsedPercent`: the used fraction of the partition
/// holding `path`, rounded up to a whole percent, as seen by an unprivileged user (reserved
/// blocks count as neither used nor usable); -1 when it cannot be measured.
pub fn disk_used_ratio(path: &Path) -> f64 {
    partition_usage(path).map_or(-1.0, |(used, entire)| used_ratio(used, entire))
}

/// `used / entire` rounded up to a whole percent, as RocketMQ reports it.
pub(super) fn used_ratio(used: u128, entire: u128) -> f64 {
    let round = u128::from(!(used * 100).is_multiple_of(entire));
    (used * 100 / entire + round) as f64 / 100.0
}

/// (used, used + available to an unprivileged user) bytes of the partition holding `path`.
pub(super) fn partition_usage(path: &Path) -> Option<(u128, u128)> {
    use std::os::unix::ffi::OsStrExt;
    let cpath = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a valid C string and a zeroed out-parameter.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(cpath.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u128;
    let total = st.f_blocks as u128 * frsize;
    let used = total.checked_sub(st.f_bfree as u128 * frsize)?;
    let entire = used + st.f_bavail as u128 * frsize;
    (entire > 0).then_some((used, entire))
}

impl Inner {
    /// The clean service: a first round after [`FIRST_ROUND_DELAY`], then one every
    /// `clean_resource_interval_ms`, until the store closes.
    pub(super) fn run_clean_service(&self) {
        let mut wait = FIRST_ROUND_DELAY;
        loop {
            {
                let (lock, cv) = &self.stop;
                let stopped = cv
                    .wait_timeout_while(lock.lock().unwrap(), wait, |s| !*s)
                    .unwrap()
                    .0;
                if *stopped {
                    return;
                }
            }
            wait = Duration::from_millis(self.config.clean_resource_interval_ms.max(1));
            self.retry_dispatch();
            let input =
                CleanInput::from_system(&self.config.commitlog_path(), self.cq_root.as_path());
            if let Err(e) = self.clean_round(&input) {
                log::warn!("retention round failed: {e}");
            }
        }
    }

    /// One round: `CleanCommitLogService.run` then `CleanConsumeQueueService.run`.
    pub(super) fn clean_round(&self, input: &CleanInput) -> Result<CleanReport> {
        if self.config.read_only {
            return Err(StoreError::ReadOnly);
        }
        let cfg = &self.config;
        let mut last_physical_min = self.retention.round.lock().unwrap();
        let mut report = CleanReport {
            time_up: parse_delete_when(&cfg.delete_when)
                .map_err(StoreError::InvalidArgument)?
                .contains(&input.hour),
            ..Default::default()
        };
        let (space_full, clean_immediately) = self.is_space_to_delete(input);
        report.space_full = space_full;
        let manual = self
            .retention
            .manual_times
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok();
        report.manual = manual;
        if report.time_up || space_full || manual {
            report.clean_at_once = cfg.clean_file_forcibly_enable && clean_immediately;
            let reserved_ms = (cfg.file_reserved_time_hours as i64).saturating_mul(3_600_000);
            let interval = Duration::from_millis(cfg.delete_commitlog_files_interval_ms);
            let deleted = self.commitlog.delete_expired_files(
                reserved_ms,
                input.now_ms,
                || self.pause(interval),
                report.clean_at_once,
                DELETE_FILES_BATCH_MAX,
                self.retention.keep_from(),
            )?;
            report.commitlog_files_deleted = deleted.len();
            if deleted.is_empty() && space_full {
                log::warn!("disk space will be full soon, but no CommitLog file could be deleted");
            } else if !deleted.is_empty() {
                log::info!(
                    "retention: {} CommitLog file(s) deleted (time up: {}, space full: {space_full}, manual: {manual}, at once: {}); CommitLog starts at {}",
                    deleted.len(),
                    report.time_up,
                    report.clean_at_once,
                    self.commitlog.min_offset()
                );
            }
        }
        // RocketMQ's redeleteHangedFile has nothing to do: no file waits for its readers.

        let min = self.commitlog.min_offset();
        if min > *last_physical_min {
            *last_physical_min = min;
            let pause = Duration::from_millis(cfg.delete_consume_queue_files_interval_ms);
            for cq in self.all_queues() {
                let n = cq.delete_expired_files(min as i64)?;
                report.consume_queue_files_deleted += n;
                if n > 0 && !self.pause(pause) {
                    // Closing: the next open corrects the min offsets of the queues not done.
                    break;
                }
            }
            if let Some(index) = &self.index {
                report.index_files_deleted = index.delete_expired_files(min as i64);
            }
        }
        report.min_physical_offset = min as i64;

        let r = &self.retention;
        r.rounds.fetch_add(1, Ordering::Relaxed);
        r.commitlog_files_deleted
            .fetch_add(report.commitlog_files_deleted as u64, Ordering::Relaxed);
        r.consume_queue_files_deleted
            .fetch_add(report.consume_queue_files_deleted as u64, Ordering::Relaxed);
        r.index_files_deleted
            .fetch_add(report.index_files_deleted as u64, Ordering::Relaxed);
        Ok(report)
    }

    /// Waits `d` between two deletions; false (at once) when the store is closing.
    fn pause(&self, d: Duration) -> bool {
        let (lock, cv) = &self.stop;
        let guard = lock.lock().unwrap();
        if d.is_zero() {
            return !*guard;
        }
        let (stopped, _) = cv.wait_timeout_while(guard, d, |s| !*s).unwrap();
        !*stopped
    }

    /// `CleanCommitLogService.isSpaceToDelete`: (delete expired files now, delete whatever
    /// their age). The CommitLog's partition is looked at first, then the consume queues'.
    fn is_space_to_delete(&self, input: &CleanInput) -> (bool, bool) {
        let ratio = self.config.disk_max_used_space_ratio.clamp(10, 95) as f64 / 100.0;
        let forcibly = self.config.disk_space_clean_forcibly_ratio as f64 / 100.0;
        // Above the warning level writes are refused (see `space`) and files go at once too.
        let warning = self.config.disk_space_warning_level_ratio as f64 / 100.0;
        let mut clean_immediately = false;
        for used in [input.physic_used_ratio, input.logics_used_ratio] {
            if used > warning || used > forcibly {
                clean_immediately = true;
            }
            if used < 0.0 || used > ratio {
                return (true, clean_immediately);
            }
        }
        (false, clean_immediately)
    }

    /// `DefaultMessageStore.cleanExpiredConsumerQueue` (the CLEAN_EXPIRED_CONSUMEQUEUE request):
    /// drops whole queues (not of `SCHEDULE_TOPIC_XXXX`) whose last unit ends below the
    /// CommitLog start; a queue written again later starts at offset 0. Returns how many went.
    pub(super) fn clean_expired_consume_queues(&self) -> Result<usize> {
        if self.config.read_only {
            return Err(StoreError::ReadOnly);
        }
        let min = self.commitlog.min_offset() as i64;
        let _guard = self.put_lock.lock().unwrap();
        let mut destroyed = Vec::new();
        {
            let mut map = self.queues.write().unwrap();
            for (topic, queues) in map.iter_mut() {
                if topic == SCHEDULE_TOPIC {
                    continue;
                }
                queues.retain(|_, cq| {
                    let last = cq.last_offset();
                    if last != -1 && last < min {
                        log::info!(
                            "retention: consume queue {}/{} destroyed (it ends at {last}, the CommitLog starts at {min})",
                            cq.topic(),
                            cq.queue_id()
                        );
                        destroyed.push(cq.clone());
                        false
                    } else {
                        true
                    }
                });
            }
            map.retain(|_, queues| !queues.is_empty());
        }
        for cq in &destroyed {
            let dir = cq.dir();
            match std::fs::remove_dir_all(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(dir)(e)),
            }
        }
        self.retention
            .consume_queues_destroyed
            .fetch_add(destroyed.len() as u64, Ordering::Relaxed);
        // Light message queues keep their offsets; the units of deleted records go.
        self.lmqs.correct_min(min)?;
        Ok(destroyed.len())
    }
}
