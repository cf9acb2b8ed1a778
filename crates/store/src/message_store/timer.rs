//! Timer messages (RocketMQ 5.x's `TimerMessageStore`): a send with a timer request is stored in
//! `rmq_sys_wheel_timer` queue 0 (see `send::rewrite`); the timer then
//!
//! * **enqueues** it: reads that queue in order and writes a unit for each message into the
//!   timer log, chained into the wheel slot of its deliver time (a message already due is put
//!   back at once; one due beyond the roll window waits in a nearer slot, marked ROLL);
//! * **dequeues** due slots: once a slot's time has passed, walks its chain and puts each message
//!   back into its real topic and queue (a ROLL unit back into the timer topic, to be enqueued
//!   again), skipping the ones a recall cancelled;
//! * **checkpoints** how far it read and enqueued (`config/timercheck`), with the log and wheel
//!   flushed first.
//!
//! The broker drives the three; each runs under the timer's own lock, which a put never takes
//! while it holds the put lock. After a crash the wheel is repaired from the log written since the
//! last checkpoint, enqueuing resumes after the newest unit's message, and delivery resumes at the
//! checkpointed slot: a timer is never lost and never early; a slot cut short by the crash is
//! delivered again (at least once).

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::MutexGuard;

use super::{now_ms, Delivered, Inner};
use crate::error::{Result, StoreError};
use crate::mapped_file_queue::release_cold_pages;
use crate::message::{parse_properties, property, MessageMeta, RecordView};
use crate::send::{Edit, Rewrite};
use crate::timer::{
    topic_hash, TimerCheckpoint, TimerLog, TimerUnit, TimerWheel, MAGIC_DEFAULT, MAGIC_DELETE,
    MAGIC_ROLL, SLOTS_TOTAL, TIMER_TOPIC,
};

/// Slots kept clear between the read time and a turn back (Java's `TIMER_BLANK_SLOTS`).
const BLANK_SLOTS: i64 = 60;
/// Longest chain a slot may have: a longer one is a loop in a damaged log.
const MAX_CHAIN: usize = 50_000_000;

/// The timer's files and progress.
pub(super) struct TimerState {
    /// Shared with checkpoints, which flush it without the timer's lock.
    log: Arc<TimerLog>,
    wheel: TimerWheel,
    checkpoint_path: PathBuf,
    checkpoint: TimerCheckpoint,
    precision_ms: i64,
    roll_window_slots: i64,
    /// The next timer-topic queue offset to enqueue.
    queue_offset: i64,
    /// The next slot to deliver (ms).
    read_time_ms: i64,
    /// The slot being delivered, when a call stopped inside it.
    slot: Option<SlotWork>,
    stats: TimerStats,
}

/// A slot's units in the order they were written, how many are done, and what recalls cancel.
struct SlotWork {
    time_ms: i64,
    units: Vec<TimerUnit>,
    next: usize,
    recalled: HashSet<String>,
}

/// Counters of the timer since the store opened, and its backlog.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Units written into the wheel (a roll counts again).
    pub enqueued: u64,
    /// Messages put back into their real topics.
    pub delivered: u64,
    /// Messages put back into the timer topic to wait another round (ROLL).
    pub rolled: u64,
    /// Messages a recall cancelled.
    pub recalled: u64,
    /// Units whose message was gone (CommitLog retention) or unreadable.
    pub skipped: u64,
    /// Timers in the wheel not yet delivered.
    pub pending: i64,
    /// Timer-topic messages not yet enqueued.
    pub enqueue_behind: i64,
    /// How far (ms) delivery is behind the clock.
    pub dequeue_behind_ms: i64,
    /// The next slot to deliver and the next queue offset to enqueue.
    pub read_time_ms: i64,
    pub queue_offset: i64,
}

/// What one enqueue call did.
#[derive(Debug, Clone, Default)]
pub struct TimerEnqueued {
    /// Timer-topic messages taken (written into the wheel or delivered at once).
    pub taken: usize,
    /// The ones already due, put back at once.
    pub delivered: Vec<Delivered>,
}

