//! Pops waiting for a message (long polling) on the plane, by topic: the remoting pops and the
//! gRPC front's receives that found nothing. A message stored in one of a waiter's topics, by the
//! plane or by Python, wakes it; it then pops again.
//!
//! A waiter is registered before its pop looks, and a wake-up that comes before it waits is kept
//! (a `Notify` permit): a message stored between the look and the wait is not missed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Pops that may wait on the plane at once (remoting pops and the gRPC front's receives).
pub const MAX_WAITING_POPS: usize = 10_000;

/// A waiting pop looks again this often even when nothing woke it (every message stored wakes
/// it; this is for what stores nothing, an offset reset), as Python's held pulls do.
const LOOK_AGAIN: Duration = Duration::from_secs(5);
/// A wait with less than this left ends with the last look (as Python's `wait_for_pop`).
const LAST_LOOK: Duration = Duration::from_millis(50);

/// A waiter's id and what wakes it.
type Waiter = (u64, Arc<Notify>);

/// The waiting pops, by topic.
#[derive(Default)]
pub(crate) struct PopWaits {
    count: AtomicUsize,
    next_id: AtomicU64,
    table: Mutex<HashMap<String, Vec<Waiter>>>,
}

impl PopWaits {
    /// Pops waiting now.
    pub(crate) fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Registers a waiter on `topics` until the returned guard is dropped; None when
    /// [`MAX_WAITING_POPS`] wait already (each holds its request until answered: the caller
    /// leaves the pop to Python, whose in-flight bound stops reading a peer that adds more).
    pub(crate) fn register(self: &Arc<Self>, topics: Vec<String>) -> Option<PopWait> {
        if self.len() >= MAX_WAITING_POPS {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let notify = Arc::new(Notify::new());
        {
            let mut table = self.table.lock().unwrap();
            for topic in &topics {
                table
                    .entry(topic.clone())
                    .or_default()
                    .push((id, notify.clone()));
            }
        }
        self.count.fetch_add(1, Ordering::AcqRel);
        Some(PopWait {
            waits: self.clone(),
            id,
            topics,
            notify,
        })
    }

    /// A message was stored in `topic`: its waiters pop again.
    pub(crate) fn wake(&self, topic: &str) {
        if self.len() == 0 {
            return;
        }
        if let Some(waiters) = self.table.lock().unwrap().get(topic) {
            for (_, notify) in waiters {
                notify.notify_one();
            }
        }
    }

    /// Every waiter looks again (what the plane serves changed).
    pub(crate) fn wake_all(&self) {
        if self.len() == 0 {
            return;
        }
        for waiters in self.table.lock().unwrap().values() {
            for (_, notify) in waiters {
                notify.notify_one();
            }
        }
    }

    fn remove(&self, id: u64, topics: &[String]) {
        let mut table = self.table.lock().unwrap();
        for topic in topics {
            if let Some(waiters) = table.get_mut(topic) {
                waiters.retain(|(w, _)| *w != id);
                if waiters.is_empty() {
                    table.remove(topic);
                }
            }
        }
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One waiting pop; dropping it ends the wait.
pub struct PopWait {
    waits: Arc<PopWaits>,
    id: u64,
    topics: Vec<String>,
    notify: Arc<Notify>,
}

impl PopWait {
    /// Returns once a message was stored in one of the topics since the last return (or since
    /// the registration).
    pub async fn stored(&self) {
        self.notify.notified().await;
    }

    /// After a look that found nothing: waits until a message is stored in the topics,
    /// LOOK_AGAIN passes or `deadline` comes, for the next look. False, at once, when less than
    /// LAST_LOOK is left before `deadline`: the look before was the last.
    pub async fn look_again(&self, deadline: Instant) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        if left <= LAST_LOOK {
            return false;
        }
        let _ = tokio::time::timeout(left.min(LOOK_AGAIN), self.stored()).await;
        true
    }

    /// Whether `deadline` leaves time for another look after this one.
    pub fn more_looks(deadline: Instant) -> bool {
        deadline > Instant::now() + LAST_LOOK
    }
}

impl Drop for PopWait {
    fn drop(&mut self) {
        self.waits.remove(self.id, &self.topics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_message_stored_before_the_wait_is_not_missed() {
        let waits = Arc::new(PopWaits::default());
        let wait = waits
            .register(vec!["T".into(), "%RETRY%g_T".into()])
            .unwrap();
        waits.wake("other");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), wait.stored())
                .await
                .is_err(),
            "another topic's message wakes nobody"
        );
        waits.wake("%RETRY%g_T"); // before the waiter waits
        tokio::time::timeout(Duration::from_secs(5), wait.stored())
            .await
            .expect("the kept wake-up");
        assert_eq!(waits.len(), 1);
        drop(wait);
        assert_eq!(waits.len(), 0);
        assert!(waits.table.lock().unwrap().is_empty());
        waits.wake("T"); // nobody waits: nothing to do
    }

    #[test]
    fn the_waits_are_bounded() {
        let waits = Arc::new(PopWaits::default());
        let held: Vec<PopWait> = (0..MAX_WAITING_POPS)
            .map(|_| waits.register(vec!["T".into()]).unwrap())
            .collect();
        assert!(waits.register(vec!["T".into()]).is_none());
        drop(held);
        assert!(waits.register(vec!["T".into()]).is_some());
    }
}
