//! Timer messages through the store: a send with a timer request waits in the timer topic, the
//! timer takes it into its wheel and puts it back into its real topic once its slot has passed,
//! across a clean close and a crash.

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{meta, small_config};
use ferromq_store::message::{parse_properties, RecordView};
use ferromq_store::send::Rewrite;
use ferromq_store::{MessageStore, StoreConfig, StoreError};

const TIMER_TOPIC: &str = "rmq_sys_wheel_timer";

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn config(root: &std::path::Path) -> StoreConfig {
    let mut c = small_config(root);
    c.timer_precision_ms = 100;
    c.mapped_file_size_timer_log = 4096;
    c
}

fn send(store: &MessageStore, props: &str) -> ferromq_store::PutResult {
    store
        .send(&meta("T", 1), b"timed", props, &Rewrite::STORE)
        .unwrap()
}

/// Properties of the messages of `topic` queue `qid` from `offset` on.
fn read(store: &MessageStore, topic: &str, qid: i32, offset: i64) -> Vec<Vec<(String, String)>> {
    let got = store
        .get_messages(topic, qid, offset, 1000, 1 << 20, None)
        .unwrap();
    let mut out = Vec::new();
    let mut at = 0;
    while at < got.body.len() {
        let v = RecordView::parse(&got.body[at..], false).unwrap();
        at += v.bytes.len();
        out.push(
            parse_properties(v.properties)
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    out
}

fn prop<'a>(props: &'a [(String, String)], name: &str) -> Option<&'a str> {
    props
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn a_timer_message_waits_in_the_wheel_and_comes_back_once_its_slot_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let deliver = now() + 60_000;
    let r = send(
        &store,
        &format!("TIMER_DELIVER_MS\u{1}{deliver}\u{2}UNIQ_KEY\u{1}U1"),
    );
    assert_eq!((r.topic.as_str(), r.queue_id), (TIMER_TOPIC, 0));
    let out_ms = deliver / 100 * 100 - if deliver % 100 == 0 { 100 } else { 0 };
    let waiting = read(&store, TIMER_TOPIC, 0, 0);
    assert_eq!(
        prop(&waiting[0], "TIMER_OUT_MS"),
        Some(&*out_ms.to_string())
    );
    assert_eq!(prop(&waiting[0], "REAL_TOPIC"), Some("T"));
    assert_eq!(prop(&waiting[0], "REAL_QID"), Some("1"));

    assert_eq!(store.timer_enqueue(100, true).unwrap().taken, 1);
    assert_eq!(store.timer_enqueue(100, true).unwrap().taken, 0);
    assert_eq!(store.timer_stats().unwrap().pending, 1);
    // Not while its slot is current, nor a moment before it has passed.
    assert!(store
        .timer_dequeue(out_ms, 100)
        .unwrap()
        .delivered
        .is_empty());
    assert!(store
        .timer_dequeue(out_ms + 99, 100)
        .unwrap()
        .delivered
        .is_empty());
    assert!(read(&store, "T", 1, 0).is_empty());
    let d = store.timer_dequeue(out_ms + 100, 100).unwrap();
    assert_eq!(d.delivered.len(), 1);
    assert_eq!(
        (d.delivered[0].topic.as_str(), d.delivered[0].queue_id),
        ("T", 1)
    );
    let got = read(&store, "T", 1, 0);
    assert_eq!(got.len(), 1);
    let p = &got[0];
    assert_eq!(prop(p, "UNIQ_KEY"), Some("U1"));
    assert_eq!(prop(p, "TIMER_OUT_MS"), Some(&*out_ms.to_string()));
    assert!(prop(p, "TIMER_ENQUEUE_MS").is_some_and(|v| v.parse::<i64>().unwrap() <= now()));
    assert_eq!(
        prop(p, "TIMER_DEQUEUE_MS"),
        Some(&*(out_ms + 100).to_string())
    );
    // Delivered once only.
    assert!(store
        .timer_dequeue(out_ms + 10_000, 100)
        .unwrap()
        .delivered
        .is_empty());
    let stats = store.timer_stats().unwrap();
    assert_eq!((stats.delivered, stats.pending), (1, 0));
}