/// What one dequeue call did.
#[derive(Debug, Clone, Default)]
pub struct TimerDequeued {
    pub delivered: Vec<Delivered>,
    /// Messages put back into the timer topic (they need enqueuing again).
    pub rolled: usize,
    /// True when the call stopped at `max_count` with due slots left.
    pub more: bool,
}

/// True when the store has timer files (timers were used): the timer opens with the store.
pub(super) fn files_exist(root: &Path) -> bool {
    root.join("timerwheel").exists()
}

impl Inner {
    /// Opens the timer's files and recovers its progress (after the CommitLog's recovery).
    pub(super) fn open_timer(&self) -> Result<TimerState> {
        let c = &self.config;
        let root = &c.root_dir;
        let p = c.timer_precision_ms;
        let fresh = !files_exist(root);
        let log = TimerLog::open(&root.join("timerlog"), c.mapped_file_size_timer_log)?;
        let mut wheel = TimerWheel::open(&root.join("timerwheel"), p)?;
        let checkpoint_path = root.join("config").join("timercheck");
        let checkpoint = TimerCheckpoint::load(&checkpoint_path)?;

        let now = now_ms() / p * p;
        // A new wheel has nothing before now; an old one is read from where it stopped, at most
        // a turn back (Java's bound).
        let read_time_ms = if fresh {
            now
        } else {
            checkpoint
                .last_read_time_ms
                .max(now - SLOTS_TOTAL as i64 * p + BLANK_SLOTS * p)
        };
        // Units written after the last checkpoint may be missing from the wheel (its pages were
        // not written back): chain them in again, from the file before the flushed position on.
        let from = (checkpoint.last_timer_log_flush_pos - c.mapped_file_size_timer_log as i64)
            .max(0) as u64;
        let mut newest = None;
        log.scan(from, |pos, unit| {
            if unit.deliver_time_ms() >= read_time_ms {
                wheel.revise_last(unit.deliver_time_ms(), pos as i64);
            }
            newest = Some(unit);
        });
        let queue_offset = self.timer_resume_offset(checkpoint.last_timer_queue_offset, newest);
        let roll_window_slots =
            if (2..=SLOTS_TOTAL as i64 - BLANK_SLOTS).contains(&c.timer_roll_window_slot) {
                c.timer_roll_window_slot
            } else {
                SLOTS_TOTAL as i64 - BLANK_SLOTS
            };
        // Units lie in slots up to a roll window ahead of when they were written.
        let horizon = now + (roll_window_slots + 1) * p;
        let pending = if fresh {
            0
        } else {
            wheel.all_num(read_time_ms, horizon)
        };
        log::info!(
            "timer recovered: read time {read_time_ms}, queue offset {queue_offset}, \
             {pending} pending, log end {}",
            log.end()
        );
        Ok(TimerState {
            log: Arc::new(log),
            wheel,
            checkpoint_path,
            checkpoint,
            precision_ms: p,
            roll_window_slots,
            queue_offset,
            read_time_ms,
            slot: None,
            stats: TimerStats {
                pending,
                ..Default::default()
            },
        })
    }

    /// Where enqueuing resumes: after the newest unit's message when the log is ahead of the
    /// checkpoint (enqueuing goes in queue order, so everything before it was taken), within the
    /// queue's bounds.
    fn timer_resume_offset(&self, checkpointed: i64, newest: Option<TimerUnit>) -> i64 {
        let Some(cq) = self.queue(TIMER_TOPIC, 0) else {
            return 0;
        };
        let after_newest = newest
            .and_then(|u| {
                let record = self.read_record(u.commitlog_offset)?;
                let qo = RecordView::parse(&record, false).ok()?.queue_offset;
                // The record names its timer-topic offset unless it was rolled from elsewhere.
                let unit = cq.unit(qo)?;
                (unit.offset == u.commitlog_offset).then_some(qo + 1)
            })
            .unwrap_or(0);
        checkpointed
            .max(after_newest)
            .clamp(cq.min_offset(), cq.max_offset())
    }

