//! Tiered storage's index of a sealed CommitLog file (`segment_index`): its units are the consume
//! queues' (queue offsets, CommitLog offsets, sizes, tags codes), transaction halves have none, and
//! its key entries name every KEYS word and UNIQ_KEY.

use ferromq_store::hash::{java_string_hash, tags_code};
use ferromq_store::message::sysflag;
use ferromq_store::segment_index::{index_segment_file, KEY_SIZE, UNIT_SIZE};
use ferromq_store::MessageStore;

mod common;
use common::{meta, small_config};

#[test]
fn units_and_keys_of_a_sealed_file_are_the_stores_own() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(small_config(dir.path())).unwrap();
    for i in 0..120 {
        let tags = ["A", "B", ""][i % 3];
        let props = format!("TAGS\u{1}{tags}\u{2}KEYS\u{1}k{i} shared\u{2}UNIQ_KEY\u{1}U{i}");
        store
            .put_message(
                &meta(["T1", "T2"][i % 2], (i % 4) as i32),
                &[b'x'; 900],
                &props,
            )
            .unwrap();
        if i == 5 {
            let mut half = meta("RMQ_SYS_TRANS_HALF_TOPIC", 0);
            half.sys_flag = sysflag::TRANSACTION_PREPARED_TYPE;
            store.put_message(&half, b"half", "KEYS\u{1}h").unwrap();
        }
    }
    store.flush().unwrap();
    let first = dir.path().join("commitlog").join(format!("{:020}", 0));
    let index = index_segment_file(&first, 0).unwrap();
    assert!(index.end > 0 && index.end <= 64 * 1024);
    assert!(
        index.min_store_timestamp > 0 && index.min_store_timestamp <= index.max_store_timestamp
    );
    assert!(index
        .runs
        .iter()
        .all(|r| r.topic != "RMQ_SYS_TRANS_HALF_TOPIC"));
    let mut records = 0;
    for run in &index.runs {
        let got = store
            .get_messages(
                &run.topic,
                run.queue_id,
                run.first,
                run.count,
                1 << 20,
                None,
            )
            .unwrap();
        assert_eq!(got.message_count, run.count, "{run:?}");
        let mut at = 0;
        for (i, q) in got.queue_offsets.iter().enumerate() {
            assert_eq!(*q, run.first + i as i64);
            let size = i32::from_be_bytes(got.body[at..at + 4].try_into().unwrap()) as usize;
            let rec =
                ferromq_store::message::RecordView::parse(&got.body[at..at + size], false).unwrap();
            let unit = &index.units[(run.unit_index + i) * UNIT_SIZE..][..UNIT_SIZE];
            assert_eq!(
                i64::from_be_bytes(unit[..8].try_into().unwrap()),
                rec.physical_offset
            );
            assert_eq!(
                i32::from_be_bytes(unit[8..12].try_into().unwrap()) as usize,
                size
            );
            let tags = ferromq_store::message::get_property(rec.properties, "TAGS");
            assert_eq!(
                i64::from_be_bytes(unit[12..].try_into().unwrap()),
                tags_code(tags)
            );
            at += size;
            records += 1;
        }
    }
    // Each record: its UNIQ_KEY and two KEYS words; the half: one.
    let keys: Vec<(i32, i64)> = index
        .keys
        .chunks(KEY_SIZE)
        .map(|k| {
            (
                i32::from_be_bytes(k[..4].try_into().unwrap()),
                i64::from_be_bytes(k[4..].try_into().unwrap()),
            )
        })
        .collect();
    assert_eq!(keys.len(), records * 3 + 1);
    assert!(keys.windows(2).all(|w| w[0] <= w[1]));
    let count = |key: &str| keys.iter().filter(|k| k.0 == java_string_hash(key)).count();
    assert_eq!(count("RMQ_SYS_TRANS_HALF_TOPIC#h"), 1);
    assert_eq!(count("T1#k0"), 1);
    assert_eq!(count("T2#shared"), records / 2);
}
