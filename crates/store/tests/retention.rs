//! Retention (RocketMQ 4.9.7's CleanCommitLogService / CleanConsumeQueueService) on small files:
//! by age at the deleteWhen hour, forcibly by disk usage, manually; consume-queue and index files
//! following; min offsets moving; restart after deletion; read-only views across a deletion.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_store::{CleanInput, GetStatus, MessageStore, StoreConfig};

mod common;
use common::meta;

const CL_SIZE: u64 = 64 * 1024;

fn config(root: &Path) -> StoreConfig {
    let mut c = StoreConfig::new(root);
    c.mapped_file_size_commitlog = CL_SIZE as usize;
    c.mapped_file_size_consume_queue = 20 * 50;
    c.max_hash_slot_num = 100;
    c.max_index_num = 150;
    c.delete_commitlog_files_interval_ms = 0;
    c.delete_consume_queue_files_interval_ms = 0;
    // No preallocated next file in the directory listings (one test turns it on).
    c.warm_mapped_file_enable = false;
    c
}

/// `n` messages of about 1 KiB, alternating queues 0 and 1 of `T`, keyed `k{i}`.
fn fill(store: &MessageStore, from: usize, n: usize) {
    for i in from..from + n {
        let body = vec![b'a' + (i % 26) as u8; 1000];
        let props = format!("TAGS\u{1}A\u{2}KEYS\u{1}k{i}");
        store
            .put_message(&meta("T", (i % 2) as i32), &body, &props)
            .unwrap();
    }
}

/// The CommitLog's files (20-digit names: not one the warmer is creating under a temporary name).
fn commitlog_files(root: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.len() == 20)
        })
        .collect();
    v.sort();
    v
}

fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir).map_or(0, |d| d.count())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn age(path: &Path, hours: u64) {
    let t = SystemTime::now() - Duration::from_secs(hours * 3600);
    std::fs::File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn input(hour: u32, used: f64) -> CleanInput {
    CleanInput {
        now_ms: now_ms(),
        hour,
        physic_used_ratio: used,
        logics_used_ratio: used,
    }
}

/// Every queue unit at or past the min points at or past the CommitLog start, the one before
/// (if any) below it.
fn check_queue_min(store: &MessageStore, queue_id: i32) -> i64 {
    let min = store.min_offset_in_queue("T", queue_id).unwrap();
    let r = store
        .get_messages("T", queue_id, min, 1, 1 << 20, None)
        .unwrap();
    assert_eq!(r.status, GetStatus::Found);
    let low = store
        .get_messages("T", queue_id, 0, 1, 1 << 20, None)
        .unwrap();
    if min > 0 {
        assert_eq!(low.status, GetStatus::OffsetTooSmall);
        assert_eq!(low.next_begin_offset, min);
        assert_eq!(low.min_offset, min);
    }
    min
}

#[test]
fn expired_files_go_at_the_delete_when_hour_and_queues_follow() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.delete_when = "04;16".into();
    c.warm_mapped_file_enable = true;
    let store = MessageStore::open(c).unwrap();
    fill(&store, 0, 500);
    let files = commitlog_files(dir.path());
    assert!(files.len() >= 7, "{files:?}");
    for f in &files[..3] {
        age(f, 73);
    }
    let cq0 = dir.path().join("consumequeue/T/0");
    let cq_files_before = count_files(&cq0);
    let index_before = count_files(&dir.path().join("index"));
    assert!(cq_files_before >= 4 && index_before >= 3);

    // Not the hour, disks fine: nothing goes.
    let r = store.clean_expired_files(&input(5, 0.5)).unwrap();
    assert!(!r.time_up && !r.space_full && !r.clean_at_once);
    assert_eq!(r.commitlog_files_deleted, 0);
    assert_eq!(store.min_physical_offset(), 0);

    // The hour (second item of the list): the three old files go, the next (fresh) one stops it.
    let r = store.clean_expired_files(&input(16, 0.5)).unwrap();
    assert!(r.time_up);
    assert_eq!(r.commitlog_files_deleted, 3);
    assert_eq!(store.min_physical_offset(), 3 * CL_SIZE as i64);
    assert_eq!(r.min_physical_offset, 3 * CL_SIZE as i64);
    // (The warmer may have made the next file since `files` was listed.)
    let left = commitlog_files(dir.path());
    assert_eq!(left[..files.len() - 3], files[3..]);
    assert!(r.consume_queue_files_deleted >= 2, "{r:?}");
    assert!(count_files(&cq0) < cq_files_before);
    assert!(r.index_files_deleted >= 1, "{r:?}");
    assert!(count_files(&dir.path().join("index")) < index_before);

    let min0 = check_queue_min(&store, 0);
    let min1 = check_queue_min(&store, 1);
    assert!(min0 > 0 && min1 > 0);
    // The first message kept is the first stored in the fourth file.
    let first = store.get_messages("T", 0, min0, 1, 1 << 20, None).unwrap();
    let at = i64::from_be_bytes(first.body[28..36].try_into().unwrap());
    assert!(at >= 3 * CL_SIZE as i64 && at < 4 * CL_SIZE as i64, "{at}");
    // Old keys are gone with their files, new ones are still found.
    assert!(store
        .query_by_key("T", "k1", 10, 0, i64::MAX)
        .unwrap()
        .is_empty());
    assert_eq!(
        store
            .query_by_key("T", "k499", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        1
    );
    assert_eq!(store.read_message(0).unwrap(), None);

    // A second round has nothing more to do.
    let r = store.clean_expired_files(&input(4, 0.5)).unwrap();
    assert_eq!(
        (r.commitlog_files_deleted, r.consume_queue_files_deleted),
        (0, 0)
    );
    let stats = store.retention_stats();
    assert_eq!(stats.rounds, 3);
    assert_eq!(stats.commitlog_files_deleted, 3);

    // Writing goes on at the end.
    let before = store.max_offset_in_queue("T", 0).unwrap();
    fill(&store, 500, 2);
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), before + 1);
}

