//! Consumer offsets (`config/consumerOffset.json`'s table): `topic@group` -> queue -> offset.
//!
//! One table, shared by the plane (its pulls commit, its pops read and move offsets) and Python
//! (through the binding: every other commit, queries, persistence, replication), so an offset a
//! pop moved on a plane thread is the one the next request sees, wherever it is served.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

/// Keys removed under one hold of the write lock (`remove_topics`).
const REMOVE_CHUNK: usize = 10_000;

/// Queue id -> committed offset.
pub type QueueOffsets = HashMap<i32, i64>;

#[derive(Debug, Default)]
pub struct ConsumerOffsets {
    table: RwLock<HashMap<String, QueueOffsets>>,
    /// Changed since the last [`ConsumerOffsets::take_dirty`] (persistence skips a clean table).
    dirty: AtomicBool,
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
        let mut table = self.table.write().unwrap();
        table.entry(key).or_default().insert(queue_id, offset);
        self.dirty.store(true, Ordering::Release);
    }

    /// The committed offset, or -1.
    pub fn query(&self, group: &str, topic: &str, queue_id: i32) -> i64 {
        let table = self.table.read().unwrap();
        table
            .get(key(topic, group).as_str())
            .and_then(|q| q.get(&queue_id).copied())
            .unwrap_or(-1)
    }

    /// Replaces the offsets of one `topic@group` (a slave taking its master's, a load).
    pub fn put_all(&self, key: String, queues: QueueOffsets) {
        self.table.write().unwrap().insert(key, queues);
        self.dirty.store(true, Ordering::Release);
    }

    /// Every `topic@group` whose topic is `topic` goes.
    pub fn remove_topic(&self, topic: &str) {
        let mut table = self.table.write().unwrap();
        table.retain(|k, _| topic_of(k) != topic);
        self.dirty.store(true, Ordering::Release);
    }

    /// Every `topic@group` whose topic is one of `topics` goes. The keys are found under the read
    /// lock, then removed REMOVE_CHUNK at a time under the write lock and freed after it: a
    /// million lite topics expiring held every commit (the plane's pops and acks) for 1.8 s
    /// when the whole table was retained under the write lock.
    pub fn remove_topics(&self, topics: &HashSet<String>) {
        if topics.is_empty() {
            return;
        }
        let keys: Vec<String> = {
            let table = self.table.read().unwrap();
            table
                .keys()
                .filter(|k| topics.contains(topic_of(k)))
                .cloned()
                .collect()
        };
        for chunk in keys.chunks(REMOVE_CHUNK) {
            let removed: Vec<_> = {
                let mut table = self.table.write().unwrap();
                chunk.iter().filter_map(|k| table.remove_entry(k)).collect()
            };
            if !removed.is_empty() {
                self.dirty.store(true, Ordering::Release);
            }
        }
    }

    /// Every `topic@group` whose group is `group` goes (a group deleted with its offsets).
    pub fn remove_group(&self, group: &str) {
        let mut table = self.table.write().unwrap();
        table.retain(|k, _| k.rsplit_once('@').is_none_or(|(_, g)| g != group));
        self.dirty.store(true, Ordering::Release);
    }

    /// A copy of the whole table.
    pub fn snapshot(&self) -> Vec<(String, QueueOffsets)> {
        let table = self.table.read().unwrap();
        table.iter().map(|(k, q)| (k.clone(), q.clone())).collect()
    }

    /// The table as `consumerOffset.json` holds it: `{"offsetTable": {"topic@group": {"0": 5}}}`,
    /// keys and queue ids in ascending order, indented by two spaces (the bytes Python's orjson
    /// writes for the same table with OPT_INDENT_2 | OPT_NON_STR_KEYS). Written here because a
    /// million lite topics' offsets took Python seconds to copy into dicts and sort; the lock is
    /// held only for the copy.
    pub fn to_json(&self) -> Vec<u8> {
        // Copied into two flat buffers under the lock: a million small copies (and their frees,
        // slower still in sorted order) took longer than writing the file.
        let mut keys = String::new();
        let mut queues: Vec<(i32, i64)> = Vec::new();
        let mut entries: Vec<(usize, usize, usize, usize)> = Vec::new(); // key's and queues' ranges
        {
            let table = self.table.read().unwrap();
            entries.reserve(table.len());
            for (key, offsets) in table.iter() {
                entries.push((keys.len(), key.len(), queues.len(), offsets.len()));
                keys.push_str(key);
                queues.extend(offsets.iter().map(|(id, o)| (*id, *o)));
            }
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
    fn many_topics_go_in_chunks_and_the_others_stay() {
        let t = ConsumerOffsets::new();
        let n = 2 * REMOVE_CHUNK + 7;
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
