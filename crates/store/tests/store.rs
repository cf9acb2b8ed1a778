//! Whole-store behaviour through the public API, on real files in a temporary directory.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Duration;

use ferromq_store::hash::{java_string_hash, tags_code};
use ferromq_store::message::{iter_records, sysflag, RecordView};
use ferromq_store::message_store::SCHEDULE_TOPIC;
use ferromq_store::{BatchItem, FlushDiskType, GetStatus, MessageStore, StoreConfig, StoreError};

mod common;
use common::{meta, small_config};

fn props(tag: &str, keys: &str, uniq: &str) -> String {
    format!("TAGS\u{1}{tag}\u{2}KEYS\u{1}{keys}\u{2}UNIQ_KEY\u{1}{uniq}")
}

fn bodies(r: &ferromq_store::GetResult) -> Vec<Vec<u8>> {
    iter_records(&r.body, true)
        .map(|v| v.unwrap().body.to_vec())
        .collect()
}

#[test]
fn put_and_get_across_many_segments() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let mut ids = Vec::new();
    for i in 0..2000 {
        let body = format!("message-{i:05}-{}", "x".repeat(i % 300));
        let r = store
            .put_message(
                &meta("T", (i % 3) as i32),
                body.as_bytes(),
                &props("TagA", &format!("k{i}"), &format!("U{i}")),
            )
            .unwrap();
        assert_eq!(r.queue_offset, (i / 3) as i64);
        ids.push(r.msg_id());
    }
    let files = std::fs::read_dir(dir.path().join("commitlog"))
        .unwrap()
        .count();
    assert!(files > 5, "expected many CommitLog segments, found {files}");
    let mut seen = 0;
    for q in 0..3 {
        let mut offset = 0;
        loop {
            let r = store
                .get_messages("T", q, offset, 32, 1 << 20, None)
                .unwrap();
            if r.status != GetStatus::Found {
                assert_eq!(r.status, GetStatus::OffsetOverflowOne);
                break;
            }
            for (k, v) in iter_records(&r.body, true).enumerate() {
                let v = v.unwrap();
                assert_eq!(v.queue_id, q);
                assert_eq!(v.queue_offset, offset + k as i64);
                let i = v.queue_offset as usize * 3 + q as usize;
                assert!(v.body.starts_with(format!("message-{i:05}").as_bytes()));
                assert_eq!(v.offset_msg_id(), ids[i]);
            }
            seen += r.message_count;
            offset = r.next_begin_offset;
        }
    }
    assert_eq!(seen, 2000);
    // Records are readable by offsetMsgId too.
    let rec = store.look_message_by_id(&ids[1234]).unwrap().unwrap();
    assert!(RecordView::parse(&rec, true)
        .unwrap()
        .body
        .starts_with(b"message-01234"));
}

#[test]
fn statuses_match_rocketmq() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    assert_eq!(
        store
            .get_messages("T", 0, 0, 32, 1 << 20, None)
            .unwrap()
            .status,
        GetStatus::NoMatchedLogicQueue
    );
    for i in 0..5 {
        store
            .put_message(&meta("T", 0), format!("{i}").as_bytes(), "TAGS\u{1}TagA")
            .unwrap();
    }
    let r = store.get_messages("T", 0, 5, 32, 1 << 20, None).unwrap();
    assert_eq!(
        (r.status, r.next_begin_offset),
        (GetStatus::OffsetOverflowOne, 5)
    );
    let r = store.get_messages("T", 0, 9, 32, 1 << 20, None).unwrap();
    assert_eq!(
        (r.status, r.next_begin_offset),
        (GetStatus::OffsetOverflowBadly, 5)
    );
    let r = store.get_messages("T", 0, 0, 2, 1 << 20, None).unwrap();
    assert_eq!(
        (r.status, r.message_count, r.next_begin_offset),
        (GetStatus::Found, 2, 2)
    );
    let tag_b = [java_string_hash("TagB")];
    let r = store
        .get_messages("T", 0, 0, 32, 1 << 20, Some(&tag_b))
        .unwrap();
    assert_eq!(
        (r.status, r.next_begin_offset),
        (GetStatus::NoMatchedMessage, 5)
    );
    // The byte limit stops a batch, but the first message always goes.
    let r = store.get_messages("T", 0, 0, 32, 1, None).unwrap();
    assert_eq!(r.message_count, 1);
}