#[test]
fn a_full_disk_deletes_forcibly_a_filling_one_only_expired_files() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    fill(&store, 0, 900);
    let files = commitlog_files(dir.path());
    assert!(files.len() >= 13, "{}", files.len());
    age(&files[0], 80);

    // Above diskMaxUsedSpaceRatio (75): expired files go at any hour, fresh ones stay.
    let r = store.clean_expired_files(&input(12, 0.80)).unwrap();
    assert!(r.space_full && !r.clean_at_once && !r.time_up);
    assert_eq!(r.commitlog_files_deleted, 1);

    // Above diskSpaceCleanForciblyRatio (85): any age, at most 10 a round, never the last.
    let r = store.clean_expired_files(&input(12, 0.86)).unwrap();
    assert!(r.space_full && r.clean_at_once);
    assert_eq!(r.commitlog_files_deleted, 10);
    let left = commitlog_files(dir.path()).len();
    assert_eq!(left, files.len() - 11);
    while commitlog_files(dir.path()).len() > 1 {
        let r = store.clean_expired_files(&input(12, 0.95)).unwrap();
        assert!(r.commitlog_files_deleted > 0);
    }
    assert_eq!(
        commitlog_files(dir.path()),
        vec![files.last().unwrap().clone()]
    );
    let r = store.clean_expired_files(&input(12, 0.99)).unwrap();
    assert_eq!(r.commitlog_files_deleted, 0);
    // Every queue keeps its last file, and its min moved to the units still backed.
    let min0 = check_queue_min(&store, 0);
    assert!(min0 > 0);
    assert_eq!(count_files(&dir.path().join("consumequeue/T/0")), 1);
    // An unknown disk usage (-1) counts as full, as in RocketMQ.
    let r = store.clean_expired_files(&input(12, -1.0)).unwrap();
    assert!(r.space_full);
}

#[test]
fn forcible_cleaning_can_be_turned_off_and_manual_rounds_ignore_the_hour() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.clean_file_forcibly_enable = false;
    let store = MessageStore::open(c).unwrap();
    fill(&store, 0, 300);
    let files = commitlog_files(dir.path());
    let r = store.clean_expired_files(&input(12, 0.99)).unwrap();
    assert!(r.space_full && !r.clean_at_once);
    assert_eq!(r.commitlog_files_deleted, 0);

    age(&files[0], 100);
    age(&files[1], 100);
    let r = store.clean_expired_files(&input(12, 0.1)).unwrap();
    assert_eq!(r.commitlog_files_deleted, 0);
    store.execute_delete_files_manually().unwrap();
    let r = store.clean_expired_files(&input(12, 0.1)).unwrap();
    assert!(r.manual);
    assert_eq!(r.commitlog_files_deleted, 2);
}

