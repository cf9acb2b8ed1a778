//! The table of pulls held until a message they may take is stored (long polling), by topic
//! and queue.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use ferromq_store::MessageStore;

use crate::conn::Conn;
use crate::tags::TagFilter;

/// A queue's max offset, by topic and queue id.
pub(crate) type MaxOffset<'a> = &'a dyn Fn(&str, i32) -> i64;

/// A pull waiting for messages.
pub(crate) struct Held {
    pub(crate) conn: Arc<Conn>,
    /// The request, for Python when the read after the hold needs it (an offset to correct).
    pub(crate) frame: Vec<u8>,
    pub(crate) opaque: i32,
    pub(crate) group: String,
    pub(crate) topic: String,
    pub(crate) queue_id: i32,
    pub(crate) offset: i64,
    pub(crate) max_msgs: usize,
    pub(crate) filter: TagFilter,
    pub(crate) deadline: Instant,
    pub(crate) arrived_at: Instant,
    pub(crate) store: Arc<MessageStore>,
}

/// Held pulls by topic and queue.
#[derive(Default)]
pub(crate) struct Holds {
    count: AtomicUsize,
    table: Mutex<HashMap<String, HashMap<i32, Vec<Held>>>>,
}

impl Holds {
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    pub(crate) fn add(&self, held: Held) {
        let mut table = self.table.lock().unwrap();
        table
            .entry(held.topic.clone())
            .or_default()
            .entry(held.queue_id)
            .or_default()
            .push(held);
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// Takes the pulls of `(topic, queue_id)` selected by `wake`.
    fn take_where(&self, topic: &str, queue_id: i32, wake: impl Fn(&Held) -> bool) -> Vec<Held> {
        if self.len() == 0 {
            return Vec::new();
        }
        let mut table = self.table.lock().unwrap();
        let Some(queues) = table.get_mut(topic) else {
            return Vec::new();
        };
        let Some(pulls) = queues.get_mut(&queue_id) else {
            return Vec::new();
        };
        let (woken, waiting): (Vec<Held>, Vec<Held>) =
            std::mem::take(pulls).into_iter().partition(|p| wake(p));
        *pulls = waiting;
        if pulls.is_empty() {
            queues.remove(&queue_id);
            if queues.is_empty() {
                table.remove(topic);
            }
        }
        self.count.fetch_sub(woken.len(), Ordering::AcqRel);
        woken
    }

    /// The pulls a message stored in `(topic, queue_id)` (the queue's next offset now
    /// `next_offset`, its tags code `tags_code` or None for unknown) may satisfy.
    pub(crate) fn arrived(
        &self,
        topic: &str,
        queue_id: i32,
        next_offset: i64,
        tags_code: Option<i64>,
    ) -> Vec<Held> {
        self.take_where(topic, queue_id, |p| {
            next_offset > p.offset && p.filter.may_take(tags_code)
        })
    }

    /// Pulls past their deadline, and with `max_offset` those whose queue has grown past them.
    pub(crate) fn due(&self, now: Instant, max_offset: Option<MaxOffset<'_>>) -> Vec<Held> {
        let mut table = self.table.lock().unwrap();
        let mut woken = Vec::new();
        for (topic, queues) in table.iter_mut() {
            for (queue_id, pulls) in queues.iter_mut() {
                let max = max_offset.map(|f| f(topic, *queue_id));
                let (due, waiting): (Vec<Held>, Vec<Held>) = std::mem::take(pulls)
                    .into_iter()
                    .partition(|p| p.deadline <= now || max.is_some_and(|m| m > p.offset));
                *pulls = waiting;
                woken.extend(due);
            }
            queues.retain(|_, pulls| !pulls.is_empty());
        }
        table.retain(|_, queues| !queues.is_empty());
        self.count.fetch_sub(woken.len(), Ordering::AcqRel);
        woken
    }

    /// Forgets the pulls held for a connection that closed.
    pub(crate) fn drop_conn(&self, conn: u64) {
        if self.len() == 0 {
            return;
        }
        let mut table = self.table.lock().unwrap();
        let mut dropped = 0;
        for queues in table.values_mut() {
            for pulls in queues.values_mut() {
                let before = pulls.len();
                pulls.retain(|p| p.conn.id != conn);
                dropped += before - pulls.len();
            }
            queues.retain(|_, pulls| !pulls.is_empty());
        }
        table.retain(|_, queues| !queues.is_empty());
        self.count.fetch_sub(dropped, Ordering::AcqRel);
    }

    pub(crate) fn take_all(&self) -> Vec<Held> {
        let mut table = self.table.lock().unwrap();
        let all: Vec<Held> = std::mem::take(&mut *table)
            .into_values()
            .flat_map(HashMap::into_values)
            .flatten()
            .collect();
        self.count.fetch_sub(all.len(), Ordering::AcqRel);
        all
    }
}