    /// The timer, opened first when `create` (a timer message is waiting for it); None when it
    /// was never used.
    fn timer(&self, create: bool) -> Result<MutexGuard<'_, Option<TimerState>>> {
        if !self.config.timer_wheel_enable {
            return Err(StoreError::TimerDisabled);
        }
        let mut guard = self.timer.lock().unwrap();
        if guard.is_none() && create {
            *guard = Some(self.open_timer()?);
        }
        Ok(guard)
    }

    /// Flow control (Java's `isReject`): a slot holding more than `timerCongestNumEachSlot`
    /// refuses some sends due in it, and one holding twice as many refuses all.
    pub(super) fn admit_timer(&self, deliver_ms: i64) -> Result<()> {
        let limit = self.config.timer_congest_num_each_slot;
        if limit >= i32::MAX as i64 {
            return Ok(());
        }
        let num = match self.timer(false)?.as_ref() {
            Some(st) => st.wheel.slot(deliver_ms).num as i64,
            None => 0,
        };
        // Between the limit and twice it, Java draws 0..1000 and refuses a draw above
        // 1000 × (num - limit) / (limit + 0.1).
        let refused = num >= limit * 2
            || (num > limit && {
                let draw = RandomState::new().hash_one(now_ms()) % 1000;
                draw as f64 > 1000.0 * (num - limit) as f64 / (limit as f64 + 0.1)
            });
        if refused {
            return Err(StoreError::TimerFlowControl { limit });
        }
        Ok(())
    }

    /// Takes up to `max_count` messages of the timer topic into the wheel. A master
    /// (`deliver_due`) puts back the ones already due at once; a slave writes nothing into the
    /// store and chains them into their (past) slots, for a promotion to deliver the ones its
    /// master had not (the slots from the master's read time on).
    pub(super) fn timer_enqueue(
        &self,
        max_count: usize,
        deliver_due: bool,
    ) -> Result<TimerEnqueued> {
        let mut out = TimerEnqueued::default();
        let Some(cq) = self.queue(TIMER_TOPIC, 0) else {
            drop(self.timer(false)?); // refused when the wheel is off
            return Ok(out);
        };
        let mut guard = self.timer(true)?;
        let st = guard.as_mut().expect("opened");
        let max = self.visible_max(&cq);
        let mut offset = st.queue_offset.max(cq.min_offset());
        let write_time = now_ms() / st.precision_ms * st.precision_ms;
        while offset < max && out.taken < max_count {
            let Some(cq_unit) = cq.unit(offset) else {
                break;
            };
            if cq_unit.offset < self.commitlog.min_offset() as i64 {
                log::warn!(
                    "timer message at {} was deleted by retention before it was enqueued; skipped",
                    cq_unit.offset
                );
                st.stats.skipped += 1;
                offset += 1;
                continue;
            }
            let Some(record) = self.read_record(cq_unit.offset) else {
                break; // not readable yet (SYNC_FLUSH: not on disk)
            };
            let view = RecordView::parse(&record, false)?;
            let props = parse_properties(view.properties);
            let find = |name: &str| props.iter().find(|(n, _)| *n == name).map(|e| e.1);
            match find(property::TIMER_OUT_MS).and_then(|v| v.parse::<i64>().ok()) {
                None => {
                    log::error!(
                        "timer message at {} has no TIMER_OUT_MS; skipped",
                        cq_unit.offset
                    );
                    st.stats.skipped += 1;
                }
                Some(deliver_ms) if deliver_due && deliver_ms < write_time => {
                    // Already due: back to its topic now (TIMER_ENQUEUE_MS = Long.MAX_VALUE
                    // says it never waited in the wheel, as Java marks it).
                    if find(property::TIMER_DEL_UNIQKEY).is_none() {
                        let d = self.timer_put_back(&view, i64::MAX, false, now_ms())?;
                        out.delivered.extend(d);
                        st.stats.delivered += 1;
                    }
                }
                Some(deliver_ms) => {
                    let recall = find(property::TIMER_DEL_UNIQKEY).is_some();
                    let real_topic = find(property::REAL_TOPIC);
                    st.enqueue_unit(&cq_unit, deliver_ms, write_time, recall, real_topic)?;
                }
            }
            out.taken += 1;
            offset += 1;
            st.queue_offset = offset;
        }
        st.queue_offset = offset;
        Ok(out)
    }

    /// Delivers the slots due at `now` (whose time has passed), at most `max_count` messages.
    pub(super) fn timer_dequeue(&self, now: i64, max_count: usize) -> Result<TimerDequeued> {
        let mut out = TimerDequeued::default();
        let mut guard = self.timer(false)?;
        let Some(st) = guard.as_mut() else {
            return Ok(out);
        };
        let p = st.precision_ms;
        let write_time = now / p * p;
        while st.read_time_ms < write_time {
            if out.delivered.len() + out.rolled >= max_count {
                out.more = true;
                break;
            }
            let time = st.read_time_ms;
            if st.slot.as_ref().is_none_or(|w| w.time_ms != time) {
                let slot = st.wheel.slot(time);
                if slot.time_ms < 0 {
                    st.read_time_ms += p;
                    continue;
                }
                let work = self.slot_work(st, time, slot.last_pos)?;
                st.slot = Some(work);
            }
            let mut work = st.slot.take().expect("the slot in progress");
            let result = self.deliver_slot(st, &mut work, now, max_count, &mut out);
            if let Err(e) = result {
                st.slot = Some(work); // try again from the same message
                return Err(e);
            }
            if work.next < work.units.len() {
                st.slot = Some(work);
                out.more = true;
                break;
            }
            st.read_time_ms += p;
        }
        Ok(out)
    }

    /// The units of the slot at `time`, oldest first, and the recalls among them applied.
    fn slot_work(&self, st: &TimerState, time: i64, last_pos: i64) -> Result<SlotWork> {
        let mut units = Vec::new();
        let mut pos = last_pos;
        while pos >= 0 && units.len() < MAX_CHAIN {
            let Some(unit) = st.log.read(pos as u64) else {
                log::warn!("timer slot {time}: no unit at log position {pos}; chain cut there");
                break;
            };
            pos = unit.prev_pos;
            units.push(unit);
        }
        units.reverse();
        let mut recalled = HashSet::new();
        units.retain(|u| {
            let is_recall = u.magic & MAGIC_DELETE != 0 && u.magic & MAGIC_ROLL == 0;
            if is_recall {
                if let Some(key) = self
                    .read_record(u.commitlog_offset)
                    .and_then(|r| recall_key(&r))
                {
                    recalled.insert(key);
                }
            }
            !is_recall
        });
        Ok(SlotWork {
            time_ms: time,
            units,
            next: 0,
            recalled,
        })
    }

    fn deliver_slot(
        &self,
        st: &mut TimerState,
        work: &mut SlotWork,
        now: i64,
        max_count: usize,
        out: &mut TimerDequeued,
    ) -> Result<()> {
        while work.next < work.units.len() && out.delivered.len() + out.rolled < max_count {
            let unit = work.units[work.next];
            let record = if unit.commitlog_offset < self.commitlog.min_offset() as i64 {
                None
            } else {
                self.read_record(unit.commitlog_offset)
            };
            match record {
                None => {
                    log::warn!(
                        "timer message at {} is gone from the CommitLog; not delivered",
                        unit.commitlog_offset
                    );
                    st.stats.skipped += 1;
                }
                Some(record) => {
                    let view = RecordView::parse(&record, false)?;
                    let roll = unit.magic & MAGIC_ROLL != 0;
                    if !roll && is_recalled(&view, &work.recalled) {
                        st.stats.recalled += 1;
                    } else if let Some(d) =
                        self.timer_put_back(&view, unit.write_time_ms, roll, now)?
                    {
                        if roll {
                            out.rolled += 1;
                            st.stats.rolled += 1;
                        } else {
                            out.delivered.push(d);
                            st.stats.delivered += 1;
                        }
                    } else {
                        st.stats.skipped += 1;
                    }
                }
            }
            st.stats.pending -= 1;
            work.next += 1;
        }
        Ok(())
    }

    /// Puts a timer message back: into its real topic and queue, or (`roll`) into the timer
    /// topic to wait another round, with Java's TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS and
    /// TIMER_ROLL_TIMES; its other properties (REAL_TOPIC and REAL_QID too) stay as stored.
    /// None when it names no real topic or queue.
    fn timer_put_back(
        &self,
        view: &RecordView,
        enqueue_ms: i64,
        roll: bool,
        now: i64,
    ) -> Result<Option<Delivered>> {
        let props = parse_properties(view.properties);
        let find = |name: &str| props.iter().find(|(n, _)| *n == name).map(|e| e.1);
        let real_topic = find(property::REAL_TOPIC);
        let real_qid = find(property::REAL_QID).and_then(|q| q.parse::<i32>().ok());
        let (topic, queue_id) = if roll {
            (TIMER_TOPIC, 0)
        } else {
            match (real_topic, real_qid) {
                (Some(t), Some(q)) => (t, q),
                _ => {
                    log::error!(
                        "timer message at {} names no real topic/queue; dropped",
                        view.physical_offset
                    );
                    return Ok(None);
                }
            }
        };
        let mut edits = vec![Edit::Set(
            property::TIMER_ENQUEUE_MS.into(),
            enqueue_ms.to_string(),
        )];
        if roll {
            let times = find(property::TIMER_ROLL_TIMES)
                .and_then(|t| t.parse::<i64>().ok())
                .unwrap_or(0);
            edits.push(Edit::Set(
                property::TIMER_ROLL_TIMES.into(),
                (times + 1).to_string(),
            ));
        }
        edits.push(Edit::Set(
            property::TIMER_DEQUEUE_MS.into(),
            now.to_string(),
        ));
        let meta = MessageMeta {
            topic,
            queue_id,
            flag: view.flag,
            sys_flag: view.sys_flag,
            born_timestamp: view.born_timestamp,
            born_host: view.born_host,
            reconsume_times: view.reconsume_times,
            prepared_transaction_offset: view.prepared_transaction_offset,
        };
        let rw = Rewrite {
            edits: &edits,
            drop_wait: false,
            schedule: false,
        };
        let r = self.put_record(&meta, view.body, view.properties, &rw)?;
        Ok(Some(Delivered {
            topic: r.topic,
            queue_id: r.queue_id,
            queue_offset: r.queue_offset,
            tags_code: r.tags_code,
            lmq_arrivals: r.lmq_arrivals,
        }))
    }

    /// A slave follows its master's progress (`SlaveSynchronize.syncTimerCheckPoint`): the slot
    /// the master delivers next, so that after a promotion delivery resumes there.
    pub(super) fn timer_follow(
        &self,
        master_read_time_ms: i64,
        master_queue_offset: i64,
    ) -> Result<()> {
        if master_read_time_ms <= 0 {
            return Ok(()); // the master never used its timer
        }
        let mut guard = self.timer(true)?;
        let st = guard.as_mut().expect("opened");
        if st.read_time_ms != master_read_time_ms {
            st.slot = None;
            st.read_time_ms = master_read_time_ms;
        }
        st.checkpoint.master_timer_queue_offset = master_queue_offset;
        Ok(())
    }

    /// (the next slot to deliver, the next timer-topic offset to enqueue, the timer log's
    /// flushed end): what a master tells its slaves; zeros before the timer was used.
    pub(super) fn timer_progress(&self) -> Result<(i64, i64, i64)> {
        let guard = self.timer(false)?;
        Ok(guard.as_ref().map_or((0, 0, 0), |st| {
            (
                st.read_time_ms,
                st.queue_offset,
                st.checkpoint.last_timer_log_flush_pos,
            )
        }))
    }

    /// Flushes the timer log and wheel, then records the progress in `config/timercheck`. The
    /// progress is taken first and the files synced after, without the timer's lock (enqueuing
    /// and delivery go on meanwhile): everything the progress counts is on disk when it is saved.
    pub(super) fn timer_checkpoint(&self) -> Result<()> {
        let (log, wheel, path, last, read_time_ms, queue_offset) = {
            let guard = self.timer(false)?;
            let Some(st) = guard.as_ref() else {
                return Ok(());
            };
            (
                st.log.clone(),
                st.wheel.syncer(),
                st.checkpoint_path.clone(),
                st.checkpoint,
                st.read_time_ms,
                st.queue_offset,
            )
        };
        let flushed = log.flush()?;
        // The log is appended and read again only as slots come due: keep its hot window mapped.
        if let Some(window) = self.config.mapped_file_hot_window {
            release_cold_pages(&log.files(), window, true);
        }
        wheel.sync()?;
        let cp = TimerCheckpoint {
            last_read_time_ms: read_time_ms,
            last_timer_log_flush_pos: flushed as i64,
            last_timer_queue_offset: queue_offset,
            master_timer_queue_offset: queue_offset,
            ..last
        };
        if cp != last {
            // One checkpoint at a time (the broker's loop, then the store's close).
            let _saving = self.timer_saving.lock().unwrap();
            cp.save(&path)?;
            if let Some(st) = self.timer(false)?.as_mut() {
                st.checkpoint = cp;
            }
        }
        Ok(())
    }

    /// Deletes timer log files whose messages retention deleted from the CommitLog.
    pub(super) fn timer_clean(&self) -> Result<usize> {
        let guard = self.timer(false)?;
        let Some(st) = guard.as_ref() else {
            return Ok(0);
        };
        let min = self.commitlog.min_offset() as i64;
        // Files before the one being written only.
        st.log.delete_expired(min, st.log.end().saturating_sub(1))
    }

    pub(super) fn timer_stats(&self) -> Result<TimerStats> {
        let guard = self.timer(false)?;
        let Some(st) = guard.as_ref() else {
            return Ok(TimerStats::default());
        };
        let enqueue_behind = self
            .queue(TIMER_TOPIC, 0)
            .map_or(0, |cq| (self.visible_max(&cq) - st.queue_offset).max(0));
        let now = now_ms() / st.precision_ms * st.precision_ms;
        Ok(TimerStats {
            enqueue_behind,
            dequeue_behind_ms: (now - st.read_time_ms).max(0),
            read_time_ms: st.read_time_ms,
            queue_offset: st.queue_offset,
            ..st.stats
        })
    }
}

