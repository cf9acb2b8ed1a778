//! The store lets go of its mapping of flushed pages behind each file queue's hot window
//! (`mapped_file_hot_window`): those pages leave the process's resident set (measured per file in
//! /proc/self/smaps), and every record still reads back, a read faulting its page in again.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use common::{meta, small_config};
use ferromq_store::message::iter_records;
use ferromq_store::send::Rewrite;
use ferromq_store::{GetStatus, MessageStore, RecordView, StoreConfig};

const WINDOW: usize = 16 * 1024;
const MESSAGES: usize = 3000;
const TIMERS: usize = 1500;
const PAGE: usize = 4096;

fn config(root: &Path, window: Option<usize>) -> StoreConfig {
    let mut c = small_config(root);
    c.mapped_file_size_commitlog = 256 * 1024;
    // Not a whole number of pages, as RocketMQ's 300,000 units are not.
    c.mapped_file_size_consume_queue = 256 * 20;
    c.max_hash_slot_num = 1000;
    c.max_index_num = 20_000;
    c.mapped_file_size_timer_log = 8 * 1024;
    c.timer_precision_ms = 100;
    c.mapped_file_hot_window = window;
    // Only the test's own flushes run, and no warmer touches pages behind the test's back.
    c.flush_interval_commitlog_ms = 3_600_000;
    c.flush_interval_consume_queue_ms = 3_600_000;
    c.warm_mapped_file_enable = false;
    c
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn body(i: usize) -> Vec<u8> {
    format!("message-{i:05}-{}", "x".repeat(200 + i % 200)).into_bytes()
}

/// Resident bytes of each file under `dir` that this process maps, from /proc/self/smaps.
fn mapped_rss(dir: &Path) -> BTreeMap<PathBuf, usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut out = BTreeMap::new();
    let mut current: Option<PathBuf> = None;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or("");
        if let Some(kib) = line.strip_prefix("Rss:") {
            if let Some(path) = &current {
                let kib: usize = kib.trim().trim_end_matches("kB").trim().parse().unwrap();
                *out.entry(path.clone()).or_default() += kib * 1024;
            }
        } else if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, perms, offset, dev, inode, path.
            current = fields
                .nth(4)
                .map(PathBuf::from)
                .filter(|p| p.starts_with(dir));
        }
    }
    out
}

/// The store files in `dir` (sorted by name, so oldest first) and their resident bytes.
fn files_rss(rss: &BTreeMap<PathBuf, usize>, dir: &Path) -> Vec<(PathBuf, usize)> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|p| {
            let r = rss.get(&p).copied().unwrap_or(0);
            (p, r)
        })
        .collect()
}

/// How many files at the end of a queue of `file_size` files may hold pages of the hot window.
fn hot_files(file_size: usize) -> usize {
    WINDOW.div_ceil(file_size) + 1
}

/// Resident bytes of the files of `dir` wholly behind the hot window (and how many there are).
fn cold_rss(rss: &BTreeMap<PathBuf, usize>, dir: &Path, file_size: usize) -> (usize, usize) {
    let files = files_rss(rss, dir);
    let cold = files.len().saturating_sub(hot_files(file_size));
    assert!(cold >= 3, "{} holds {} files", dir.display(), files.len());
    (cold, files[..cold].iter().map(|(_, r)| r).sum())
}

fn total_rss(rss: &BTreeMap<PathBuf, usize>, dir: &Path) -> usize {
    files_rss(rss, dir).iter().map(|(_, r)| r).sum()
}

/// Writes plain messages (queue T/0, each with a UNIQ_KEY and a KEYS entry in the index) and
/// timer messages, and takes the timers into the wheel. Returns the timers' deliver time and
/// the plain messages' offsetMsgIds.
fn fill(store: &MessageStore) -> (i64, Vec<String>) {
    let mut ids = Vec::new();
    for i in 0..MESSAGES {
        let props = format!("KEYS\u{1}k{i}\u{2}UNIQ_KEY\u{1}U{i}");
        let r = store.put_message(&meta("T", 0), &body(i), &props).unwrap();
        ids.push(r.msg_id());
    }
    let deliver = now() + 60_000;
    for i in 0..TIMERS {
        let props = format!("TIMER_DELIVER_MS\u{1}{deliver}\u{2}KEYS\u{1}t{i}");
        store
            .send(&meta("TT", 0), b"timed", &props, &Rewrite::STORE)
            .unwrap();
    }
    assert_eq!(store.timer_enqueue(10_000, true).unwrap().taken, TIMERS);
    (deliver, ids)
}