#[test]
fn tag_filter_uses_the_tags_code() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    for i in 0..30 {
        let tag = ["TagA", "TagB", "Order_Created"][i % 3];
        store
            .put_message(
                &meta("T", 0),
                format!("{i}").as_bytes(),
                &format!("TAGS\u{1}{tag}"),
            )
            .unwrap();
    }
    store.put_message(&meta("T", 0), b"untagged", "").unwrap();
    let codes = [java_string_hash("TagA"), java_string_hash("Order_Created")];
    let r = store
        .get_messages("T", 0, 0, 100, 1 << 20, Some(&codes))
        .unwrap();
    assert_eq!(r.message_count, 20);
    for v in iter_records(&r.body, true) {
        let tag = v.unwrap().property("TAGS").unwrap().to_string();
        assert!(tag == "TagA" || tag == "Order_Created");
    }
    // Counted from the consume queue alone, clipped to what the queue holds.
    assert_eq!(store.count_units("T", 0, 0, 100, Some(&codes)).unwrap(), 20);
    assert_eq!(store.count_units("T", 0, 3, 9, Some(&codes)).unwrap(), 4);
    assert_eq!(store.count_units("T", 0, 0, 100, None).unwrap(), 31);
    assert_eq!(store.count_units("T", 1, 0, 100, None).unwrap(), 0);
    // The unit on disk carries the sign-extended hash.
    let cq = std::fs::read(dir.path().join("consumequeue/T/0/00000000000000000000")).unwrap();
    let unit2 = &cq[2 * 20..3 * 20];
    assert_eq!(
        i64::from_be_bytes(unit2[12..20].try_into().unwrap()),
        tags_code(Some("Order_Created"))
    );
}

#[test]
fn query_by_key_and_uniq_key() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    for i in 0..300 {
        let keys = format!("order-{} user-{}", i % 10, i);
        store
            .put_message(
                &meta("Orders", 0),
                format!("{i}").as_bytes(),
                &props("T", &keys, &format!("ID{i}")),
            )
            .unwrap();
        store
            .put_message(
                &meta("Other", 0),
                b"x",
                &props("T", "order-1", &format!("O{i}")),
            )
            .unwrap();
    }
    let found = store
        .query_by_key("Orders", "order-3", 100, 0, i64::MAX)
        .unwrap();
    assert_eq!(found.len(), 30);
    for rec in &found {
        let v = RecordView::parse(rec, true).unwrap();
        assert_eq!(v.topic, "Orders");
        assert_eq!(
            v.property("KEYS").unwrap().split(' ').next(),
            Some("order-3")
        );
    }
    assert_eq!(
        store
            .query_by_key("Orders", "order-3", 5, 0, i64::MAX)
            .unwrap()
            .len(),
        5
    );
    let one = store
        .query_by_key("Orders", "ID77", 10, 0, i64::MAX)
        .unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(RecordView::parse(&one[0], true).unwrap().body, b"77");
    assert!(
        store
            .query_by_key("Orders", "user-5", 10, 0, 1)
            .unwrap()
            .is_empty(),
        "time range applies"
    );
    assert!(store
        .query_by_key("Orders", "nope", 10, 0, i64::MAX)
        .unwrap()
        .is_empty());
}

#[test]
fn index_rolls_to_a_new_file_when_full() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config(dir.path());
    cfg.max_index_num = 50;
    let store = MessageStore::open(cfg).unwrap();
    for i in 0..200 {
        store
            .put_message(&meta("T", 0), b"x", &format!("KEYS\u{1}k{}", i % 7))
            .unwrap();
    }
    let files = std::fs::read_dir(dir.path().join("index")).unwrap().count();
    assert!(files >= 4, "index files: {files}");
    let hits = store.query_by_key("T", "k3", 1000, 0, i64::MAX).unwrap();
    assert_eq!(hits.len(), (0..200).filter(|i| i % 7 == 3).count());
}

