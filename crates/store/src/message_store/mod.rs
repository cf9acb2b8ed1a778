//! `MessageStore`: the CommitLog, its ConsumeQueues and IndexFiles, kept consistent.
//!
//! Every put runs under one lock: encode into the CommitLog mapping, then dispatch the
//! ConsumeQueue unit and index entries. Dispatch is synchronous, so a unit never points at
//! bytes that are not written, and the next queue offset is simply the queue's max offset.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::checkpoint::{Checkpoint, StoreLock};

mod append;
mod batch;
mod columns;
mod read;
mod recovery;
mod replica;
mod retention;
mod schedule;
mod services;
mod space;
mod timer;

use self::batch::BatchLimit;
use crate::columnar::{ColumnBatch, ColumnBuilder, ColumnFilter};
use crate::commitlog::CommitLog;
use crate::config::{FlushDiskType, StoreConfig};
use crate::consume_queue::{round_file_size, ConsumeQueue, Unit, Units};
use crate::error::{io_err, Result, StoreError};
use crate::flush::{FlushCallback, FlushSignal};
use crate::hash::tags_code;
use crate::index::IndexService;
use crate::lmq::{self, LmqInfo, Lmqs};
use crate::mapped_file::MappedFile;
use crate::message::{
    self, get_property, host_sysflag, normalize_host, offset_msg_id, property, record_len, sysflag,
    DispatchProperties, MessageMeta, Placement, RecordView,
};
use crate::send::{self, BatchItem, Rewrite};
pub use replica::ReplicaLog;
pub use retention::{
    disk_used_ratio, CleanInput, CleanReport, RetentionStats, DELETE_FILES_BATCH_MAX,
    MAX_MANUAL_DELETE_FILE_TIMES,
};
pub use schedule::{DeliverResult, Delivered};
pub use space::{SpaceStatus, SPACE_CHECK_INTERVAL_MS};
pub use timer::{TimerDequeued, TimerEnqueued, TimerStats};

pub use crate::send::SCHEDULE_TOPIC;

/// The most body bytes a columnar read reserves up front (address space, see
/// [`ColumnBuilder::with_capacity`]).
const MAX_RESERVED_BODY_BYTES: usize = 256 << 20;

/// RocketMQ's `GetMessageStatus`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetStatus {
    Found,
    NoMatchedMessage,
    MessageWasRemoving,
    OffsetFoundNull,
    OffsetOverflowBadly,
    OffsetOverflowOne,
    OffsetTooSmall,
    NoMatchedLogicQueue,
    NoMessageInQueue,
}

impl GetStatus {
    pub fn name(&self) -> &'static str {
        match self {
            GetStatus::Found => "FOUND",
            GetStatus::NoMatchedMessage => "NO_MATCHED_MESSAGE",
            GetStatus::MessageWasRemoving => "MESSAGE_WAS_REMOVING",
            GetStatus::OffsetFoundNull => "OFFSET_FOUND_NULL",
            GetStatus::OffsetOverflowBadly => "OFFSET_OVERFLOW_BADLY",
            GetStatus::OffsetOverflowOne => "OFFSET_OVERFLOW_ONE",
            GetStatus::OffsetTooSmall => "OFFSET_TOO_SMALL",
            GetStatus::NoMatchedLogicQueue => "NO_MATCHED_LOGIC_QUEUE",
            GetStatus::NoMessageInQueue => "NO_MESSAGE_IN_QUEUE",
        }
    }
}

#[derive(Debug, Clone)]
pub struct GetResult {
    pub status: GetStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
    /// The stored records, back to back, exactly as they are on disk.
    pub body: Vec<u8>,
    pub message_count: usize,
    /// Queue offset of each returned record.
    pub queue_offsets: Vec<i64>,
    /// The last record read lies so far behind the CommitLog's end that it is read from disk
    /// (a pull's `accessMessageInMemoryMaxRatio`; Java's `suggestPullingFromSlave`).
    pub suggest_pulling_from_slave: bool,
}

/// The consume-queue filter of a read: units whose tags code (low 32 bits) is listed, or all.
fn accepts_tags(tag_codes: Option<&[i32]>) -> impl Fn(i64) -> bool + '_ {
    move |code| tag_codes.is_none_or(|codes| codes.contains(&(code as i32)))
}

/// What a queue walk hands each accepted record to: its bytes, in a read-only view the record
/// already parsed (the walk checks it against its unit), and its queue offset.
type Visitor<'v> = dyn FnMut(&[u8], Option<&RecordView>, i64) + 'v;

/// Where a queue walk ended (a [`GetResult`] without the records).
#[derive(Debug, Clone, Copy)]
pub struct Scan {
    pub status: GetStatus,
    pub next_begin_offset: i64,
    pub min_offset: i64,
    pub max_offset: i64,
}

impl Scan {
    /// The walk of a queue the store does not have.
    const NO_QUEUE: Scan = Scan {
        status: GetStatus::NoMatchedLogicQueue,
        next_begin_offset: 0,
        min_offset: 0,
        max_offset: 0,
    };
}