#[test]
fn clean_expired_consume_queues_drops_queues_with_nothing_left() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    store
        .put_message(&meta("OLD", 0), b"old", "TAGS\u{1}A")
        .unwrap();
    fill(&store, 0, 300);
    for f in &commitlog_files(dir.path())[..2] {
        age(f, 100);
    }
    store.clean_expired_files(&input(4, 0.1)).unwrap();
    assert!(store.min_physical_offset() > 0);
    assert_eq!(store.clean_expired_consume_queues().unwrap(), 1);
    assert!(!dir.path().join("consumequeue/OLD/0").exists());
    assert_eq!(store.max_offset_in_queue("OLD", 0).unwrap(), 0);
    // Written again, the queue starts at offset 0 (RocketMQ drops it from its offset table too).
    let r = store
        .put_message(&meta("OLD", 0), b"new", "TAGS\u{1}A")
        .unwrap();
    assert_eq!(r.queue_offset, 0);
    assert_eq!(store.retention_stats().consume_queues_destroyed, 1);
}

#[test]
fn restart_after_deletion_recovers_from_a_non_zero_first_file() {
    let dir = tempfile::tempdir().unwrap();
    let (min_phys, min0, max0) = {
        let store = MessageStore::open(config(dir.path())).unwrap();
        fill(&store, 0, 500);
        for f in &commitlog_files(dir.path())[..4] {
            age(f, 100);
        }
        let r = store.clean_expired_files(&input(4, 0.1)).unwrap();
        assert_eq!(r.commitlog_files_deleted, 4);
        let seen = (
            store.min_physical_offset(),
            store.min_offset_in_queue("T", 0).unwrap(),
            store.max_offset_in_queue("T", 0).unwrap(),
        );
        store.close().unwrap();
        seen
    };
    for abnormal in [false, true] {
        if abnormal {
            std::fs::write(dir.path().join("abort"), b"").unwrap();
        }
        let store = MessageStore::open(config(dir.path())).unwrap();
        assert_eq!(store.recovery_report().abnormal_exit, abnormal);
        assert_eq!(store.min_physical_offset(), min_phys);
        assert_eq!(store.recovery_report().truncated_bytes, 0);
        assert_eq!(store.min_offset_in_queue("T", 0).unwrap(), min0);
        assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), max0);
        check_queue_min(&store, 0);
        let r = store
            .get_messages("T", 0, min0, 1000, 1 << 30, None)
            .unwrap();
        assert_eq!(r.message_count as i64, max0 - min0);
        store.close().unwrap();
    }
    // A crash right after the CommitLog files went, before the queues followed: the queues'
    // min offsets are corrected at open.
    let store = MessageStore::open(config(dir.path())).unwrap();
    fill(&store, 500, 2);
    assert_eq!(store.max_offset_in_queue("T", 0).unwrap(), max0 + 1);
}

#[test]
fn read_only_view_across_a_deletion() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    fill(&store, 0, 500);
    store.flush().unwrap();
    let mut ro = config(dir.path());
    ro.read_only = true;
    let view = MessageStore::open(ro.clone()).unwrap();
    let before = view.get_messages("T", 0, 0, 4, 1 << 20, None).unwrap();
    assert_eq!(before.status, GetStatus::Found);
    assert_eq!(view.queues().unwrap()[0].min_offset, 0);

    for f in &commitlog_files(dir.path())[..3] {
        age(f, 100);
    }
    store.clean_expired_files(&input(4, 0.1)).unwrap();
    let min0 = store.min_offset_in_queue("T", 0).unwrap();
    assert!(min0 > 0);

    // Mappings the view holds stay readable (the files are unlinked, not unmapped under it).
    let r = view.get_messages("T", 0, 0, 4, 1 << 20, None).unwrap();
    assert!(matches!(
        r.status,
        GetStatus::Found | GetStatus::OffsetTooSmall | GetStatus::MessageWasRemoving
    ));
    // Once refreshed, the deleted range is gone: nothing, and the min offset moved.
    view.refresh().unwrap();
    assert_eq!(view.min_physical_offset(), store.min_physical_offset());
    let r = view.get_messages("T", 0, 0, 4, 1 << 20, None).unwrap();
    assert_eq!(r.status, GetStatus::OffsetTooSmall);
    assert_eq!(r.next_begin_offset, min0);
    let r = view.get_messages("T", 0, min0, 4, 1 << 20, None).unwrap();
    assert_eq!(r.status, GetStatus::Found);
    assert_eq!(view.read_message(0).unwrap(), None);
    let q = &view.queues().unwrap()[0];
    assert_eq!((q.topic.as_str(), q.min_offset), ("T", min0));
    assert!(view
        .query_by_key("T", "k0", 4, 0, i64::MAX)
        .unwrap()
        .is_empty());

    // A view opened after the deletion starts at the new minimum.
    let fresh = MessageStore::open(ro).unwrap();
    assert_eq!(fresh.min_physical_offset(), store.min_physical_offset());
    assert_eq!(
        fresh.min_offset_in_queue("T", 1).unwrap(),
        store.min_offset_in_queue("T", 1).unwrap()
    );
    assert_eq!(fresh.queues().unwrap()[0].min_offset, min0);
    let r = fresh.get_messages("T", 1, 0, 4, 1 << 20, None).unwrap();
    assert_eq!(r.status, GetStatus::OffsetTooSmall);
}