#[test]
fn delayed_message_goes_to_schedule_topic_with_deliver_time() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let r = store
        .put_message(&meta("Real", 2), b"later", "DELAY\u{1}3\u{2}TAGS\u{1}TagA")
        .unwrap();
    assert_eq!((r.topic.as_str(), r.queue_id), (SCHEDULE_TOPIC, 2));
    let r99 = store
        .put_message(&meta("Real", 1), b"clamped", "DELAY\u{1}99")
        .unwrap();
    assert_eq!(r99.queue_id, 17);
    let got = store
        .get_messages(SCHEDULE_TOPIC, 2, 0, 1, 1 << 20, None)
        .unwrap();
    let v = RecordView::parse(&got.body, true).unwrap();
    assert_eq!(v.property("REAL_TOPIC"), Some("Real"));
    assert_eq!(v.property("REAL_QID"), Some("2"));
    assert_eq!(v.property("TAGS"), Some("TagA"));
    let cq = std::fs::read(
        dir.path()
            .join("consumequeue/SCHEDULE_TOPIC_XXXX/2/00000000000000000000"),
    )
    .unwrap();
    let code = i64::from_be_bytes(cq[12..20].try_into().unwrap());
    assert_eq!(
        code,
        r.store_timestamp + 10_000,
        "tags code is the deliver time (level 3 = 10s)"
    );
    let got = store
        .get_messages(SCHEDULE_TOPIC, 17, 0, 1, 1 << 20, None)
        .unwrap();
    let v = RecordView::parse(&got.body, true).unwrap();
    assert_eq!(v.property("DELAY"), Some("18"));
    assert_eq!(store.max_offset_in_queue("Real", 2).unwrap(), 0);
}

#[test]
fn prepared_and_rollback_records_get_no_queue_unit() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let mut m = meta("Tx", 0);
    m.sys_flag = sysflag::TRANSACTION_PREPARED_TYPE;
    let half = store.put_message(&m, b"half", "KEYS\u{1}kp").unwrap();
    assert_eq!(half.queue_offset, 0);
    m.sys_flag = sysflag::TRANSACTION_ROLLBACK_TYPE;
    store.put_message(&m, b"rb", "KEYS\u{1}kr").unwrap();
    m.sys_flag = sysflag::TRANSACTION_COMMIT_TYPE;
    m.prepared_transaction_offset = half.physical_offset;
    let commit = store.put_message(&m, b"commit", "KEYS\u{1}kc").unwrap();
    assert_eq!(commit.queue_offset, 0);
    assert_eq!(store.max_offset_in_queue("Tx", 0).unwrap(), 1);
    let r = store.get_messages("Tx", 0, 0, 10, 1 << 20, None).unwrap();
    assert_eq!(bodies(&r), vec![b"commit".to_vec()]);
    assert_eq!(
        store
            .query_by_key("Tx", "kp", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        1,
        "prepared is indexed"
    );
    assert!(
        store
            .query_by_key("Tx", "kr", 10, 0, i64::MAX)
            .unwrap()
            .is_empty(),
        "rollback is not"
    );
    assert!(store.read_message(half.physical_offset).unwrap().is_some());
}

#[test]
fn batch_is_one_unit_in_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let payload = vec![7u8; 1000];
    let props: Vec<String> = (0..40)
        .map(|i| format!("TAGS\u{1}B\u{2}KEYS\u{1}b{i}"))
        .collect();
    let items: Vec<BatchItem> = props
        .iter()
        .enumerate()
        .map(|(i, p)| BatchItem {
            flag: i as i32,
            body: &payload,
            properties: p,
        })
        .collect();
    let mut first = Vec::new();
    for _ in 0..5 {
        let r = store.put_messages(&meta("B", 0), &items).unwrap();
        let file_of = |o: i64| o / (64 * 1024);
        assert!(r
            .physical_offsets
            .iter()
            .all(|o| file_of(*o) == file_of(r.physical_offsets[0])));
        first.push(r.first_queue_offset);
    }
    assert_eq!(first, vec![0, 40, 80, 120, 160]);
    let r = store.get_messages("B", 0, 40, 100, 1 << 22, None).unwrap();
    assert_eq!(r.message_count, 100);
    let v: Vec<_> = iter_records(&r.body, true)
        .map(|v| v.unwrap().flag)
        .collect();
    assert_eq!(v[..3], [0, 1, 2]);
    assert_eq!(
        store
            .query_by_key("B", "b39", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        5
    );
}