/// Every plain message reads back, through its queue, its offsetMsgId and its key.
fn check_reads(store: &MessageStore, ids: &[String]) {
    let mut offset = 0;
    let mut seen = 0;
    loop {
        let r = store
            .get_messages("T", 0, offset, 64, 1 << 20, None)
            .unwrap();
        if r.status != GetStatus::Found {
            break;
        }
        for v in iter_records(&r.body, true) {
            let v = v.unwrap();
            assert_eq!(v.body, body(v.queue_offset as usize));
            seen += 1;
        }
        offset = r.next_begin_offset;
    }
    assert_eq!(seen, MESSAGES);
    for (i, id) in ids.iter().enumerate().step_by(97) {
        let rec = store.look_message_by_id(id).unwrap().unwrap();
        assert_eq!(RecordView::parse(&rec, true).unwrap().body, body(i));
        let found = store
            .query_by_key("T", &format!("k{i}"), 10, 0, i64::MAX)
            .unwrap();
        assert_eq!(found.len(), 1, "key k{i}");
    }
}

#[test]
fn flushed_pages_behind_the_hot_window_leave_the_resident_set_and_read_back() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let store = MessageStore::open(config(&root, Some(WINDOW))).unwrap();
    let (deliver, ids) = fill(&store);

    let c = store.config().clone();
    let queues = [
        (root.join("commitlog"), c.mapped_file_size_commitlog),
        (
            root.join("consumequeue/T/0"),
            c.mapped_file_size_consume_queue,
        ),
        (root.join("timerlog"), c.mapped_file_size_timer_log),
    ];
    let index = root.join("index");

    // Written through the mapping: resident, although no flush has run.
    let before = mapped_rss(&root);
    for (dir, size) in &queues {
        let (n, cold) = cold_rss(&before, dir, *size);
        assert!(
            cold > 0,
            "{}: {n} cold files, nothing resident",
            dir.display()
        );
    }
    let index_before = total_rss(&before, &index);

    store.flush().unwrap();
    store.timer_checkpoint().unwrap();

    // Files behind the hot window: no page left mapped; each queue keeps about its window.
    let after = mapped_rss(&root);
    for (dir, size) in &queues {
        assert_eq!(cold_rss(&after, dir, *size).1, 0, "{}", dir.display());
        let total = total_rss(&after, dir);
        assert!(
            total <= WINDOW + (hot_files(*size) + 1) * PAGE,
            "{}: {total} bytes resident",
            dir.display()
        );
    }
    // Thousands of 20-byte entries: all but the window's go; the hash slots stay.
    let index_after = total_rss(&after, &index);
    assert!(
        index_after + 100 * 1024 <= index_before,
        "index: {index_before} -> {index_after} bytes resident"
    );

    // Everything reads back, faulting pages in again...
    check_reads(&store, &ids);
    let mut delivered = Vec::new();
    loop {
        let d = store.timer_dequeue(deliver + 100, 1000).unwrap();
        delivered.extend(d.delivered.iter().map(|d| d.queue_offset));
        if !d.more {
            break;
        }
    }
    assert_eq!(delivered, (0..TIMERS as i64).collect::<Vec<_>>());
    let (commitlog, cl_size) = &queues[0];
    let (cq, cq_size) = &queues[1];
    assert!(cold_rss(&mapped_rss(&root), commitlog, *cl_size).1 > 0);

    // ...and a thorough flush lets go of them again.
    store.flush().unwrap();
    let swept = mapped_rss(&root);
    assert_eq!(cold_rss(&swept, commitlog, *cl_size).1, 0);
    assert_eq!(cold_rss(&swept, cq, *cq_size).1, 0);
    check_reads(&store, &ids);
    store.close().unwrap();
}

#[test]
fn without_a_hot_window_every_page_stays_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let store = MessageStore::open(config(&root, None)).unwrap();
    fill(&store);
    let before = mapped_rss(&root);
    store.flush().unwrap();
    store.timer_checkpoint().unwrap();
    let after = mapped_rss(&root);
    let c = store.config();
    for (dir, size) in [
        ("commitlog", c.mapped_file_size_commitlog),
        ("consumequeue/T/0", c.mapped_file_size_consume_queue),
        ("timerlog", c.mapped_file_size_timer_log),
    ] {
        let dir = root.join(dir);
        let (n, cold) = cold_rss(&after, &dir, size);
        assert_eq!(cold, cold_rss(&before, &dir, size).1, "{}", dir.display());
        assert!(
            cold > 0,
            "{}: {n} cold files, nothing resident",
            dir.display()
        );
    }
    store.close().unwrap();
}