#[derive(Debug, Clone)]
pub struct PutResult {
    /// Where the message went (a delayed message lands in `SCHEDULE_TOPIC_XXXX`).
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub physical_offset: i64,
    pub wrote_bytes: usize,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    /// False when the stored `WAIT` property is `false`: the producer does not wait for the disk.
    pub wait: bool,
    /// Tags code of the stored `TAGS` (what a consumer's filter sees, also for a delayed message).
    pub tags_code: i64,
    /// A timer message: its (rounded) deliver time; it landed in the timer topic.
    pub timer_out_ms: Option<i64>,
    /// The light message queues the record was dispatched to, each with its next offset (the
    /// record's offset there + 1): what the pulls and lite consumers waiting on them are told.
    /// Empty (no allocation) for a record that names none, and for a batch.
    pub lmq_arrivals: Vec<(String, i64)>,
}

impl PutResult {
    /// The offsetMsgId (formatted on demand: most puts never need it as text).
    pub fn msg_id(&self) -> String {
        offset_msg_id(&self.store_host, self.physical_offset)
    }

    /// CommitLog offset just past this record: wait for a flush past it.
    pub fn end_offset(&self) -> u64 {
        (self.physical_offset + self.wrote_bytes as i64) as u64
    }
}

#[derive(Debug, Clone)]
pub struct PutBatchResult {
    pub topic: String,
    pub queue_id: i32,
    pub first_queue_offset: i64,
    pub physical_offsets: Vec<i64>,
    pub wrote_bytes: usize,
    pub store_timestamp: i64,
    pub store_host: SocketAddr,
    /// False when the batch's `WAIT` property is `false` (see [`PutResult::wait`]).
    pub wait: bool,
}

impl PutBatchResult {
    pub fn end_offset(&self) -> u64 {
        self.physical_offsets
            .first()
            .map_or(0, |o| *o as u64 + self.wrote_bytes as u64)
    }

    pub fn msg_ids(&self) -> Vec<String> {
        self.physical_offsets
            .iter()
            .map(|o| offset_msg_id(&self.store_host, *o))
            .collect()
    }
}

/// Summary of one consume queue, for tools and planners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueInfo {
    pub topic: String,
    pub queue_id: i32,
    pub min_offset: i64,
    pub max_offset: i64,
}

/// What recovery found when the store was opened.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    pub abnormal_exit: bool,
    /// CommitLog end after recovery.
    pub commitlog_end: u64,
    /// Bytes dropped from a torn or corrupt tail.
    pub truncated_bytes: u64,
    /// Records dispatched again into consume queues and the index.
    pub redispatched: u64,
}

type QueueMap = HashMap<String, HashMap<i32, Arc<ConsumeQueue>>>;

struct Inner {
    config: StoreConfig,
    cq_root: PathBuf,
    cq_file_size: usize,
    commitlog: CommitLog,
    queues: RwLock<QueueMap>,
    /// The light message queues (`%LMQ%...`), in memory and one journal.
    lmqs: Lmqs,
    index: Option<IndexService>,
    /// Why a read-only view has no index (its files do not match the configured sizes).
    index_error: Option<String>,
    put_lock: Mutex<()>,
    checkpoint: Option<Mutex<Checkpoint>>,
    flush: FlushSignal,
    /// Store time of the last appended record.
    last_store_ts: AtomicI64,
    /// Store time of the last record known flushed (the checkpoint's physicMsgTimestamp).
    flushed_store_ts: AtomicI64,
    closed: AtomicBool,
    /// Wakes the background services for shutdown.
    stop: (Mutex<bool>, Condvar),
    retention: retention::Retention,
    space: space::DiskSpace,
    /// Controller mode with replicas in the SyncStateSet: readers see only what the replicas
    /// acknowledged (the HA master's acked offset), so no consumer reads a message that a
    /// failover to a replica would not have (RocketMQ's confirm offset).
    read_confirm: RwLock<Option<Arc<FlushSignal>>>,
    /// The timer wheel's files and progress (a writable store with `timer_wheel_enable`),
    /// opened at start when its files exist, else by the first timer message.
    timer: Mutex<Option<timer::TimerState>>,
    /// Held while a timer checkpoint is written.
    timer_saving: Mutex<()>,
}

/// How many light message queues [`MessageStore::delete_lmqs`] deletes per hold of the put lock.
pub const LMQ_DELETE_CHUNK: usize = 10_000;