#[test]
fn bad_input_gets_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config(dir.path());
    cfg.max_message_size = 1024;
    let store = MessageStore::open(cfg).unwrap();
    assert!(matches!(
        store.put_message(&meta("T", 0), &[0; 1025], ""),
        Err(StoreError::MessageTooLarge { .. })
    ));
    assert!(matches!(
        store.put_message(&meta("bad topic", 0), b"x", ""),
        Err(StoreError::InvalidTopic { .. })
    ));
    let long = "K\u{1}".to_string() + &"v".repeat(40_000);
    assert!(matches!(
        store.put_message(&meta("T", 0), b"x", &long),
        Err(StoreError::PropertiesTooLarge(_))
    ));
    assert!(matches!(
        store.look_message_by_id("nonsense"),
        Err(StoreError::InvalidArgument(_))
    ));
    assert_eq!(store.read_message(12345).unwrap(), None);
    assert!(matches!(
        MessageStore::open(small_config(dir.path())),
        Err(StoreError::Locked(_))
    ));
    // The store keeps working after every refusal.
    store.put_message(&meta("T", 0), b"ok", "").unwrap();
}

#[test]
fn timestamps_and_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let mut times = Vec::new();
    for i in 0..10 {
        times.push(
            store
                .put_message(&meta("T", 0), format!("{i}").as_bytes(), "")
                .unwrap()
                .store_timestamp,
        );
        std::thread::sleep(Duration::from_millis(3));
    }
    assert_eq!(store.offset_by_time("T", 0, times[4]).unwrap(), 4);
    assert_eq!(store.offset_by_time("T", 0, 0).unwrap(), 0);
    assert_eq!(store.offset_by_time("T", 0, i64::MAX).unwrap(), 10);
    assert_eq!(store.earliest_store_time("T", 0).unwrap(), Some(times[0]));
    assert_eq!(store.store_time("T", 0, 9).unwrap(), Some(times[9]));
    let q = store.queues().unwrap();
    assert_eq!(
        (q[0].topic.as_str(), q[0].min_offset, q[0].max_offset),
        ("T", 0, 10)
    );
}

fn fill(store: &MessageStore, n: usize) -> Vec<(i64, String)> {
    (0..n)
        .map(|i| {
            let r = store
                .put_message(
                    &meta("R", (i % 2) as i32),
                    format!("body-{i}").as_bytes(),
                    &props("A", &format!("key{i}"), &format!("u{i}")),
                )
                .unwrap();
            (r.physical_offset, r.msg_id())
        })
        .collect()
}

#[test]
fn clean_restart_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = MessageStore::open(small_config(dir.path())).unwrap();
        fill(&store, 700);
        store.close().unwrap();
    }
    assert!(!dir.path().join("abort").exists());
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    assert!(!store.recovery_report().abnormal_exit);
    assert_eq!(store.max_offset_in_queue("R", 0).unwrap(), 350);
    assert_eq!(store.max_offset_in_queue("R", 1).unwrap(), 350);
    let r = store.put_message(&meta("R", 0), b"after", "").unwrap();
    assert_eq!(r.queue_offset, 350);
    assert_eq!(
        store
            .query_by_key("R", "key699", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        1
    );
}