#[test]
fn bad_retention_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.delete_when = "4h".into();
    c.disk_max_used_space_ratio = 101;
    let err = MessageStore::open(c).err().unwrap().to_string();
    assert!(err.contains("delete_when"), "{err}");
    assert!(err.contains("disk_max_used_space_ratio"), "{err}");
}

#[test]
fn disk_usage_is_a_fraction_or_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let used = ferromq_store::message_store::disk_used_ratio(dir.path());
    assert!(used > 0.0 && used <= 1.0, "{used}");
    assert_eq!(
        ferromq_store::message_store::disk_used_ratio(&dir.path().join("missing")),
        -1.0
    );
    let store = MessageStore::open(config(dir.path())).unwrap();
    let input = store.system_clean_input();
    assert!(input.hour < 24 && input.physic_used_ratio > 0.0);
    // Both directories exist from the open, so a fresh store's disks are never "unknown".
    assert!(input.logics_used_ratio > 0.0);
}

#[test]
fn a_retention_floor_keeps_files_tiered_storage_has_not_taken() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    fill(&store, 0, 400);
    let files = commitlog_files(dir.path());
    assert!(files.len() >= 6, "{}", files.len());
    for f in &files {
        age(f, 100);
    }
    // Nothing in the bucket yet: a full disk deletes nothing.
    store.set_retention_floor(Some(0));
    assert_eq!(store.retention_floor(), Some(0));
    let r = store.clean_expired_files(&input(4, 0.99)).unwrap();
    assert!(r.clean_at_once && r.time_up);
    assert_eq!(r.commitlog_files_deleted, 0);
    // Two files taken (the floor at the end of the second, or inside the third): those two go.
    store.set_retention_floor(Some(2 * CL_SIZE + 100));
    let r = store.clean_expired_files(&input(4, 0.99)).unwrap();
    assert_eq!(r.commitlog_files_deleted, 2);
    assert_eq!(store.min_physical_offset(), 2 * CL_SIZE as i64);
    // No floor: retention as without tiering.
    store.set_retention_floor(None);
    let r = store.clean_expired_files(&input(4, 0.10)).unwrap();
    assert_eq!(r.commitlog_files_deleted, files.len() - 3);
}

#[test]
fn with_a_floor_units_whose_records_went_read_as_offset_too_small() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    // A queue of a few messages, all in the first CommitLog file, then more of another topic.
    for i in 0..20 {
        let props = format!("TAGS\u{1}A\u{2}KEYS\u{1}old{i}");
        store
            .put_message(&meta("Old", 0), &[b'o'; 1000], &props)
            .unwrap();
    }
    fill(&store, 0, 400);
    for f in &commitlog_files(dir.path()) {
        age(f, 100);
    }
    store.set_retention_floor(Some(2 * CL_SIZE));
    let r = store.clean_expired_files(&input(4, 0.10)).unwrap();
    assert_eq!(r.commitlog_files_deleted, 2);
    // The queue keeps its only consume-queue file and its min (as in RocketMQ), though every
    // record it names is gone: with a floor, too small (the bucket has them), the next offset
    // past them.
    assert_eq!(store.min_offset_in_queue("Old", 0).unwrap(), 0);
    let got = store.get_messages("Old", 0, 0, 32, 1 << 20, None).unwrap();
    assert_eq!(got.status, GetStatus::OffsetTooSmall);
    assert_eq!((got.message_count, got.next_begin_offset), (0, 20));
    // Without a floor, RocketMQ's answer.
    store.set_retention_floor(None);
    let got = store.get_messages("Old", 0, 0, 32, 1 << 20, None).unwrap();
    assert_eq!(got.status, GetStatus::MessageWasRemoving);
}
