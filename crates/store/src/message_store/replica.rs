//! What master–slave replication needs from a store: the master reads CommitLog bytes by offset;
//! the slave writes the master's bytes at the same offsets (so its files are byte-identical) and
//! builds its consume queues and index from them itself.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Inner, MessageStore};
use crate::config::FlushDiskType;
use crate::error::{Result, StoreError};
use crate::message::{pos, RecordView, BLANK_MAGIC_CODE, MESSAGE_MAGIC_CODE};

/// A handle on a store's CommitLog for the replication threads (cheap to clone).
#[derive(Clone)]
pub struct ReplicaLog {
    inner: Arc<Inner>,
}

impl MessageStore {
    /// The CommitLog as replication sees it (fails on a read-only view).
    pub fn replica_log(&self) -> Result<ReplicaLog> {
        self.writable()?;
        Ok(ReplicaLog {
            inner: self.inner.clone(),
        })
    }
}

impl ReplicaLog {
    pub fn file_size(&self) -> usize {
        self.inner.commitlog.file_size()
    }

    pub fn max_offset(&self) -> u64 {
        self.inner.commitlog.max_offset()
    }

    pub fn min_offset(&self) -> u64 {
        self.inner.commitlog.min_offset()
    }

    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// Master: calls `f` with up to `max_len` published bytes from `offset`, all in one file
    /// (RocketMQ's `getCommitLogData`); `None` when nothing is there (yet, or any more).
    pub fn with_data<R>(
        &self,
        offset: u64,
        max_len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        let file = self.inner.commitlog.files().find(offset)?;
        let at = (offset - file.file_from_offset()) as usize;
        let avail = file.wrote_position().checked_sub(at)?;
        if avail == 0 {
            return None;
        }
        file.slice(at, avail.min(max_len)).map(f)
    }

    /// Slave: checks that bytes the master sends for `offset` can continue this log: when they
    /// start where the last whole record ended, they must start a record placed at `offset` or an
    /// end-of-file blank. Returns why not.
    pub fn check_continuation(&self, offset: u64, dispatched: u64, data: &[u8]) -> Option<String> {
        if offset != dispatched || data.len() < pos::PHYSICAL_OFFSET + 8 {
            return None;
        }
        let magic = i32::from_be_bytes(data[4..8].try_into().unwrap());
        if magic == BLANK_MAGIC_CODE {
            return None;
        }
        let placed = i64::from_be_bytes(
            data[pos::PHYSICAL_OFFSET..pos::PHYSICAL_OFFSET + 8]
                .try_into()
                .unwrap(),
        );
        if magic != MESSAGE_MAGIC_CODE || placed != offset as i64 {
            return Some(format!(
                "the master's bytes at {offset} are not a record placed there (magic {magic:#x}, \
                 record offset {placed})"
            ));
        }
        None
    }