/// Simulates a crash: the store is leaked (no clean close), then the tail is torn by hand.
#[test]
fn torn_tail_is_truncated_and_queues_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let written = {
        let store = MessageStore::open(small_config(dir.path())).unwrap();
        let w = fill(&store, 500);
        store.flush().unwrap();
        std::mem::forget(store); // no close: the abort file stays
        w
    };
    assert!(dir.path().join("abort").exists());
    // Tear the last record in half and lose one consume queue entirely.
    let (last_off, _) = *written.last().unwrap();
    let seg = last_off / (64 * 1024) * (64 * 1024);
    let path = dir.path().join(format!("commitlog/{seg:020}"));
    let f = OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(&[0xAB; 20], (last_off - seg + 30) as u64)
        .unwrap();
    std::fs::remove_dir_all(dir.path().join("consumequeue/R/1")).unwrap();
    let _ = std::fs::remove_file(dir.path().join("lock"));

    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let rep = store.recovery_report().clone();
    assert!(rep.abnormal_exit);
    assert!(rep.truncated_bytes > 0);
    assert_eq!(rep.commitlog_end, last_off as u64);
    // Queue 1 was rebuilt from the CommitLog, minus the torn record (number 499, queue 1).
    assert_eq!(store.max_offset_in_queue("R", 1).unwrap(), 249);
    assert_eq!(store.max_offset_in_queue("R", 0).unwrap(), 250);
    let mut got = 0;
    let mut off = 0;
    while let Ok(r) = store.get_messages("R", 1, off, 32, 1 << 20, None) {
        if r.message_count == 0 {
            break;
        }
        got += r.message_count;
        off = r.next_begin_offset;
    }
    assert_eq!(got, 249);
    // New appends continue where the valid data ended.
    let r = store.put_message(&meta("R", 1), b"new", "").unwrap();
    assert_eq!((r.queue_offset, r.physical_offset), (249, last_off));
    assert_eq!(
        store
            .query_by_key("R", "key498", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn read_only_view_sees_a_consistent_prefix_while_writing() {
    let dir = tempfile::tempdir().unwrap();
    let writer = MessageStore::open(small_config(dir.path())).unwrap();
    fill(&writer, 100);
    let mut ro_cfg = small_config(dir.path());
    ro_cfg.read_only = true;
    let reader = MessageStore::open(ro_cfg.clone()).unwrap();
    assert!(matches!(
        reader.put_message(&meta("R", 0), b"x", ""),
        Err(StoreError::ReadOnly)
    ));
    let r = reader.get_messages("R", 0, 0, 1000, 1 << 24, None).unwrap();
    assert_eq!(r.message_count, 50);
    // The view maps whole files; its CommitLog end is where the records end, also while the
    // writer preallocated the next file.
    assert_eq!(reader.max_physical_offset(), writer.max_physical_offset());
    fill(&writer, 300);
    assert_eq!(reader.max_physical_offset(), writer.max_physical_offset());
    let r = reader
        .get_messages("R", 0, 50, 1000, 1 << 24, None)
        .unwrap();
    assert_eq!(r.message_count, 150, "new units and segments are picked up");
    assert_eq!(
        reader
            .query_by_key("R", "key7", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        2
    );
    let mut bad = small_config(&dir.path().join("nope"));
    bad.read_only = true;
    assert!(matches!(
        MessageStore::open(bad),
        Err(StoreError::NotAStore(_))
    ));
}

#[test]
fn sync_flush_acks_after_disk_and_hides_unflushed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = small_config(dir.path());
    cfg.flush_disk_type = FlushDiskType::Sync;
    let store = std::sync::Arc::new(MessageStore::open(cfg).unwrap());
    let mut handles = Vec::new();
    for t in 0..8 {
        let s = store.clone();
        handles.push(std::thread::spawn(move || {
            for i in 0..50 {
                let r = s
                    .put_message(&meta("S", t), format!("{i}").as_bytes(), "")
                    .unwrap();
                assert!(s.wait_flushed(r.end_offset(), s.sync_flush_timeout()));
                assert!(s.flushed_physical_offset() as u64 >= r.end_offset());
            }
        }));
    }
    for h in handles {
        h.join().unwrap();
    }
    for t in 0..8 {
        assert_eq!(store.max_offset_in_queue("S", t).unwrap(), 50);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let r = store.put_message(&meta("S", 0), b"cb", "").unwrap();
    store.notify_flushed(
        r.end_offset(),
        Duration::from_secs(5),
        Box::new(move |ok| tx.send(ok).unwrap()),
    );
    assert!(rx.recv_timeout(Duration::from_secs(5)).unwrap());
}

#[test]
fn read_range_walks_records() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    fill(&store, 50);
    let (bytes, next) = store.read_range(0, 1 << 20).unwrap();
    let n = iter_records(&bytes, true).count();
    assert_eq!(n, 50);
    assert_eq!(next, store.max_physical_offset());
    let (one, next1) = store.read_range(0, 1).unwrap();
    assert_eq!(iter_records(&one, true).count(), 1);
    assert_eq!(next1 as usize, one.len());
}

#[test]
fn files_half_created_by_a_crash_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = MessageStore::open(small_config(dir.path())).unwrap();
        fill(&store, 10);
        store.close().unwrap();
    }
    // What a kill during creation leaves: a short file under the temporary name.
    let stale = dir.path().join("commitlog/00000000000000065536.creating");
    std::fs::write(&stale, b"").unwrap();
    let stale_cq = dir
        .path()
        .join("consumequeue/R/0/00000000000000002000.creating");
    std::fs::write(&stale_cq, b"").unwrap();
    // No background preallocation here: it would legitimately be creating that same segment.
    let mut cfg = small_config(dir.path());
    cfg.warm_mapped_file_enable = false;
    let store = MessageStore::open(cfg).unwrap();
    assert!(!stale.exists() && !stale_cq.exists());
    assert_eq!(store.max_offset_in_queue("R", 0).unwrap(), 5);
    fill(&store, 500); // rolls over into new files normally
    assert_eq!(store.max_offset_in_queue("R", 0).unwrap(), 255);
}