pub struct MessageStore {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    lock: Mutex<Option<StoreLock>>,
    recovery: RecoveryReport,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl MessageStore {
    /// Opens (creating if needed) a store for writing, recovering it if the last run did not
    /// shut down cleanly, and starts the flush services. `config.read_only` opens a view instead.
    pub fn open(config: StoreConfig) -> Result<Self> {
        config.validate()?;
        if config.read_only {
            return Self::open_read_only(config);
        }
        let root = config.root_dir.clone();
        std::fs::create_dir_all(&root).map_err(io_err(&root))?;
        let lock = StoreLock::acquire(&root.join("lock"))?;
        let abort_path = root.join("abort");
        let abnormal_exit = abort_path.exists();
        std::fs::File::create(&abort_path).map_err(io_err(&abort_path))?;
        std::fs::create_dir_all(root.join("config")).map_err(io_err(&root))?;
        // As RocketMQ's store does: retention measures the consume queues' partition through it.
        let cq_root = root.join("consumequeue");
        std::fs::create_dir_all(&cq_root).map_err(io_err(&cq_root))?;

        let inner = Inner::load(config, true)?;
        let recovery = inner.recover(abnormal_exit)?;
        if inner.config.timer_wheel_enable && timer::files_exist(&inner.config.root_dir) {
            let timer = inner.open_timer()?;
            *inner.timer.lock().unwrap() = Some(timer);
        }
        let inner = Arc::new(inner);
        let store = MessageStore {
            inner: inner.clone(),
            threads: Mutex::new(Vec::new()),
            lock: Mutex::new(Some(lock)),
            recovery,
        };
        inner.commitlog.files().preallocate_next()?;
        let mut threads = store.threads.lock().unwrap();
        let i = inner.clone();
        threads.push(spawn("ferromq-flush-commitlog", move || {
            i.run_commitlog_flush()
        }));
        let i = inner.clone();
        threads.push(spawn("ferromq-flush-cq", move || {
            i.run_consume_queue_flush()
        }));
        let i = inner.clone();
        threads.push(spawn("ferromq-clean", move || i.run_clean_service()));
        drop(threads);
        Ok(store)
    }

    fn open_read_only(config: StoreConfig) -> Result<Self> {
        let cl = config.commitlog_path();
        if !cl.is_dir() {
            return Err(StoreError::NotAStore(config.root_dir.clone()));
        }
        let inner = Inner::load(config, false)?;
        Ok(MessageStore {
            inner: Arc::new(inner),
            threads: Mutex::new(Vec::new()),
            lock: Mutex::new(None),
            recovery: RecoveryReport::default(),
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.config
    }

    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.recovery
    }

    pub fn is_read_only(&self) -> bool {
        self.inner.config.read_only
    }

    fn check_open(&self) -> Result<&Inner> {
        if self.inner.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else {
            Ok(&self.inner)
        }
    }

    fn writable(&self) -> Result<&Inner> {
        let inner = self.check_open()?;
        if inner.config.read_only {
            return Err(StoreError::ReadOnly);
        }
        Ok(inner)
    }

    /// Appends one message with its properties as given (a delayed one goes to the schedule
    /// topic). Does not wait for the disk: see `wait_flushed` / `notify_flushed`.
    pub fn put_message(
        &self,
        meta: &MessageMeta,
        body: &[u8],
        properties: &str,
    ) -> Result<PutResult> {
        self.send(meta, body, properties, &Rewrite::STORE)
    }

    /// The send pipeline: rewrites `properties` by `rw` (see [`send`]), then appends and
    /// dispatches the message, in one pass under the put lock. Does not wait for the disk.
    pub fn send(
        &self,
        meta: &MessageMeta,
        body: &[u8],
        properties: &str,
        rw: &Rewrite,
    ) -> Result<PutResult> {
        self.writable()?.put_record(meta, body, properties, rw)
    }

    /// Appends messages that share topic, queue and born data as one unit in one CommitLog file.
    pub fn put_messages(&self, meta: &MessageMeta, items: &[BatchItem]) -> Result<PutBatchResult> {
        self.send_batch(meta, items, "", &Rewrite::VERBATIM)
    }

    /// A batch through the send pipeline: the batch's own `properties` are rewritten by `rw`
    /// (never scheduled) and joined to each message's (see [`message::join_properties`]).
    pub fn send_batch(
        &self,
        meta: &MessageMeta,
        items: &[BatchItem],
        properties: &str,
        rw: &Rewrite,
    ) -> Result<PutBatchResult> {
        self.writable()?.put_messages(meta, items, properties, rw)
    }

    /// True once the CommitLog is on disk up to `offset` (or false after `timeout`).
    pub fn wait_flushed(&self, offset: u64, timeout: Duration) -> bool {
        let inner = &self.inner;
        if inner.config.read_only {
            return true;
        }
        if inner.config.flush_disk_type == FlushDiskType::Async {
            inner.flush.request(offset);
        }
        inner.flush.wait(offset, timeout)
    }

    /// Calls `callback(ok)` from the flush thread once the CommitLog is on disk up to `offset`.
    pub fn notify_flushed(&self, offset: u64, timeout: Duration, callback: FlushCallback) {
        self.inner.flush.notify_when(offset, timeout, callback);
    }

    pub fn sync_flush_timeout(&self) -> Duration {
        Duration::from_millis(self.inner.config.sync_flush_timeout_ms)
    }

    /// Reads up to `max_count` messages of one queue from `offset`, about `max_bytes` of records
    /// at most (the first always goes). `tag_codes`: accept only units whose tags code (low 32
    /// bits) is in the list; `None` takes all.
    pub fn get_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        tag_codes: Option<&[i32]>,
    ) -> Result<GetResult> {
        let inner = self.check_open()?;
        let limit = BatchLimit::uniform(max_count, max_bytes);
        inner.get_messages(topic, queue_id, offset, &limit, &accepts_tags(tag_codes))
    }

    /// A pull's read (RocketMQ `getMessage`): up to `max_count` messages of one queue from
    /// `offset`, under the store's transfer caps (`max_transfer_*`: fewer and smaller answers for
    /// messages far behind the CommitLog's end, which are read from disk).
    pub fn pull_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        tag_codes: Option<&[i32]>,
    ) -> Result<GetResult> {
        let inner = self.check_open()?;
        let limit = BatchLimit::pull(&inner.config, max_count, inner.commitlog.max_offset());
        inner.get_messages(topic, queue_id, offset, &limit, &accepts_tags(tag_codes))
    }