#[test]
fn a_message_due_by_the_time_it_is_enqueued_goes_back_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    send(&store, "TIMER_DELAY_MS\u{1}150");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut delivered = Vec::new();
    while delivered.is_empty() && Instant::now() < deadline {
        // Enqueued while still ahead, it waits in the wheel; else it is back at once.
        let e = store.timer_enqueue(10, true).unwrap();
        delivered.extend(e.delivered);
        delivered.extend(store.timer_dequeue(now(), 10).unwrap().delivered);
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(delivered.len(), 1);
    let got = read(&store, "T", 1, 0);
    assert_eq!(got.len(), 1);
}

#[test]
fn due_messages_come_back_in_send_order_across_calls_and_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let deliver = now() + 60_000;
    {
        let store = MessageStore::open(config(dir.path())).unwrap();
        for i in 0..150 {
            send(
                &store,
                &format!("TIMER_DELIVER_MS\u{1}{deliver}\u{2}KEYS\u{1}k{i}"),
            );
        }
        // A small log file size: the units cross several timer log files.
        assert_eq!(store.timer_enqueue(1000, true).unwrap().taken, 150);
        store.close().unwrap();
    }
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(store.timer_stats().unwrap().pending, 150);
    assert_eq!(store.timer_enqueue(1000, true).unwrap().taken, 0);
    let mut keys = Vec::new();
    for _ in 0..10 {
        let d = store.timer_dequeue(deliver + 100, 40).unwrap();
        keys.extend(d.delivered.iter().map(|d| d.queue_offset));
        if !d.more {
            break;
        }
    }
    assert_eq!(keys, (0..150).collect::<Vec<i64>>());
    let got = read(&store, "T", 1, 0);
    let order: Vec<_> = got
        .iter()
        .map(|p| prop(p, "KEYS").unwrap().to_string())
        .collect();
    assert_eq!(order, (0..150).map(|i| format!("k{i}")).collect::<Vec<_>>());
}

#[test]
fn after_a_crash_no_timer_is_lost_or_enqueued_twice() {
    let dir = tempfile::tempdir().unwrap();
    let deliver = now() + 60_000;
    {
        let store = MessageStore::open(config(dir.path())).unwrap();
        for i in 0..20 {
            send(
                &store,
                &format!("TIMER_DELIVER_MS\u{1}{}\u{2}KEYS\u{1}k{i}", deliver + i),
            );
        }
        store.timer_enqueue(10, true).unwrap();
        store.timer_checkpoint().unwrap();
        // Ten more enqueued after the checkpoint, then the process dies.
        store.timer_enqueue(10, true).unwrap();
        store.flush().unwrap();
        std::mem::forget(store);
    }
    let _ = std::fs::remove_file(dir.path().join("lock"));
    let store = MessageStore::open(config(dir.path())).unwrap();
    assert_eq!(
        store.timer_enqueue(100, true).unwrap().taken,
        0,
        "resumes after the newest unit"
    );
    let d = store.timer_dequeue(deliver + 1000, 100).unwrap();
    assert_eq!(d.delivered.len(), 20);
    assert_eq!(read(&store, "T", 1, 0).len(), 20);
}