#[test]
fn due_delayed_messages_are_delivered_to_their_real_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let mut stored = Vec::new();
    for i in 0..5 {
        let props = format!("DELAY\u{1}2\u{2}TAGS\u{1}T{i}\u{2}KEYS\u{1}d{i}");
        stored.push(
            store
                .put_message(&meta("Real", 3), format!("{i}").as_bytes(), &props)
                .unwrap(),
        );
    }
    let due = stored[0].store_timestamp + 5000; // level 2 = 5 s
    let early = store.deliver_due_delayed(2, 0, due - 1, 100).unwrap();
    assert!(early.delivered.is_empty());
    assert_eq!((early.next_offset, early.next_due), (0, Some(due)));
    let r = store
        .deliver_due_delayed(2, 0, stored[4].store_timestamp + 5000, 3)
        .unwrap();
    assert_eq!(r.delivered.len(), 3);
    assert_eq!(r.next_offset, 3);
    let r2 = store
        .deliver_due_delayed(2, 3, stored[4].store_timestamp + 5000, 100)
        .unwrap();
    assert_eq!(
        (r2.delivered.len(), r2.next_offset, r2.next_due),
        (2, 5, None)
    );
    let d = &r2.delivered[1];
    assert_eq!(
        (d.topic.as_str(), d.queue_id, d.queue_offset),
        ("Real", 3, 4)
    );
    assert_eq!(d.tags_code, tags_code(Some("T4")));
    let got = store.get_messages("Real", 3, 0, 10, 1 << 20, None).unwrap();
    let msgs: Vec<_> = iter_records(&got.body, true).map(|v| v.unwrap()).collect();
    assert_eq!(msgs.len(), 5);
    assert_eq!(msgs[2].body, b"2");
    // As Apache RocketMQ 4.9.7 stores it: the schedule record's properties, DELAY included.
    assert_eq!(msgs[2].property("DELAY"), Some("2"));
    assert_eq!(msgs[2].property("WAIT"), None);
    assert_eq!(msgs[2].property("REAL_TOPIC"), Some("Real"));
    assert_eq!(msgs[2].born_timestamp, 1_700_000_000_000);
    assert_eq!(
        store
            .query_by_key("Real", "d2", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        1
    );
    assert!(store.deliver_due_delayed(99, 0, 0, 1).is_err());
}

