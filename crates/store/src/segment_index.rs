//! What tiered storage keeps beside a sealed CommitLog file so that its messages are found again
//! once the local consume queues and index files are gone: each queue's units (the consume queue's
//! 20 bytes: CommitLog offset, size, tags code), in runs of consecutive queue offsets, and a key
//! index (Java `hashCode` of `topic#key` for each KEYS word and UNIQ_KEY, with the record's
//! CommitLog offset, sorted by hash). Python writes them as objects (`ferromq.tiered.segments`).
//!
//! Transaction halves and rollbacks get no unit, as dispatch gives them none. A record dispatched
//! into light message queues (INNER_MULTI_DISPATCH: a lite message's lite topic) has a unit in
//! queue 0 of each too, at its offset there (INNER_MULTI_QUEUE_OFFSET).

use std::collections::BTreeMap;

use crate::error::{Result, StoreError};
use crate::hash::{java_string_hash, tags_code};
use crate::lmq;
use crate::message::{record_head, sysflag, DispatchProperties, RecordHead, RecordView};

/// One queue's consecutive offsets in the file, and where their units are in [`SegmentIndex::units`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub topic: String,
    pub queue_id: i32,
    pub first: i64,
    pub count: usize,
    /// Index of the run's first unit (of 20 bytes) in `units`.
    pub unit_index: usize,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    /// CommitLog offset after the file's last record.
    pub end: i64,
    /// Store times of the file's messages (-1 without any).
    pub min_store_timestamp: i64,
    pub max_store_timestamp: i64,
    pub runs: Vec<Run>,
    /// The units of every run, back to back, big-endian as in a consume queue.
    pub units: Vec<u8>,
    /// (hash, CommitLog offset) entries, 12 bytes each, big-endian, sorted.
    pub keys: Vec<u8>,
}

pub const UNIT_SIZE: usize = 20;
type Unit = (i64, i64, i32, i64);
pub const KEY_SIZE: usize = 12;

/// Indexes the records of a CommitLog file whose first byte is at CommitLog offset `start`,
/// up to its end-of-file blank (or the end of `data`).
pub fn index_segment(data: &[u8], start: i64) -> Result<SegmentIndex> {
    // Per queue: (queue offset, CommitLog offset, size, tags code) of each unit.
    let mut queues: BTreeMap<(&str, i32), Vec<Unit>> = BTreeMap::new();
    let mut keys: Vec<(i32, i64)> = Vec::new();
    let mut out = SegmentIndex {
        min_store_timestamp: -1,
        max_store_timestamp: -1,
        ..Default::default()
    };
    let mut at = 0usize;
    while at < data.len() {
        let size = match record_head(&data[at..]) {
            RecordHead::Message(size) => size,
            RecordHead::Blank | RecordHead::End => break,
            RecordHead::Invalid => {
                return Err(StoreError::Corrupt {
                    path: Default::default(),
                    reason: format!("no record at CommitLog offset {}", start + at as i64),
                })
            }
        };
        let rec = RecordView::parse(&data[at..at + size], false)?;
        let phys = start + at as i64;
        let ts = rec.store_timestamp;
        if out.min_store_timestamp < 0 || ts < out.min_store_timestamp {
            out.min_store_timestamp = ts;
        }
        out.max_store_timestamp = out.max_store_timestamp.max(ts);
        let props = DispatchProperties::parse(rec.properties);
        let tran = rec.sys_flag & sysflag::TRANSACTION_ROLLBACK_TYPE;
        if tran != sysflag::TRANSACTION_PREPARED_TYPE && tran != sysflag::TRANSACTION_ROLLBACK_TYPE
        {
            let code = tags_code(props.tags);
            queues.entry((rec.topic, rec.queue_id)).or_default().push((
                rec.queue_offset,
                phys,
                size as i32,
                code,
            ));
            // The light message queues (lite topics) it was dispatched to: queue 0 of each.
            if let (Some(names), Some(offsets)) = (props.multi_dispatch, props.multi_queue_offset) {
                let pairs = names
                    .split(lmq::DISPATCH_SEPARATOR)
                    .zip(offsets.split(lmq::DISPATCH_SEPARATOR));
                for (name, offset) in pairs.filter(|(name, _)| lmq::is_lmq(name)) {
                    if let Ok(offset) = offset.parse::<i64>() {
                        let unit = (offset, phys, size as i32, code);
                        queues.entry((name, 0)).or_default().push(unit);
                    }
                }
            }
        }
        for key in crate::message::index_tokens(props.uniq_key, props.keys) {
            keys.push((java_string_hash(&format!("{}#{key}", rec.topic)), phys));
        }
        at += size;
    }
    out.end = start + at as i64;
    for ((topic, queue_id), mut units) in queues {
        units.sort_unstable();
        let mut first = 0;
        for i in 0..units.len() {
            // A gap in the queue's offsets (not seen in one file, but not assumed) starts a run.
            if i + 1 == units.len() || units[i + 1].0 != units[i].0 + 1 {
                out.runs.push(Run {
                    topic: topic.to_string(),
                    queue_id,
                    first: units[first].0,
                    count: i + 1 - first,
                    unit_index: out.units.len() / UNIT_SIZE,
                });
                for &(_, phys, size, code) in &units[first..=i] {
                    out.units.extend_from_slice(&phys.to_be_bytes());
                    out.units.extend_from_slice(&size.to_be_bytes());
                    out.units.extend_from_slice(&code.to_be_bytes());
                }
                first = i + 1;
            }
        }
    }
    keys.sort_unstable();
    out.keys.reserve(keys.len() * KEY_SIZE);
    for (hash, phys) in keys {
        out.keys.extend_from_slice(&hash.to_be_bytes());
        out.keys.extend_from_slice(&phys.to_be_bytes());
    }
    Ok(out)
}

/// [`index_segment`] of the CommitLog file at `path` (mapped read-only, not read into memory).
pub fn index_segment_file(path: &std::path::Path, start: i64) -> Result<SegmentIndex> {
    let file = std::fs::File::open(path).map_err(crate::error::io_err(path))?;
    // SAFETY: a sealed CommitLog file: no writer changes it while it is mapped here.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(crate::error::io_err(path))?;
    index_segment(&map, start)
}
