//! What the data plane's commands share with it and with Python: the events Python is woken
//! for, the statistics, the arrivals of messages (held pulls wait for them), the hold table,
//! and the plane's runtime and stop signal.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::holds::Holds;
use crate::pop_waits::PopWaits;
use crate::stats::PlaneStats;
use crate::wake::Wake;

/// Tags codes an arrival lists before it says "any" (held pulls check each against their filter).
const MAX_ARRIVAL_TAGS: usize = 16;

/// Per queue: (next offset, tags codes or None for any).
type ArrivalTable = HashMap<(String, i32), (i64, Option<Vec<i64>>)>;

/// (topic, queue id, next offset, tags codes or None for any).
pub type Arrival = (String, i32, i64, Option<Vec<i64>>);

/// What the plane does with a request it read.
pub(crate) enum Outcome {
    /// Answered here (or held here, to be answered here).
    Served,
    /// Handed to Python whole.
    Forward,
}

/// What Python is told, in order.
#[derive(Debug)]
pub enum Event {
    Open {
        conn: u64,
        peer: SocketAddr,
    },
    /// One or more whole frames of one connection.
    Data {
        conn: u64,
        bytes: Vec<u8>,
    },
    Closed {
        conn: u64,
        reason: &'static str,
    },
    /// The replies queued for `conn` went from over its bound to half of it (Python stopped
    /// answering its requests while they were over).
    Drained {
        conn: u64,
    },
}

pub(crate) struct Hub {
    started: Instant,
    wake: Wake,
    events: Mutex<Vec<Event>>,
    /// Upper bounds (ms) of the request latency buckets the broker's statistics keep.
    rpc_buckets_ms: Vec<f64>,
    pub(crate) holds: Holds,
    pub(crate) pop_waits: Arc<PopWaits>,
    runtime: tokio::runtime::Handle,
    stats: Mutex<PlaneStats>,
    /// Next offset of each queue a send stored into since Python last took them, and the tags
    /// codes stored (None: any, after a batch or too many to list).
    arrivals: Mutex<ArrivalTable>,
    /// Python holds pulls: arrivals wake it.
    watching: AtomicBool,
    stop: Notify,
    stopping: AtomicBool,
}

impl Hub {
    pub(crate) fn new(
        wake: Wake,
        runtime: tokio::runtime::Handle,
        rpc_buckets_ms: Vec<f64>,
    ) -> Hub {
        Hub {
            started: Instant::now(),
            wake,
            events: Mutex::new(Vec::new()),
            rpc_buckets_ms,
            holds: Holds::default(),
            pop_waits: Arc::default(),
            runtime,
            stats: Mutex::new(PlaneStats::default()),
            arrivals: Mutex::new(HashMap::new()),
            watching: AtomicBool::new(false),
            stop: Notify::new(),
            stopping: AtomicBool::new(false),
        }
    }

    /// Milliseconds since the plane started.
    pub(crate) fn now(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(crate) fn wake_fd(&self) -> i32 {
        self.wake.fd()
    }

    pub(crate) fn push(&self, event: Event) {
        let mut events = self.events.lock().unwrap();
        // Frames of one connection read together go to Python as one chunk.
        if let (
            Event::Data { conn, bytes },
            Some(Event::Data {
                conn: last,
                bytes: prev,
            }),
        ) = (&event, events.last_mut())
        {
            if conn == last {
                prev.extend_from_slice(bytes);
                drop(events);
                self.wake.signal();
                return;
            }
        }
        events.push(event);
        drop(events);
        self.wake.signal();
    }

    pub(crate) fn put_done(&self, topic: &str, messages: u64, bytes: u64, took: Duration) {
        self.stats
            .lock()
            .unwrap()
            .put(topic, messages, bytes, took.as_millis() as u64);
    }

    pub(crate) fn rpc_done(&self, request: i32, response: i32, took: Duration) {
        let ms = took.as_secs_f64() * 1e3;
        self.stats
            .lock()
            .unwrap()
            .rpc(request, response, ms, &self.rpc_buckets_ms);
    }

    pub(crate) fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        self.runtime.spawn(task);
    }

    /// Sleeps `period`; false when the plane stops first.
    pub(crate) async fn sleep_or_stop(&self, period: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(period) => true,
            _ = self.until_stopped() => false,
        }
    }

    pub(crate) fn got(
        &self,
        group: &str,
        topic: &str,
        queue_id: i32,
        r: &ferromq_store::GetResult,
    ) {
        self.stats.lock().unwrap().got(
            group,
            topic,
            queue_id,
            r.next_begin_offset,
            r.message_count as u64,
            r.body.len() as u64,
        );
    }

    /// Notes a stored message for Python (its held pulls, delayed delivery: `wake` signals at
    /// once).
    pub(crate) fn record_arrival(
        &self,
        topic: String,
        queue_id: i32,
        next_offset: i64,
        tags_code: Option<i64>,
        wake: bool,
    ) {
        {
            let mut a = self.arrivals.lock().unwrap();
            let (offset, tags) = a
                .entry((topic, queue_id))
                .or_insert_with(|| (next_offset, Some(Vec::new())));
            *offset = (*offset).max(next_offset);
            match (tags.as_mut(), tags_code) {
                (Some(list), Some(code)) if list.len() < MAX_ARRIVAL_TAGS => {
                    if !list.contains(&code) {
                        list.push(code);
                    }
                }
                (Some(list), Some(code)) if list.contains(&code) => {}
                _ => *tags = None,
            }
        }
        if wake || self.watching.load(Ordering::Acquire) {
            self.wake.signal();
        }
    }

    pub(crate) async fn until_stopped(&self) {
        let notified = self.stop.notified();
        if !self.stopping.load(Ordering::Acquire) {
            notified.await;
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Tells every task to end.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        self.stop.notify_waiters();
    }

    /// The events queued since the last call.
    pub(crate) fn take_events(&self) -> Vec<Event> {
        self.wake.clear();
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    pub(crate) fn take_arrivals(&self) -> Vec<Arrival> {
        let taken = std::mem::take(&mut *self.arrivals.lock().unwrap());
        taken
            .into_iter()
            .map(|((t, q), (o, tags))| (t, q, o, tags))
            .collect()
    }

    pub(crate) fn is_watching(&self) -> bool {
        self.watching.load(Ordering::Acquire)
    }

    pub(crate) fn set_watching(&self, on: bool) {
        self.watching.store(on, Ordering::Release);
    }

    pub(crate) fn take_stats(&self) -> PlaneStats {
        std::mem::take(&mut *self.stats.lock().unwrap())
    }
}