    /// Decodes the records of one queue in `[from, to)` into columns (see [`columnar`]), stopping
    /// after `max_rows` rows or about `max_bytes` of records. `tag_codes` pre-filters on the
    /// consume queue's tags codes; `filter` decides on the records themselves. The returned
    /// [`Scan`]'s `next_begin_offset` is where the next call continues.
    #[allow(clippy::too_many_arguments)]
    pub fn read_columns(
        &self,
        topic: &str,
        queue_id: i32,
        from: i64,
        to: i64,
        max_rows: usize,
        max_bytes: usize,
        tag_codes: Option<&[i32]>,
        filter: ColumnFilter,
    ) -> Result<(ColumnBatch, Scan)> {
        let inner = self.check_open()?;
        let accept = accepts_tags(tag_codes);
        // Sized for the whole batch: at most `max_rows` records, whose bodies fit in `max_bytes`
        // (but for compressed ones, which then grow the buffer).
        let rows = max_rows.min(usize::try_from(to.saturating_sub(from)).unwrap_or(0));
        let body_views = filter.body_views;
        let mut builder =
            ColumnBuilder::with_capacity(filter, rows, max_bytes.min(MAX_RESERVED_BODY_BYTES));
        // The CommitLog file of the last record, for bodies kept as views into it.
        let mut file: Option<Arc<MappedFile>> = None;
        let mut failure = None;
        let mut next = from;
        let mut read_bytes = 0usize;
        let mut last = Scan {
            status: GetStatus::NoMatchedMessage,
            next_begin_offset: from,
            min_offset: 0,
            max_offset: 0,
        };
        while next < to && builder.rows() < max_rows && read_bytes < max_bytes {
            let scan = inner.scan_messages(
                topic,
                queue_id,
                next,
                to,
                &BatchLimit::uniform(max_rows - builder.rows(), max_bytes - read_bytes),
                &accept,
                &mut |rec, view, _| {
                    read_bytes += rec.len();
                    if failure.is_some() {
                        return;
                    }
                    // A read-only view's walk parsed the record already (to check it).
                    let parsed;
                    let v = match view {
                        Some(v) => v,
                        None => match RecordView::parse(rec, false) {
                            Ok(v) => {
                                parsed = v;
                                &parsed
                            }
                            Err(e) => {
                                failure = Some(e);
                                return;
                            }
                        },
                    };
                    let at = v.physical_offset as u64;
                    let holds = |f: &Arc<MappedFile>| {
                        (f.file_from_offset()..f.file_from_offset() + f.file_size() as u64)
                            .contains(&at)
                    };
                    if body_views && !file.as_ref().is_some_and(holds) {
                        file = inner.commitlog.files().find(at);
                    }
                    let pushed = match &file {
                        Some(f) => builder.push_mapped(v, f),
                        None => builder.push(v),
                    };
                    if let Err(e) = pushed {
                        failure = Some(e);
                    }
                },
            )?;
            if let Some(e) = failure {
                return Err(e);
            }
            let progressed = scan.next_begin_offset > next;
            let skipped = matches!(
                scan.status,
                GetStatus::OffsetTooSmall
                    | GetStatus::MessageWasRemoving
                    | GetStatus::OffsetFoundNull
            );
            if skipped && progressed {
                // Offsets whose files are gone: the caller sees the skip (data loss) alone, in a
                // call of its own that starts where it does.
                if next == from {
                    last = scan;
                }
                break;
            }
            last = scan;
            let more = matches!(
                scan.status,
                GetStatus::Found
                    | GetStatus::NoMatchedMessage
                    | GetStatus::MessageWasRemoving
                    | GetStatus::OffsetTooSmall
                    | GetStatus::OffsetFoundNull
            );
            if !more || !progressed {
                break;
            }
            next = scan.next_begin_offset;
        }
        last.next_begin_offset = last.next_begin_offset.max(from).min(to.max(from));
        Ok((builder.finish(), last))
    }

    /// Puts the messages of delay level `level` (1-based) that are due at `now_ms` into their real
    /// topics and queues, reading `SCHEDULE_TOPIC_XXXX` from queue offset `from`, at most
    /// `max_count` at a time. The delivered record keeps the schedule record's properties as they
    /// are (`DELAY`, `REAL_TOPIC`, `REAL_QID` included), as Apache RocketMQ 4.9.7 stores them.
    pub fn deliver_due_delayed(
        &self,
        level: i32,
        from: i64,
        now_ms: i64,
        max_count: usize,
    ) -> Result<DeliverResult> {
        let inner = self.writable()?;
        if level < 1 || level as usize > inner.config.message_delay_level.len() {
            return Err(StoreError::InvalidArgument(format!(
                "no delay level {level}"
            )));
        }
        inner.deliver_due(level, from, now_ms, max_count)
    }

    /// Takes up to `max_count` new messages of the timer topic into the timer wheel; the ones
    /// already due are put back into their topics at once (see [`timer`](self::timer)).
    pub fn timer_enqueue(&self, max_count: usize, deliver_due: bool) -> Result<TimerEnqueued> {
        self.writable()?.timer_enqueue(max_count, deliver_due)
    }

    /// A slave takes its master's timer progress (see [`timer`](self::timer)).
    pub fn timer_follow(&self, master_read_time_ms: i64, master_queue_offset: i64) -> Result<()> {
        self.writable()?
            .timer_follow(master_read_time_ms, master_queue_offset)
    }