impl TimerState {
    /// Writes the unit of a timer-topic message due at `deliver_ms` and chains it into its slot
    /// (one within the roll window when it is due later, marked ROLL).
    fn enqueue_unit(
        &mut self,
        cq_unit: &crate::consume_queue::Unit,
        deliver_ms: i64,
        write_time: i64,
        recall: bool,
        real_topic: Option<&str>,
    ) -> Result<()> {
        let p = self.precision_ms;
        let window = self.roll_window_slots;
        let mut slot_time = deliver_ms;
        let mut magic = MAGIC_DEFAULT;
        if deliver_ms - write_time >= window * p {
            magic |= MAGIC_ROLL;
            // Leave the next round enough time: half a window when it would land close.
            slot_time = if deliver_ms - write_time - window * p < window / 3 * p {
                write_time + window / 2 * p
            } else {
                write_time + window * p
            };
        }
        if recall {
            magic |= MAGIC_DELETE;
        }
        let slot = self.wheel.slot(slot_time);
        let unit = TimerUnit {
            prev_pos: slot.last_pos,
            magic,
            write_time_ms: write_time,
            delay_ms: (slot_time - write_time) as i32,
            commitlog_offset: cq_unit.offset,
            size: cq_unit.size,
            topic_hash: topic_hash(real_topic),
        };
        let pos = self.log.append(&unit)? as i64;
        let first = if slot.first_pos == -1 {
            pos
        } else {
            slot.first_pos
        };
        let num = if recall { slot.num - 1 } else { slot.num + 1 };
        self.wheel.put_slot(slot_time, first, pos, num, slot.magic);
        self.stats.enqueued += 1;
        if !recall {
            self.stats.pending += 1;
        }
        Ok(())
    }
}

/// The `REAL_TOPIC+UNIQ_KEY` a recall's record cancels.
fn recall_key(record: &[u8]) -> Option<String> {
    let view = RecordView::parse(record, false).ok()?;
    parse_properties(view.properties)
        .iter()
        .find(|(n, _)| *n == property::TIMER_DEL_UNIQKEY)
        .map(|(_, v)| v.to_string())
}

fn is_recalled(view: &RecordView, recalled: &HashSet<String>) -> bool {
    if recalled.is_empty() {
        return false;
    }
    let props = parse_properties(view.properties);
    let find = |name: &str| props.iter().find(|(n, _)| *n == name).map(|e| e.1);
    match (find(property::REAL_TOPIC), find(property::UNIQ_KEY)) {
        (Some(topic), Some(uniq)) => recalled.contains(&format!("{topic}+{uniq}")),
        _ => false,
    }
}
