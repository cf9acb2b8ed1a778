//! Replication between two stores over a real loopback socket: the slave's CommitLog files end
//! up byte-identical to the master's, its consume queues equal, and SYNC_MASTER waiters are
//! released by the slave's reports.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferromq_store::ha::{HaConfig, HaMaster, HaSlave};
use ferromq_store::{GetStatus, MessageStore};

mod common;
use common::{meta, small_config};

fn ha_config() -> HaConfig {
    HaConfig {
        heartbeat_interval: Duration::from_millis(200),
        housekeeping_interval: Duration::from_secs(5),
        transfer_batch_size: 4000,
        ..Default::default()
    }
}

fn put(store: &MessageStore, n: usize, from: usize) -> u64 {
    let mut end = 0;
    for i in from..from + n {
        let body = format!("message-{i:05}-{}", "x".repeat(i % 500));
        let props = format!("TAGS\u{1}T{}\u{2}KEYS\u{1}k{i}", i % 3);
        end = store
            .put_message(&meta("Repl", (i % 4) as i32), body.as_bytes(), &props)
            .unwrap()
            .end_offset();
    }
    end
}

fn wait_until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn commitlog_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(root.join("commitlog"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().len() == 20)
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn queue_units(store: &MessageStore, topic: &str, q: i32) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut offset = store.min_offset_in_queue(topic, q).unwrap();
    loop {
        let r = store
            .get_messages(topic, q, offset, 32, 1 << 20, None)
            .unwrap();
        if r.status != GetStatus::Found {
            return out;
        }
        out.push(r.body);
        offset = r.next_begin_offset;
    }
}