    /// (next slot to deliver, next timer-topic offset to enqueue, timer log flushed end).
    pub fn timer_progress(&self) -> Result<(i64, i64, i64)> {
        self.check_open()?.timer_progress()
    }

    /// Puts back the timer messages of the slots whose time has passed at `now_ms`, at most
    /// `max_count` (a later call continues where this one stopped).
    pub fn timer_dequeue(&self, now_ms: i64, max_count: usize) -> Result<TimerDequeued> {
        self.writable()?.timer_dequeue(now_ms, max_count)
    }

    /// Flushes the timer log and wheel and saves the timer's checkpoint.
    pub fn timer_checkpoint(&self) -> Result<()> {
        self.writable()?.timer_checkpoint()
    }

    /// Deletes timer log files whose messages are gone from the CommitLog; how many.
    pub fn timer_clean(&self) -> Result<usize> {
        self.writable()?.timer_clean()
    }

    pub fn timer_stats(&self) -> Result<TimerStats> {
        self.check_open()?.timer_stats()
    }

    /// The stored record at a CommitLog offset.
    pub fn read_message(&self, physical_offset: i64) -> Result<Option<Vec<u8>>> {
        Ok(self.check_open()?.read_record(physical_offset))
    }

    /// Whole records from `physical_offset` (a record boundary) up to about `max_bytes`
    /// (always at least one), stopping at the end of a file. Returns the bytes and the offset
    /// of the next record.
    pub fn read_range(&self, physical_offset: i64, max_bytes: usize) -> Result<(Vec<u8>, i64)> {
        Ok(self.check_open()?.read_range(physical_offset, max_bytes))
    }

    /// The record an offsetMsgId names.
    pub fn look_message_by_id(&self, msg_id: &str) -> Result<Option<Vec<u8>>> {
        let (_, offset) = message::decode_offset_msg_id(msg_id)?;
        self.read_message(offset)
    }

    /// Records of `topic` whose KEYS contain `key` (or whose UNIQ_KEY is `key`), stored within
    /// `[begin, end]` ms, newest first.
    pub fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<Vec<u8>>> {
        self.check_open()?
            .query_by_key(topic, key, max_num, begin, end)
    }

