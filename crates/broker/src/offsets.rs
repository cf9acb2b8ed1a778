//! Consumer offsets (`config/consumerOffset.json`'s table): `topic@group` -> queue -> offset.
//!
//! One table, shared by the plane (its pulls commit, its pops read and move offsets) and Python
//! (through the binding: every other commit, queries, persistence, replication), so an offset a
//! pop moved on a plane thread is the one the next request sees, wherever it is served.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::RwLock;

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
        table.retain(|k, _| k.split_once('@').map_or(k.as_str(), |(t, _)| t) != topic);
        self.dirty.store(true, Ordering::Release);
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
        t.remove_group("h");
        assert_eq!(t.query("h", "U", 0), -1);
        assert_eq!(t.query("g", "U", 0), 2);
    }
}
