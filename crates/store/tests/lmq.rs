//! Light message queues through the store: records naming `%LMQ%...` queues in
//! INNER_MULTI_DISPATCH get their offset in each at append and are read back from them; the
//! queues survive a clean restart, a crash (no close, journal cut) and their deletion, and take
//! no consume-queue directory.

mod common;

use common::{meta, small_config};
use ferromq_store::lmq::{INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET};
use ferromq_store::message::{get_property, RecordView};
use ferromq_store::{MessageStore, StoreConfig};

const A: &str = "%LMQ%$Parent$a";
const B: &str = "%LMQ%$Parent$b";

fn config(root: &std::path::Path) -> StoreConfig {
    let mut c = small_config(root);
    c.enable_lmq = true;
    c.enable_multi_dispatch = true;
    c
}

fn props(lmqs: &str) -> String {
    format!("{INNER_MULTI_DISPATCH}\u{1}{lmqs}\u{2}WAIT\u{1}true")
}

/// Bodies of LMQ `name` from offset 0, with each record's INNER_MULTI_QUEUE_OFFSET.
fn read(store: &MessageStore, name: &str) -> Vec<(String, String)> {
    let r = store.get_messages(name, 0, 0, 64, 1 << 20, None).unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < r.body.len() {
        let v = RecordView::parse(&r.body[at..], true).unwrap();
        out.push((
            String::from_utf8(v.body.to_vec()).unwrap(),
            get_property(v.properties, INNER_MULTI_QUEUE_OFFSET)
                .unwrap()
                .to_string(),
        ));
        at += v.total_size();
    }
    out
}

#[test]
fn records_join_their_lmqs_at_the_offsets_they_carry() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    store
        .put_message(&meta("Parent", 0), b"a0", &props(A))
        .unwrap();
    store
        .put_message(&meta("Parent", 0), b"ab", &props(&format!("{A},{B}")))
        .unwrap();
    store
        .put_message(&meta("Parent", 0), b"b1", &props(B))
        .unwrap();
    store
        .put_message(&meta("Parent", 0), b"plain", "TAGS\u{1}x")
        .unwrap();
    assert_eq!(
        read(&store, A),
        [("a0".into(), "0".into()), ("ab".into(), "1,0".into())]
    );
    assert_eq!(
        read(&store, B),
        [("ab".into(), "1,0".into()), ("b1".into(), "1".into())]
    );
    assert_eq!(store.max_offset_in_queue(A, 0).unwrap(), 2);
    assert_eq!(store.max_offset_in_queue("Parent", 0).unwrap(), 4);
    assert_eq!(store.lmq_count().unwrap(), 2);
    let infos = store.lmq_infos("%LMQ%$Parent$").unwrap();
    assert_eq!(
        infos
            .iter()
            .map(|i| (i.name.as_str(), i.max_offset))
            .collect::<Vec<_>>(),
        [(A, 2), (B, 2)]
    );
    // WAIT is dropped as Java's LmqDispatch drops it; no consume queue per LMQ.
    let r = store.get_messages(A, 0, 0, 1, 1 << 20, None).unwrap();
    let v = RecordView::parse(&r.body, true).unwrap();
    assert_eq!(get_property(v.properties, "WAIT"), None);
    assert!(!dir.path().join("consumequeue").join(A).exists());
    assert!(store.queues().unwrap().iter().all(|q| q.topic == "Parent"));
    // Deleted, an LMQ is gone; its records stay in the parent's queue.
    store.delete_topic(B).unwrap();
    assert_eq!(store.lmq_count().unwrap(), 1);
    assert_eq!(store.max_offset_in_queue(B, 0).unwrap(), 0);
    store.close().unwrap();

    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(read(&store, A).len(), 2);
    assert_eq!(store.lmq_count().unwrap(), 1);
    store
        .put_message(&meta("Parent", 0), b"a2", &props(A))
        .unwrap();
    assert_eq!(read(&store, A)[2], ("a2".into(), "2".into()));
}

#[test]
fn without_enable_lmq_the_property_is_kept_and_nothing_dispatched() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    store
        .put_message(&meta("Parent", 0), b"a0", &props(A))
        .unwrap();
    assert_eq!(store.lmq_count().unwrap(), 0);
    assert!(!dir.path().join("lmq").exists());
}

#[test]
fn a_crash_loses_no_lmq_unit() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = MessageStore::open(config(dir.path())).unwrap();
        for i in 0..300 {
            let lmq = if i % 3 == 0 { A } else { B };
            store
                .put_message(
                    &meta("Parent", i % 2),
                    format!("m{i}").as_bytes(),
                    &props(lmq),
                )
                .unwrap();
        }
        store.flush().unwrap();
        std::mem::forget(store); // no close: the abort file stays
    }
    // The journal lost its last records (as an OS crash could leave it): recovery dispatches
    // them again from the CommitLog.
    let journal = dir.path().join("lmq/journal");
    let len = std::fs::metadata(&journal).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap()
        .set_len(len / 2 + 7)
        .unwrap();
    let _ = std::fs::remove_file(dir.path().join("lock"));
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert!(store.recovery_report().abnormal_exit);
    assert_eq!(store.max_offset_in_queue(A, 0).unwrap(), 100);
    assert_eq!(store.max_offset_in_queue(B, 0).unwrap(), 200);
    let a = read(&store, A);
    assert_eq!(a.len(), 64);
    assert!(a
        .iter()
        .enumerate()
        .all(|(i, (body, offset))| { *body == format!("m{}", i * 3) && *offset == i.to_string() }));
    // And reads from the middle of a queue.
    let r = store.get_messages(B, 0, 150, 8, 1 << 20, None).unwrap();
    assert_eq!(r.queue_offsets, (150..158).collect::<Vec<_>>());
}

#[test]
fn a_put_names_the_lmqs_it_dispatched_to_with_their_next_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let put = |props: &str| {
        store
            .put_message(&meta("Parent", 0), b"m", props)
            .unwrap()
            .lmq_arrivals
    };
    assert_eq!(put(&props(A)), [(A.to_string(), 1)]);
    assert_eq!(put(&props(A)), [(A.to_string(), 2)]);
    assert_eq!(
        put(&props(&format!("{A},{B}"))),
        [(A.to_string(), 3), (B.to_string(), 1)]
    );
    assert!(put("TAGS\u{1}x").is_empty());
    // A name that is not an LMQ is not one the put arrived in.
    assert!(put(&props("NotLmq")).is_empty());

    // With multi-dispatch off, the record keeps its offsets but joins no LMQ: none arrives.
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.enable_multi_dispatch = false;
    let store = MessageStore::open(c).unwrap();
    let r = store
        .put_message(&meta("Parent", 0), b"m", &props(A))
        .unwrap();
    assert!(r.lmq_arrivals.is_empty());
    assert_eq!(store.max_offset_in_queue(A, 0).unwrap(), 0);
}