    pub fn min_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        let inner = self.check_open()?;
        Ok(inner.units(topic, queue_id).map_or(0, |q| q.min_offset()))
    }

    /// Readers see only the CommitLog up to what `acked` says the replicas have (None: no such
    /// bound). Set on a controller-mode master whose SyncStateSet holds replicas.
    pub fn confirm_reads_by(&self, acked: Option<Arc<FlushSignal>>) {
        if let Ok(inner) = self.check_open() {
            *inner.read_confirm.write().unwrap() = acked;
        }
    }

    pub fn max_offset_in_queue(&self, topic: &str, queue_id: i32) -> Result<i64> {
        let inner = self.check_open()?;
        Ok(inner
            .units(topic, queue_id)
            .map_or(0, |q| inner.visible_max(q.as_ref())))
    }

    /// Store time of the message at a queue offset.
    pub fn store_time(&self, topic: &str, queue_id: i32, offset: i64) -> Result<Option<i64>> {
        let inner = self.check_open()?;
        Ok(inner
            .units(topic, queue_id)
            .and_then(|q| q.unit(offset))
            .and_then(|u| inner.store_timestamp_at(u.offset as u64)))
    }

    pub fn earliest_store_time(&self, topic: &str, queue_id: i32) -> Result<Option<i64>> {
        let min = self.min_offset_in_queue(topic, queue_id)?;
        self.store_time(topic, queue_id, min)
    }

    /// First queue offset whose message was stored at or after `timestamp` ms (the max offset
    /// when none is). Java's broker returns the nearest offset instead; "first at or after"
    /// is what consume-from-timestamp needs.
    pub fn offset_by_time(&self, topic: &str, queue_id: i32, timestamp: i64) -> Result<i64> {
        let inner = self.check_open()?;
        let Some(cq) = inner.units(topic, queue_id) else {
            return Ok(0);
        };
        let (mut lo, mut hi) = (cq.min_offset(), inner.visible_max(cq.as_ref()));
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let ts = cq
                .unit(mid)
                .and_then(|u| inner.store_timestamp_at(u.offset as u64))
                .unwrap_or(i64::MAX);
            if ts < timestamp {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// How many light message queues (`%LMQ%...`) the store holds; [`Self::queues`] leaves
    /// them out (a broker may hold millions).
    pub fn lmq_count(&self) -> Result<usize> {
        Ok(self.check_open()?.lmqs.len())
    }

    /// The light message queues whose names start with `prefix`, sorted by name.
    pub fn lmq_infos(&self, prefix: &str) -> Result<Vec<LmqInfo>> {
        Ok(self.check_open()?.lmqs.infos(prefix))
    }

    /// Every consume queue with its offsets, sorted by topic and queue id.
    pub fn queues(&self) -> Result<Vec<QueueInfo>> {
        self.check_open()?.queue_infos()
    }

    pub fn min_physical_offset(&self) -> i64 {
        self.inner.commitlog.min_offset() as i64
    }

    /// Offset just past the last record. A read-only view finds it in the files each time (the
    /// writer may still be appending).
    pub fn max_physical_offset(&self) -> i64 {
        if self.inner.config.read_only {
            return self.inner.commitlog.data_end() as i64;
        }
        self.inner.commitlog.max_offset() as i64
    }

    pub fn flushed_physical_offset(&self) -> i64 {
        self.inner.flush.flushed() as i64
    }

    /// Deletes the light message queues named (`%LMQ%...`; other names are skipped), those with
    /// no message stored after `idle_until_ms` only when given (checked under the put lock, so a
    /// lite topic written since it was found idle stays); the names deleted. Chunks of
    /// [`LMQ_DELETE_CHUNK`] take the put lock in turn: sends go on during a mass expiry.
    pub fn delete_lmqs(&self, names: &[String], idle_until_ms: Option<i64>) -> Result<Vec<String>> {
        let inner = self.writable()?;
        let mut deleted = Vec::new();
        for chunk in names.chunks(LMQ_DELETE_CHUNK) {
            let _guard = inner.put_lock.lock().unwrap();
            let mut gone: Vec<&str> = Vec::new();
            for name in chunk.iter().map(String::as_str) {
                if !lmq::is_lmq(name) || !inner.lmqs.contains(name) {
                    continue;
                }
                if let Some(until) = idle_until_ms {
                    if self.lmq_newest_store_time(name, inner.lmqs.max_offset(name))? > until {
                        continue;
                    }
                }
                gone.push(name);
            }
            inner.lmqs.delete_many(gone.iter().copied())?;
            deleted.extend(gone.into_iter().map(str::to_string));
        }
        Ok(deleted)
    }

    /// The light message queues named `prefix...` that hold messages, none stored after
    /// `cutoff_ms` (one whose records retention took counts as idle), sorted by name: the lite
    /// topics to expire.
    pub fn idle_lmqs(&self, prefix: &str, cutoff_ms: i64) -> Result<Vec<String>> {
        let mut idle = Vec::new();
        for info in self.lmq_infos(prefix)? {
            if info.max_offset > 0
                && self.lmq_newest_store_time(&info.name, info.max_offset)? <= cutoff_ms
            {
                idle.push(info.name);
            }
        }
        Ok(idle)
    }

    /// When the newest message of a light message queue (`max_offset` its next offset) was stored;
    /// 0 when it holds none, or retention took its records (as old as can be).
    fn lmq_newest_store_time(&self, name: &str, max_offset: i64) -> Result<i64> {
        if max_offset <= 0 {
            return Ok(0);
        }
        Ok(self.store_time(name, 0, max_offset - 1)?.unwrap_or(0))
    }

    /// Forgets a topic's consume queues (files included), as RocketMQ does when a topic is deleted:
    /// a topic created again later starts at offset 0. CommitLog records stay until retention.
    pub fn delete_topic(&self, topic: &str) -> Result<()> {
        let inner = self.writable()?;
        if lmq::is_lmq(topic) {
            // An LMQ's name ('$' separates a lite topic's parts) is no topic name.
            let _guard = inner.put_lock.lock().unwrap();
            inner.lmqs.delete(topic)?;
            return Ok(());
        }
        message::validate_topic(topic)?;
        let _guard = inner.put_lock.lock().unwrap();
        inner.queues.write().unwrap().remove(topic);
        let dir = inner.cq_root.join(topic);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_err(&dir)(e)),
        }
    }

    /// One retention round now (RocketMQ's `cleanFilesPeriodically`) with the given clock, hour
    /// and disk usage: expired CommitLog files go, then the consume-queue and index files that
    /// only point below the new CommitLog start. The service thread runs one every
    /// `clean_resource_interval_ms` with [`CleanInput::from_system`]. May sleep
    /// `delete_*_files_interval_ms` between deletions.
    pub fn clean_expired_files(&self, input: &CleanInput) -> Result<CleanReport> {
        self.writable()?.clean_round(input)
    }

    /// The [`CleanInput`] of the system clock, local hour and this store's disks.
    pub fn system_clean_input(&self) -> CleanInput {
        CleanInput::from_system(&self.inner.config.commitlog_path(), &self.inner.cq_root)
    }

    /// RocketMQ's `executeDeleteFilesManually` (DELETE_EXPIRED_COMMITLOG): the next
    /// [`MAX_MANUAL_DELETE_FILE_TIMES`] rounds delete expired files whatever the hour.
    pub fn execute_delete_files_manually(&self) -> Result<()> {
        let inner = self.writable()?;
        inner
            .retention
            .manual_times
            .store(MAX_MANUAL_DELETE_FILE_TIMES, Ordering::Release);
        log::info!("executeDeleteFilesManually was invoked");
        Ok(())
    }

    /// RocketMQ's `cleanExpiredConsumerQueue` (CLEAN_EXPIRED_CONSUMEQUEUE): drops every queue
    /// (but the schedule topic's) whose messages are all below the CommitLog start.
    pub fn clean_expired_consume_queues(&self) -> Result<usize> {
        self.writable()?.clean_expired_consume_queues()
    }

    /// Files deleted by retention since the store was opened.
    /// Whether writes are being refused for a full disk, how full it is, and whether stored
    /// records wait to be dispatched. Measures the disks now.
    pub fn space_status(&self) -> SpaceStatus {
        if !self.inner.config.read_only {
            self.inner.check_space(true);
        }
        self.inner.space_status()
    }

    pub fn retention_stats(&self) -> RetentionStats {
        self.inner.retention.stats()
    }

    /// Tiered storage's floor: retention deletes only CommitLog files that end at or before
    /// `floor` (whatever their age or the disk usage), as the messages past it are not in the
    /// bucket yet. None clears it.
    pub fn set_retention_floor(&self, floor: Option<u64>) {
        self.inner.retention.set_floor(floor);
    }

    pub fn retention_floor(&self) -> Option<u64> {
        self.inner.retention.keep_from()
    }

    /// Read-only views: forgets files the writer deleted and maps the ones it added (CommitLog,
    /// loaded consume queues, index). A writer's store has nothing to do.
    pub fn refresh(&self) -> Result<()> {
        let inner = self.check_open()?;
        if !inner.config.read_only {
            return Ok(());
        }
        inner.commitlog.refresh()?;
        for cq in inner.all_queues() {
            inner.refresh_queue(&cq)?;
        }
        if let Some(index) = &inner.index {
            index.refresh()?;
        }
        Ok(())
    }

    /// Flushes CommitLog, consume queues, index and checkpoint to disk now.
    pub fn flush(&self) -> Result<()> {
        let inner = self.writable()?;
        inner.flush_all()
    }

    /// Stops the services, flushes everything and marks the shutdown clean. Idempotent.
    pub fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        {
            let (lock, cv) = &inner.stop;
            *lock.lock().unwrap() = true;
            cv.notify_all();
        }
        inner.flush.stop();
        for t in self.threads.lock().unwrap().drain(..) {
            let _ = t.join();
        }
        if inner.config.read_only {
            return Ok(());
        }
        let mut result = inner.flush_all();
        if inner.timer.lock().unwrap().is_some() {
            result = result.and(inner.timer_checkpoint());
        }
        if result.is_ok() {
            let abort = inner.config.root_dir.join("abort");
            let _ = std::fs::remove_file(abort);
        }
        self.lock.lock().unwrap().take();
        result
    }
}