    /// Slave: appends the master's `data` at `offset`, which must be this log's end (or, for a
    /// log without data, a file boundary where it then starts). RocketMQ's `appendData`.
    pub fn append_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let inner = &self.inner;
        let cl = &inner.commitlog;
        let files = cl.files();
        let file_size = cl.file_size();
        let _guard = inner.put_lock.lock().unwrap();
        let end = cl.max_offset();
        let empty =
            files.last().is_none_or(|f| f.wrote_position() == 0) && files.files().len() <= 1;
        if empty && files.last().is_none_or(|f| f.file_from_offset() != offset) {
            files.restart_at(offset)?;
        } else if offset != end {
            return Err(StoreError::InvalidArgument(format!(
                "the master sends CommitLog offset {offset} but this log ends at {end}"
            )));
        }
        let mut at = offset;
        let mut rest = data;
        while !rest.is_empty() {
            let file = match files.last() {
                Some(f) if at < f.file_from_offset() + file_size as u64 => f,
                Some(f) => files.roll(f.file_from_offset() + file_size as u64)?,
                None => files.roll(at)?,
            };
            let p = (at - file.file_from_offset()) as usize;
            let n = rest.len().min(file_size - p);
            files.prepare_write(&file, p + n)?;
            file.write_at(p, &rest[..n]);
            file.set_wrote_position(p + n);
            at += n as u64;
            rest = &rest[n..];
        }
        drop(_guard);
        if inner.config.flush_disk_type == FlushDiskType::Sync {
            inner.flush.request(at);
        }
        Ok(())
    }

    /// Slave: builds consume-queue units and index entries for the whole records between
    /// `from` (a record boundary) and the log's end. Returns where the next record starts.
    /// A record that cannot be right (bad magic, placed elsewhere, bad CRC) is an error.
    pub fn dispatch_from(&self, from: u64) -> Result<u64> {
        let inner = &self.inner;
        let cl = &inner.commitlog;
        let file_size = cl.file_size() as u64;
        let mut at = from;
        let mut last_ts = None;
        while let Some(file) = cl.files().find(at) {
            let p = (at - file.file_from_offset()) as usize;
            let avail = file.wrote_position().saturating_sub(p);
            let Some(rest) = file.slice(p, avail) else {
                break;
            };
            if rest.len() < 8 {
                break;
            }
            let size = i32::from_be_bytes(rest[0..4].try_into().unwrap());
            let magic = i32::from_be_bytes(rest[4..8].try_into().unwrap());
            if magic == BLANK_MAGIC_CODE {
                at = file.file_from_offset() + file_size;
                continue;
            }
            if magic != MESSAGE_MAGIC_CODE || size < pos::BORN_HOST as i32 {
                return Err(corrupt(at, "no record starts here"));
            }
            let size = size as usize;
            if size > rest.len() {
                // The rest of this record comes with the next chunk.
                break;
            }
            let view = RecordView::parse(&rest[..size], true).map_err(|e| corrupt(at, e))?;
            if view.physical_offset != at as i64 {
                return Err(corrupt(
                    at,
                    format!("the record says it is at {}", view.physical_offset),
                ));
            }
            {
                let _guard = inner.put_lock.lock().unwrap();
                inner.dispatch(&view)?;
            }
            last_ts = Some(view.store_timestamp);
            at += size as u64;
        }
        if let Some(ts) = last_ts {
            inner.last_store_ts.fetch_max(ts, Ordering::AcqRel);
        }
        Ok(at)
    }
}

impl ReplicaLog {
    /// Cuts the CommitLog at `end`, a record boundary, with the consume-queue units that point
    /// past it: what a former master wrote after the last epoch its group has in common with
    /// the new master (RocketMQ 5.x's `truncateInvalidMsg`). Index entries past `end` stay;
    /// queries read the CommitLog at their offset and see whatever is there by then.
    pub fn truncate_to(&self, end: u64) -> Result<()> {
        let inner = &self.inner;
        let cl = &inner.commitlog;
        let _guard = inner.put_lock.lock().unwrap();
        let max = cl.max_offset();
        if end >= max {
            return Ok(());
        }
        if end < cl.min_offset() {
            return Err(StoreError::InvalidArgument(format!(
                "cannot cut the CommitLog at {end}: it starts at {}",
                cl.min_offset()
            )));
        }
        if end > 0 {
            let starts_record = cl.files().find(end).is_some_and(|f| {
                let at = (end - f.file_from_offset()) as usize;
                at == 0
                    || f.slice(at, 8).is_some_and(|b| {
                        let magic = i32::from_be_bytes(b[4..8].try_into().unwrap());
                        magic == MESSAGE_MAGIC_CODE || magic == BLANK_MAGIC_CODE
                    })
            });
            if !starts_record {
                return Err(StoreError::InvalidArgument(format!(
                    "cannot cut the CommitLog at {end}: no record starts there"
                )));
            }
        }
        log::warn!(
            "cutting the CommitLog from {max} back to {end}: data the new master does not have"
        );
        cl.truncate_to(end)?;
        for cq in inner.all_queues() {
            cq.truncate_dirty(end as i64)?;
        }
        inner.flush.rewind(end);
        inner.flush_queues(0, true)?;
        cl.flush(0)?;
        Ok(())
    }
}

fn corrupt(at: u64, why: impl std::fmt::Display) -> StoreError {
    StoreError::InvalidArgument(format!(
        "replicated CommitLog data at {at} is not valid: {why}"
    ))
}
