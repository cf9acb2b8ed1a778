//! Consumer offsets (`config/consumerOffset.json`'s table): `topic@group` -> queue -> offset.
//!
//! One table, shared by the plane (its pulls commit, its pops read and move offsets) and Python
//! (through the binding: every other commit, queries, persistence, replication), so an offset a
//! pop moved on a plane thread is the one the next request sees, wherever it is served.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};

use dashmap::DashMap;

/// The table's shards, each behind its own lock. A pass over the whole table (a mass lite expiry,
/// a persist) holds one shard at a time: at a million lite topics a shard is about 4,000 keys,
/// so the commits and queries of the plane's pops and acks wait milliseconds, not the pass (one
/// lock held 1M keys for 1.8 s).
const SHARDS: usize = 256;

/// Queue id -> committed offset.
pub type QueueOffsets = HashMap<i32, i64>;

#[derive(Debug)]
pub struct ConsumerOffsets {
    table: DashMap<String, QueueOffsets>,
    /// Changed since the last [`ConsumerOffsets::take_dirty`] (persistence skips a clean table).
    dirty: AtomicBool,
}

impl Default for ConsumerOffsets {
    fn default() -> ConsumerOffsets {
        ConsumerOffsets {
            table: DashMap::with_shard_amount(SHARDS),
            dirty: AtomicBool::new(false),
        }
    }
}

/// The table's key of a group's offsets in a topic, as Java's ConsumerOffsetManager writes it.
pub fn key(topic: &str, group: &str) -> String {
    format!("{topic}@{group}")
}

/// The topic of a table key (before its first `@`; the whole key when it has none).
fn topic_of(key: &str) -> &str {
    key.split_once('@').map_or(key, |(t, _)| t)
}

impl ConsumerOffsets {
    pub fn new() -> ConsumerOffsets {
        ConsumerOffsets::default()
    }

    pub fn commit(&self, group: &str, topic: &str, queue_id: i32, offset: i64) {
        let key = key(topic, group);
        self.table.entry(key).or_default().insert(queue_id, offset);
        self.dirty.store(true, Ordering::Release);
    }

    /// The committed offset, or -1.
    pub fn query(&self, group: &str, topic: &str, queue_id: i32) -> i64 {
        self.table
            .get(key(topic, group).as_str())
            .and_then(|q| q.get(&queue_id).copied())
            .unwrap_or(-1)
    }

    /// Replaces the offsets of one `topic@group` (a slave taking its master's, a load).
    pub fn put_all(&self, key: String, queues: QueueOffsets) {
        self.table.insert(key, queues);
        self.dirty.store(true, Ordering::Release);
    }

    /// Every `topic@group` whose topic is `topic` goes.
    pub fn remove_topic(&self, topic: &str) {
        self.remove_where(|k| topic_of(k) == topic);
    }

    /// Every `topic@group` whose topic is one of `topics` goes, one shard at a time.
    pub fn remove_topics(&self, topics: &HashSet<String>) {
        if !topics.is_empty() {
            self.remove_where(|k| topics.contains(topic_of(k)));
        }
    }

    /// Every `topic@group` whose group is `group` goes (a group deleted with its offsets).
    pub fn remove_group(&self, group: &str) {
        self.remove_where(|k| k.rsplit_once('@').is_some_and(|(_, g)| g == group));
    }

    /// The keys `gone` picks go, one shard at a time; the table is dirty if any went.
    fn remove_where(&self, gone: impl Fn(&str) -> bool) {
        let mut removed = false;
        self.table.retain(|k, _| {
            let keep = !gone(k);
            removed |= !keep;
            keep
        });
        if removed {
            self.dirty.store(true, Ordering::Release);
        }
    }

    /// A copy of the whole table.
    pub fn snapshot(&self) -> Vec<(String, QueueOffsets)> {
        self.table
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect()
    }