#[test]
fn a_message_beyond_the_roll_window_is_rolled_then_delivered_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.timer_roll_window_slot = 3; // 300 ms at 100 ms a slot
    let store = MessageStore::open(c).unwrap();
    let deliver = now() + 1000;
    send(&store, &format!("TIMER_DELIVER_MS\u{1}{deliver}"));
    let out_ms = deliver / 100 * 100 - if deliver % 100 == 0 { 100 } else { 0 };
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut rolled = 0;
    let mut delivered_at = None;
    while delivered_at.is_none() && Instant::now() < deadline {
        store.timer_enqueue(10, true).unwrap();
        let t = now();
        let d = store.timer_dequeue(t, 10).unwrap();
        rolled += d.rolled;
        if !d.delivered.is_empty() {
            delivered_at = Some(t);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let at = delivered_at.expect("delivered");
    assert!(rolled >= 1, "waited in a nearer slot first");
    assert!(at >= out_ms + 100, "not early: {at} < {}", out_ms + 100);
    let got = read(&store, "T", 1, 0);
    assert_eq!(got.len(), 1);
    assert_eq!(
        prop(&got[0], "TIMER_ROLL_TIMES"),
        Some(&*rolled.to_string())
    );
}

#[test]
fn a_recall_in_the_same_slot_cancels_the_message() {
    let dir = tempfile::tempdir().unwrap();
    let store = MessageStore::open(config(dir.path())).unwrap();
    let deliver = now() + 60_000;
    send(
        &store,
        &format!("TIMER_DELIVER_MS\u{1}{deliver}\u{2}UNIQ_KEY\u{1}GONE"),
    );
    send(
        &store,
        &format!("TIMER_DELIVER_MS\u{1}{deliver}\u{2}UNIQ_KEY\u{1}KEPT"),
    );
    send(
        &store,
        &format!("TIMER_DELIVER_MS\u{1}{deliver}\u{2}TIMER_DEL_UNIQKEY\u{1}T+GONE"),
    );
    assert_eq!(store.timer_enqueue(10, true).unwrap().taken, 3);
    let d = store.timer_dequeue(deliver + 100, 10).unwrap();
    assert_eq!(d.delivered.len(), 1);
    let got = read(&store, "T", 1, 0);
    assert_eq!(prop(&got[0], "UNIQ_KEY"), Some("KEPT"));
    assert_eq!(store.timer_stats().unwrap().recalled, 1);
}

#[test]
fn a_store_without_the_wheel_refuses_timer_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.timer_wheel_enable = false;
    let store = MessageStore::open(c).unwrap();
    let e = store
        .send(
            &meta("T", 0),
            b"x",
            "TIMER_DELAY_SEC\u{1}5",
            &Rewrite::STORE,
        )
        .unwrap_err();
    assert!(matches!(e, StoreError::TimerDisabled), "{e}");
    assert!(matches!(
        store.timer_enqueue(1, true),
        Err(StoreError::TimerDisabled)
    ));
    assert!(!dir.path().join("timerwheel").exists());
}

#[test]
fn a_store_that_never_had_a_timer_message_has_no_timer_files() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = MessageStore::open(config(dir.path())).unwrap();
        send(&store, "KEYS\u{1}plain");
        assert_eq!(store.timer_enqueue(10, true).unwrap().taken, 0);
        assert!(store.timer_dequeue(now(), 10).unwrap().delivered.is_empty());
        store.timer_checkpoint().unwrap();
        assert_eq!(store.timer_stats().unwrap().pending, 0);
    }
    for name in ["timerwheel", "timerlog", "config/timercheck"] {
        assert!(!dir.path().join(name).exists(), "{name}");
    }
}

#[test]
fn a_slot_past_twice_the_congestion_limit_refuses_sends_due_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = config(dir.path());
    c.timer_congest_num_each_slot = 1;
    let store = MessageStore::open(c).unwrap();
    let deliver = now() + 60_000;
    let props = format!("TIMER_DELIVER_MS\u{1}{deliver}");
    for _ in 0..2 {
        send(&store, &props);
        store.timer_enqueue(10, true).unwrap();
    }
    // Two in the slot: twice the limit, every further send due in it is refused.
    let e = store
        .send(&meta("T", 1), b"x", &props, &Rewrite::STORE)
        .unwrap_err();
    assert!(
        matches!(e, StoreError::TimerFlowControl { limit: 1 }),
        "{e}"
    );
    assert!(e
        .to_string()
        .starts_with("timer message is under flow control, max num limit is 2"));
    // Another slot is free.
    let later = format!("TIMER_DELIVER_MS\u{1}{}", deliver + 10_000);
    assert_eq!(send(&store, &later).topic, TIMER_TOPIC);
}