impl Drop for MessageStore {
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            log::error!("closing the store failed: {e}");
        }
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(f)
        .expect("spawn store service thread")
}

impl Inner {
    fn load(config: StoreConfig, writable: bool) -> Result<Self> {
        let root = config.root_dir.clone();
        let commitlog = CommitLog::load(
            &config.commitlog_path(),
            config.mapped_file_size_commitlog,
            writable,
            writable && config.warm_mapped_file_enable,
        )?;
        let cq_root = root.join("consumequeue");
        let cq_file_size = round_file_size(config.mapped_file_size_consume_queue);
        let mut index_error = None;
        let index = if config.message_index_enable {
            match IndexService::load(
                &root.join("index"),
                config.max_hash_slot_num,
                config.max_index_num,
                writable,
            ) {
                Ok(index) => Some(index),
                // A read-only view (Spark, tools) reads queues without the index; only queries
                // need it, so they report the mismatch instead of the view failing to open.
                Err(e @ StoreError::Corrupt { .. }) if !writable => {
                    index_error = Some(e.to_string());
                    None
                }
                Err(e) => return Err(e),
            }
        } else {
            None
        };
        let checkpoint = if writable {
            Some(Mutex::new(Checkpoint::open(&root.join("checkpoint"))?))
        } else {
            None
        };
        let lmqs = Lmqs::open(&root, writable)?;
        let inner = Inner {
            cq_root,
            cq_file_size,
            commitlog,
            queues: RwLock::new(HashMap::new()),
            lmqs,
            index,
            index_error,
            put_lock: Mutex::new(()),
            checkpoint,
            flush: FlushSignal::new(0),
            last_store_ts: AtomicI64::new(0),
            flushed_store_ts: AtomicI64::new(0),
            closed: AtomicBool::new(false),
            stop: (Mutex::new(false), Condvar::new()),
            retention: Default::default(),
            space: Default::default(),
            read_confirm: RwLock::new(None),
            timer: Mutex::new(None),
            timer_saving: Mutex::new(()),
            config,
        };
        if writable {
            inner.load_all_queues()?;
        }
        Ok(inner)
    }

    fn load_all_queues(&self) -> Result<()> {
        let mut map = self.queues.write().unwrap();
        for (topic, queue_id) in list_queue_dirs(&self.cq_root)? {
            let cq = ConsumeQueue::load(
                &self.cq_root,
                &topic,
                queue_id,
                self.cq_file_size,
                !self.config.read_only,
            )?;
            map.entry(topic).or_default().insert(queue_id, Arc::new(cq));
        }
        Ok(())
    }

    fn all_queues(&self) -> Vec<Arc<ConsumeQueue>> {
        self.queues
            .read()
            .unwrap()
            .values()
            .flat_map(|m| m.values().cloned())
            .collect()
    }

    /// The queue for (topic, queue id); read-only views load it from disk on first use.
    fn queue(&self, topic: &str, queue_id: i32) -> Option<Arc<ConsumeQueue>> {
        if let Some(cq) = self
            .queues
            .read()
            .unwrap()
            .get(topic)
            .and_then(|m| m.get(&queue_id))
        {
            return Some(cq.clone());
        }
        if !self.config.read_only || message::validate_topic(topic).is_err() {
            return None;
        }
        let dir = self.cq_root.join(topic).join(queue_id.to_string());
        if !dir.is_dir() {
            return None;
        }
        let cq =
            ConsumeQueue::load(&self.cq_root, topic, queue_id, self.cq_file_size, false).ok()?;
        // Units whose CommitLog files retention deleted are not part of the queue any more.
        cq.correct_min_offset(self.commitlog.min_offset() as i64);
        Some(self.keep_queue(topic, queue_id, cq))
    }