/// Bytes of disk the files under `dir` take (allocated blocks, not their apparent length).
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            disk_usage(&entry.path())
        } else {
            meta.blocks() * 512
        };
    }
    total
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn default_sized_files_take_disk_only_ahead_of_the_writer() {
    const MIB: u64 = 1024 * 1024;
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(StoreConfig::new(dir.path())).unwrap();
    for i in 0..1000 {
        store
            .put_message(
                &meta("T", i % 4),
                &[b'x'; 1024],
                &props("TagA", &format!("k{i}"), &format!("U{i}")),
            )
            .unwrap();
    }
    let commitlog = dir.path().join("commitlog");
    wait_for("the next CommitLog file is preallocated", || {
        std::fs::read_dir(&commitlog)
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().len() == 20)
            .count()
            == 2
    });
    // Files keep RocketMQ's lengths (a Java broker maps them as they are)...
    for entry in std::fs::read_dir(&commitlog).unwrap().flatten() {
        assert_eq!(entry.metadata().unwrap().len(), 1 << 30);
    }
    // ...but only the warm windows of the two CommitLog files (32 MiB each), the index's hash
    // slots (20 MB) and reservation steps take disk: 2.6 GB before files were sparse.
    let used = disk_usage(dir.path());
    assert!(used < 100 * MIB, "{used} bytes of disk for 1000 messages");
    assert!(
        used > 20 * MIB,
        "{used}: the index's hash slots are reserved"
    );
    let r = store.get_messages("T", 3, 0, 1000, 1 << 24, None).unwrap();
    assert_eq!(r.message_count, 250);
    assert_eq!(
        store
            .query_by_key("T", "k999", 10, 0, i64::MAX)
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn appends_cross_reservation_steps_and_windows() {
    // 8 MiB CommitLog files reserve in 128 KiB steps and warm 1 MiB ahead; 600 KB consume-queue
    // files and a 2000-slot index reserve in 64 KiB steps.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(dir.path());
    cfg.mapped_file_size_commitlog = 8 * 1024 * 1024;
    cfg.mapped_file_size_consume_queue = 30_000 * 20;
    cfg.max_hash_slot_num = 2000;
    cfg.max_index_num = 20_000;
    let store = MessageStore::open(cfg.clone()).unwrap();
    let body = vec![b'y'; 3000];
    for i in 0..8000 {
        store
            .put_message(&meta("S", 0), &body, &props("T", &format!("k{i}"), ""))
            .unwrap();
    }
    drop(store);
    let store = MessageStore::open(cfg).unwrap();
    let mut offset = 0;
    while offset < 8000 {
        let r = store
            .get_messages("S", 0, offset, 1000, 1 << 26, None)
            .unwrap();
        assert!(r.message_count > 0, "stuck at {offset}");
        for b in bodies(&r) {
            assert_eq!(b, body);
        }
        offset += r.message_count as i64;
    }
    assert_eq!(offset, 8000);
    for k in [0, 4321, 7999] {
        let key = format!("k{k}");
        assert_eq!(
            store
                .query_by_key("S", &key, 10, 0, i64::MAX)
                .unwrap()
                .len(),
            1,
            "{key}"
        );
    }
}

/// The values of a binary-view column, resolved the way an Arrow reader resolves them.
fn view_values(c: &ferromq_store::columnar::ViewColumn) -> Vec<Vec<u8>> {
    c.views
        .chunks(16)
        .map(|v| {
            let len = i32::from_le_bytes(v[..4].try_into().unwrap()) as usize;
            if len <= 12 {
                return v[4..4 + len].to_vec();
            }
            let buffer = i32::from_le_bytes(v[8..12].try_into().unwrap()) as usize;
            let at = i32::from_le_bytes(v[12..16].try_into().unwrap()) as usize;
            let value = match buffer {
                0 => c.owned[at..at + len].to_vec(),
                i => {
                    let (file, lent) = &c.mapped[i - 1];
                    assert!(at + len <= *lent, "a view past the bytes lent");
                    file.slice(at, len).unwrap().to_vec()
                }
            };
            assert_eq!(&value[..4], &v[4..8], "the view's prefix");
            value
        })
        .collect()
}

#[test]
fn column_reads_with_body_views_point_into_the_commitlog_and_survive_its_deletion() {
    use ferromq_store::columnar::ColumnFilter;
    use std::io::Write;

    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    let mut expected = Vec::new();
    for i in 0..600 {
        // Short bodies (held in the view itself), long ones, and zlib-compressed ones (inflated,
        // so copied), across many 64 KiB CommitLog files.
        let body = format!("b{i}-{}", "y".repeat(i % 200 * 10)).into_bytes();
        let mut m = meta("V", 0);
        let stored = if i % 7 == 3 {
            m.sys_flag |= sysflag::COMPRESSED;
            let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
            z.write_all(&body).unwrap();
            z.finish().unwrap()
        } else {
            body.clone()
        };
        store
            .put_message(&m, &stored, &props("T", "k", "u"))
            .unwrap();
        expected.push(body);
    }
    let read = |body_views: bool| {
        let filter = ColumnFilter {
            include_properties: true,
            body_views,
            ..Default::default()
        };
        store
            .read_columns("V", 0, 0, 600, 1000, 1 << 30, None, filter)
            .unwrap()
            .0
    };
    let copies = read(false);
    let views = read(true);
    assert_eq!(views.rows, 600);
    assert_eq!(views.body_bytes, copies.body_bytes);
    assert!(
        views.body.data.is_empty(),
        "no body copied into the plain column"
    );
    let c = views.body_views.as_ref().unwrap();
    assert!(
        c.mapped.len() > 5,
        "views into many files, got {}",
        c.mapped.len()
    );
    let compressed_bytes: usize = (0..600)
        .filter(|i| i % 7 == 3)
        .map(|i| expected[i].len())
        .sum();
    assert!(
        c.owned.len() <= compressed_bytes,
        "only inflated bodies are copied"
    );
    assert_eq!(view_values(c), expected);

    // Retention deletes the files; the views keep them mapped.
    store.put_message(&meta("V", 1), b"later", "").unwrap();
    drop(store);
    for f in std::fs::read_dir(dir.path().join("commitlog")).unwrap() {
        std::fs::remove_file(f.unwrap().path()).unwrap();
    }
    assert_eq!(view_values(c), expected);
}