#[test]
fn slave_copies_the_master_byte_for_byte_and_resumes() {
    let (mdir, sdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = Arc::new(MessageStore::open(small_config(mdir.path())).unwrap());
    let end = put(&master, 300, 0);
    let ha = HaMaster::start(
        master.replica_log().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        ha_config(),
    )
    .unwrap();
    let addr = ha.local_addr().to_string();
    {
        let slave_store = MessageStore::open(small_config(sdir.path())).unwrap();
        let slave = HaSlave::start(
            slave_store.replica_log().unwrap(),
            Some(addr.clone()),
            ha_config(),
        );
        // A new slave gets the master's last file from its start (RocketMQ's rule).
        let last_file_start = end - end % (64 * 1024);
        wait_until("the first catch-up", || {
            slave_store.max_physical_offset() as u64 == end
        });
        assert_eq!(slave_store.min_physical_offset() as u64, last_file_start);
        wait_until("the master to see the report", || ha.acked_offset() == end);
        slave.close();
        slave_store.close().unwrap();
    }
    // Restart the slave after more data, while SYNC_MASTER-style waiters are pending.
    let end2 = put(&master, 700, 300);
    let released = Arc::new(AtomicUsize::new(0));
    for _ in 0..5 {
        let r = released.clone();
        ha.notify_replicated(
            end2,
            Duration::from_secs(20),
            Box::new(move |ok| {
                assert!(ok);
                r.fetch_add(1, Ordering::SeqCst);
            }),
        );
    }
    let slave_store = MessageStore::open(small_config(sdir.path())).unwrap();
    let slave = HaSlave::start(slave_store.replica_log().unwrap(), Some(addr), ha_config());
    wait_until("the catch-up after restart", || {
        slave_store.max_physical_offset() as u64 == end2
    });
    wait_until("the waiters", || released.load(Ordering::SeqCst) == 5);
    assert!(ha.is_slave_ok(end2));
    master.flush().unwrap();
    slave_store.flush().unwrap();
    let (m, s) = (commitlog_files(mdir.path()), commitlog_files(sdir.path()));
    let first = &s[0].0;
    let m: Vec<_> = m.into_iter().filter(|(n, _)| n >= first).collect();
    assert_eq!(m.len(), s.len());
    for ((mn, mb), (sn, sb)) in m.iter().zip(&s) {
        assert_eq!(mn, sn);
        assert!(mb == sb, "CommitLog file {mn} differs");
    }
    // Every record the slave holds is in its queues, as on the master (built after the slave
    // reported the bytes: they may follow a moment later).
    wait_until("the slave's consume queues", || {
        (0..4).all(|q| {
            slave_store.max_offset_in_queue("Repl", q).unwrap()
                == master.max_offset_in_queue("Repl", q).unwrap()
        })
    });
    for q in 0..4 {
        let su = queue_units(&slave_store, "Repl", q);
        assert!(!su.is_empty());
        let mo = slave_store.min_offset_in_queue("Repl", q).unwrap();
        let r = master
            .get_messages("Repl", q, mo, 100_000, 1 << 30, None)
            .unwrap();
        assert!(
            su.concat() == r.body,
            "queue {q} from {mo} differs between slave and master"
        );
        assert_eq!(
            slave_store.max_offset_in_queue("Repl", q).unwrap(),
            master.max_offset_in_queue("Repl", q).unwrap()
        );
    }
    slave.close();
    ha.close();
}

#[test]
fn a_slave_ahead_of_its_master_is_refused() {
    let (mdir, sdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = MessageStore::open(small_config(mdir.path())).unwrap();
    put(&master, 10, 0);
    let slave_store = MessageStore::open(small_config(sdir.path())).unwrap();
    put(&slave_store, 50, 0);
    let ha = HaMaster::start(
        master.replica_log().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        ha_config(),
    )
    .unwrap();
    let before = slave_store.max_physical_offset();
    let slave = HaSlave::start(
        slave_store.replica_log().unwrap(),
        Some(ha.local_addr().to_string()),
        ha_config(),
    );
    // The master closes the connection after the report: the client is then between attempts.
    wait_until("the master's refusal", || {
        let st = slave.status();
        st.reported_offset > 0 && !st.connected
    });
    assert_eq!(slave_store.max_physical_offset(), before);
    assert_eq!(ha.acked_offset(), 0);
    slave.close();
    ha.close();
}

#[test]
fn different_bytes_stop_the_slave() {
    let (mdir, sdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = MessageStore::open(small_config(mdir.path())).unwrap();
    put(&master, 40, 0);
    // A slave store with other records, shorter than the master's log.
    let slave_store = MessageStore::open(small_config(sdir.path())).unwrap();
    let mut i = 0;
    while slave_store.max_physical_offset() < master.max_physical_offset() / 2 {
        slave_store
            .put_message(&meta("Other", 0), &vec![b'y'; 97 + i], "")
            .unwrap();
        i += 1;
    }
    let before = slave_store.max_physical_offset();
    let ha = HaMaster::start(
        master.replica_log().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        ha_config(),
    )
    .unwrap();
    let slave = HaSlave::start(
        slave_store.replica_log().unwrap(),
        Some(ha.local_addr().to_string()),
        ha_config(),
    );
    wait_until("the slave to give up", || slave.status().error.is_some());
    assert_eq!(slave_store.max_physical_offset(), before);
    slave.close();
    ha.close();
}

#[test]
fn a_former_master_cuts_its_log_and_follows_the_new_one() {
    let (adir, bdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = MessageStore::open(small_config(adir.path())).unwrap();
    let common = put(&a, 200, 0);
    let units: Vec<_> = (0..4)
        .map(|q| a.max_offset_in_queue("Repl", q).unwrap())
        .collect();
    // What the old master wrote alone, across a file boundary.
    let alone = put(&a, 300, 200);
    assert!(alone > common + 64 * 1024);
    let log = a.replica_log().unwrap();
    assert!(log.truncate_to(common + 1).is_err(), "not a record start");
    log.truncate_to(common).unwrap();
    assert_eq!(a.max_physical_offset() as u64, common);
    for (q, max) in units.iter().enumerate() {
        assert_eq!(a.max_offset_in_queue("Repl", q as i32).unwrap(), *max);
    }
    // The new master (same first 200 messages, then its own) streams to it.
    let b = MessageStore::open(small_config(bdir.path())).unwrap();
    assert_eq!(put(&b, 200, 0), common);
    let b_end = put(&b, 50, 1000);
    let ha = HaMaster::start(
        b.replica_log().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        ha_config(),
    )
    .unwrap();
    let slave = HaSlave::start(log, Some(ha.local_addr().to_string()), ha_config());
    wait_until("the catch-up", || a.max_physical_offset() as u64 == b_end);
    assert!(slave.status().error.is_none());
    // Same units: the cut queues continue with the new master's records (the slave builds its
    // queues after it reports the bytes, so they may follow a moment later).
    wait_until("the same consume queues", || {
        (0..4).all(|q| {
            a.max_offset_in_queue("Repl", q).unwrap() == b.max_offset_in_queue("Repl", q).unwrap()
        })
    });
    slave.close();
    ha.close();
}

#[test]
fn acknowledged_only_once_every_required_slave_reported() {
    let (mdir, sdir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let master = MessageStore::open(small_config(mdir.path())).unwrap();
    let ha = HaMaster::start(
        master.replica_log().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        ha_config(),
    )
    .unwrap();
    // A required replica that never connects holds every acknowledgement back.
    ha.set_ack_peers(Some(vec!["127.0.0.1:1".to_string()]));
    let slave_store = MessageStore::open(small_config(sdir.path())).unwrap();
    let slave = HaSlave::start(
        slave_store.replica_log().unwrap(),
        Some(ha.local_addr().to_string()),
        ha_config(),
    );
    let end = put(&master, 50, 0);
    ha.notify_appended();
    wait_until("the slave's copy", || {
        slave_store.max_physical_offset() as u64 == end
    });
    wait_until("the master to see the slave", || {
        ha.slaves().iter().any(|(_, off, _)| *off == end)
    });
    assert_eq!(ha.acked_offset(), 0);
    let peer = slave.status().local_addr.unwrap();
    assert_eq!(ha.slaves()[0].0, peer);
    ha.set_ack_peers(Some(vec![peer]));
    assert_eq!(ha.acked_offset(), end);
    slave.close();
    ha.close();
}

#[test]
fn a_cut_log_opens_again() {
    // The file the warmer prepared after the old end must not survive the cut (a gap on disk).
    let dir = tempfile::tempdir().unwrap();
    let common = {
        let a = MessageStore::open(small_config(dir.path())).unwrap();
        let common = put(&a, 100, 0);
        put(&a, 400, 100);
        a.replica_log().unwrap().truncate_to(common).unwrap();
        a.close().unwrap();
        common
    };
    let a = MessageStore::open(small_config(dir.path())).unwrap();
    assert_eq!(a.max_physical_offset() as u64, common);
}