    /// `cq`, now the store's queue of (topic, queue id).
    fn keep_queue(&self, topic: &str, queue_id: i32, cq: ConsumeQueue) -> Arc<ConsumeQueue> {
        let cq = Arc::new(cq);
        self.queues
            .write()
            .unwrap()
            .entry(topic.to_string())
            .or_default()
            .insert(queue_id, cq.clone());
        cq
    }

    /// The units of (topic, queue id) as reads walk them: a consume queue, or a light message
    /// queue (`%LMQ%...`, whose only queue is 0).
    fn units<'a>(&'a self, topic: &'a str, queue_id: i32) -> Option<Box<dyn Units + 'a>> {
        if lmq::is_lmq(topic) {
            return Some(Box::new(self.lmqs.view(topic)?));
        }
        Some(Box::new(self.queue(topic, queue_id)?))
    }

    fn queue_or_create(&self, topic: &str, queue_id: i32) -> Result<Arc<ConsumeQueue>> {
        if let Some(cq) = self.queue(topic, queue_id) {
            return Ok(cq);
        }
        let cq = ConsumeQueue::load(&self.cq_root, topic, queue_id, self.cq_file_size, true)?;
        Ok(self.keep_queue(topic, queue_id, cq))
    }

    /// Read-only views: a queue's new units and files, its deleted head files dropped and its
    /// min offset moved past units whose CommitLog files are gone.
    fn refresh_queue(&self, cq: &ConsumeQueue) -> Result<()> {
        cq.refresh()?;
        cq.correct_min_offset(self.commitlog.min_offset() as i64);
        Ok(())
    }

    fn queue_infos(&self) -> Result<Vec<QueueInfo>> {
        let mut out = Vec::new();
        if self.config.read_only {
            self.commitlog.refresh()?;
        }
        let keys: Vec<(String, i32)> = if self.config.read_only {
            list_queue_dirs(&self.cq_root)?
        } else {
            self.all_queues()
                .iter()
                .map(|cq| (cq.topic().to_string(), cq.queue_id()))
                .collect()
        };
        for (topic, queue_id) in keys {
            if let Some(cq) = self.queue(&topic, queue_id) {
                if self.config.read_only {
                    self.refresh_queue(&cq)?;
                }
                out.push(QueueInfo {
                    min_offset: cq.min_offset(),
                    max_offset: self.visible_max(&cq),
                    topic,
                    queue_id,
                });
            }
        }
        out.sort_by(|a, b| (&a.topic, a.queue_id).cmp(&(&b.topic, b.queue_id)));
        Ok(out)
    }

    /// How far readers may read in the CommitLog: in SYNC_FLUSH mode only what is on disk, and
    /// with a read confirm only what the replicas acknowledged.
    fn read_limit(&self) -> u64 {
        let flushed =
            if !self.config.read_only && self.config.flush_disk_type == FlushDiskType::Sync {
                self.flush.flushed()
            } else {
                u64::MAX
            };
        match self.read_confirm.read().unwrap().as_ref() {
            Some(acked) => flushed.min(acked.flushed()),
            None => flushed,
        }
    }

    /// The queue's max offset as readers may see it (SYNC_FLUSH hides unflushed units).
    fn visible_max(&self, cq: &dyn Units) -> i64 {
        let limit = self.read_limit();
        let (min, mut max) = (cq.min_offset(), cq.max_offset());
        if limit == u64::MAX {
            return max;
        }
        while max > min && cq.unit(max - 1).is_some_and(|u| u.end() as u64 > limit) {
            max -= 1;
        }
        max
    }

    fn store_timestamp_at(&self, phys: u64) -> Option<i64> {
        self.commitlog
            .with_bytes(phys, message::pos::BORN_HOST + 20, u64::MAX, |b| {
                let sys_flag = i32::from_be_bytes(
                    b[message::pos::SYS_FLAG..message::pos::SYS_FLAG + 4]
                        .try_into()
                        .unwrap(),
                );
                let at = message::pos::BORN_HOST
                    + if sys_flag & sysflag::BORNHOST_V6 != 0 {
                        20
                    } else {
                        8
                    };
                i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
            })
    }
}

/// (topic, queue id) of every consume queue directory under `root`.
fn list_queue_dirs(root: &Path) -> Result<Vec<(String, i32)>> {
    let mut out = Vec::new();
    let topics = match std::fs::read_dir(root) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(io_err(root)(e)),
    };
    for t in topics {
        let t = t.map_err(io_err(root))?;
        let Some(topic) = t.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if message::validate_topic(&topic).is_err() || !t.path().is_dir() {
            continue;
        }
        for q in std::fs::read_dir(t.path()).map_err(io_err(&t.path()))? {
            let q = q.map_err(io_err(&t.path()))?;
            if let Some(qid) = q.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) {
                if qid >= 0 {
                    out.push((topic.clone(), qid));
                }
            }
        }
    }
    out.sort();
    Ok(out)
}