    /// The table as `consumerOffset.json` holds it: `{"offsetTable": {"topic@group": {"0": 5}}}`,
    /// keys and queue ids in ascending order, indented by two spaces (the bytes Python's orjson
    /// writes for the same table with OPT_INDENT_2 | OPT_NON_STR_KEYS). Written here because a
    /// million lite topics' offsets took Python seconds to copy into dicts and sort; each shard's
    /// lock is held only for its copy.
    pub fn to_json(&self) -> Vec<u8> {
        // Copied into two flat buffers under the shards' locks: a million small copies (and their
        // frees, slower still in sorted order) took longer than writing the file.
        let mut keys = String::new();
        let mut queues: Vec<(i32, i64)> = Vec::new();
        // Each key's and its queues' ranges.
        let mut entries: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(self.table.len());
        for entry in self.table.iter() {
            let (key, offsets) = entry.pair();
            entries.push((keys.len(), key.len(), queues.len(), offsets.len()));
            keys.push_str(key);
            queues.extend(offsets.iter().map(|(id, o)| (*id, *o)));
        }
        let key_of = |e: &(usize, usize, usize, usize)| &keys[e.0..e.0 + e.1];
        entries.sort_unstable_by(|a, b| key_of(a).cmp(key_of(b)));
        let mut out = Vec::with_capacity(32 + keys.len() + entries.len() * 40 + queues.len() * 24);
        out.extend_from_slice(b"{\n  \"offsetTable\": {");
        let mut number = itoa::Buffer::new();
        for (i, entry) in entries.iter().enumerate() {
            out.extend_from_slice(if i == 0 { b"\n    " } else { b",\n    " });
            let key = key_of(entry);
            if key.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
                out.push(b'"');
                out.extend_from_slice(key.as_bytes());
                out.push(b'"');
            } else {
                // Escaped as serde_json (and orjson) escape a string.
                serde_json::to_writer(&mut out, key).expect("a string serializes");
            }
            out.extend_from_slice(b": {");
            let ids = &mut queues[entry.2..entry.2 + entry.3];
            ids.sort_unstable();
            for (j, (queue_id, offset)) in ids.iter().enumerate() {
                out.extend_from_slice(if j == 0 {
                    b"\n      \""
                } else {
                    b",\n      \""
                });
                out.extend_from_slice(number.format(*queue_id).as_bytes());
                out.extend_from_slice(b"\": ");
                out.extend_from_slice(number.format(*offset).as_bytes());
            }
            out.extend_from_slice(if ids.is_empty() { b"}" } else { b"\n    }" });
        }
        out.extend_from_slice(if entries.is_empty() {
            b"}\n}"
        } else {
            b"\n  }\n}"
        });
        out
    }

    /// Whether the table changed since the last call (and marks it clean).
    pub fn take_dirty(&self) -> bool {
        self.dirty.swap(false, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_queries_and_removes() {
        let t = ConsumerOffsets::new();
        assert_eq!(t.query("g", "T", 0), -1);
        t.commit("g", "T", 0, 5);
        t.commit("g", "T", 1, 7);
        t.commit("g", "T", 0, 6);
        t.commit("h", "U", 0, 1);
        assert_eq!(t.query("g", "T", 0), 6);
        assert_eq!(t.query("g", "T", 1), 7);
        assert!(t.take_dirty());
        assert!(!t.take_dirty());
        t.remove_topic("T");
        assert_eq!(t.query("g", "T", 0), -1);
        assert_eq!(t.query("h", "U", 0), 1);
        assert_eq!(t.snapshot().len(), 1);
        t.commit("g", "U", 0, 2);
        t.commit("g", "V", 0, 3);
        t.commit("g", "W", 0, 4);
        t.remove_topics(&["V".to_string(), "W".to_string(), "X".to_string()].into());
        assert_eq!((t.query("g", "V", 0), t.query("g", "W", 0)), (-1, -1));
        assert_eq!(t.query("g", "U", 0), 2);
        t.remove_group("h");
        assert_eq!(t.query("h", "U", 0), -1);
        assert_eq!(t.query("g", "U", 0), 2);
    }

    #[test]
    fn many_topics_go_and_the_others_stay() {
        let t = ConsumerOffsets::new();
        let n = 20 * SHARDS + 7;
        for i in 0..n {
            t.commit("g", &format!("L{i}"), 0, 1);
            t.commit("h", &format!("L{i}"), 0, 2);
        }
        t.commit("g", "Kept", 0, 3);
        t.take_dirty();
        t.remove_topics(&(0..n).map(|i| format!("L{i}")).collect());
        assert_eq!(t.snapshot().len(), 1);
        assert_eq!(t.query("g", "Kept", 0), 3);
        assert!(t.take_dirty());
        t.remove_topics(&["Gone".to_string()].into());
        assert!(!t.take_dirty(), "nothing removed: nothing to persist");
    }

    #[test]
    fn json_as_the_file_holds_it() {
        let t = ConsumerOffsets::new();
        assert_eq!(t.to_json(), b"{\n  \"offsetTable\": {}\n}");
        t.commit("g", "T", 1, 7);
        t.commit("g", "T", 0, 5);
        t.commit("a\"b", "%LMQ%$P$x", 0, -1);
        t.put_all("E@g".into(), QueueOffsets::new());
        let want = "{\n  \"offsetTable\": {\n    \"%LMQ%$P$x@a\\\"b\": {\n      \"0\": -1\n    },\n    \"E@g\": {},\n    \"T@g\": {\n      \"0\": 5,\n      \"1\": 7\n    }\n  }\n}";
        assert_eq!(String::from_utf8(t.to_json()).unwrap(), want);
        let parsed: serde_json::Value = serde_json::from_slice(&t.to_json()).unwrap();
        assert_eq!(parsed["offsetTable"]["T@g"]["1"], 7);
    }
}
