//! ConsumeQueue: per (topic, queue id), fixed 20-byte units pointing into the CommitLog.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::Result;
use crate::mapped_file::MappedFile;
use crate::mapped_file_queue::MappedFileQueue;

pub const CQ_UNIT_SIZE: usize = 20;

/// What a read walks: units by queue offset, between a min and a max offset (a consume queue, or
/// a light message queue's window, [`crate::lmq::Window`]).
pub trait Units {
    fn unit(&self, offset: i64) -> Option<Unit>;
    fn min_offset(&self) -> i64;
    fn max_offset(&self) -> i64;
}

/// Pads the head of a queue that starts at a non-zero logical offset.
const PRE_BLANK: Unit = Unit {
    offset: 0,
    size: i32::MAX,
    tags_code: 0,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub offset: i64,
    pub size: i32,
    pub tags_code: i64,
}

impl Unit {
    pub fn parse(b: &[u8]) -> Unit {
        Unit {
            offset: i64::from_be_bytes(b[0..8].try_into().unwrap()),
            size: i32::from_be_bytes(b[8..12].try_into().unwrap()),
            tags_code: i64::from_be_bytes(b[12..20].try_into().unwrap()),
        }
    }

    pub fn encode(&self) -> [u8; CQ_UNIT_SIZE] {
        let mut out = [0u8; CQ_UNIT_SIZE];
        out[0..8].copy_from_slice(&self.offset.to_be_bytes());
        out[8..12].copy_from_slice(&self.size.to_be_bytes());
        out[12..20].copy_from_slice(&self.tags_code.to_be_bytes());
        out
    }

    /// RocketMQ's validity rule; the first invalid unit ends a queue.
    pub fn is_valid(&self) -> bool {
        self.offset >= 0 && self.size > 0
    }

    pub fn is_pre_blank(&self) -> bool {
        *self == PRE_BLANK
    }

    pub fn end(&self) -> i64 {
        self.offset + self.size as i64
    }
}

/// Rounds a configured file size up to whole units, as RocketMQ's getter does.
pub fn round_file_size(size: usize) -> usize {
    size.div_ceil(CQ_UNIT_SIZE).max(1) * CQ_UNIT_SIZE
}

pub struct ConsumeQueue {
    topic: String,
    queue_id: i32,
    files: MappedFileQueue,
    /// Byte offset of the first real (non pre-blank) unit.
    min_logic_offset: AtomicU64,
}

impl ConsumeQueue {
    pub fn load(
        root: &Path,
        topic: &str,
        queue_id: i32,
        file_size: usize,
        writable: bool,
    ) -> Result<Self> {
        let dir = root.join(topic).join(queue_id.to_string());
        let files = MappedFileQueue::load(&dir, file_size, writable, false)?;
        let cq = ConsumeQueue {
            topic: topic.to_string(),
            queue_id,
            files,
            min_logic_offset: AtomicU64::new(0),
        };
        cq.recover()?;
        Ok(cq)
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }

    /// Finds the end of the written units (scanning the last three files like RocketMQ) and,
    /// when writable, cuts everything after it.
    fn recover(&self) -> Result<()> {
        let files = self.files.files();
        if files.is_empty() {
            return Ok(());
        }
        let first_scanned = files.len().saturating_sub(3);
        for f in &files[..first_scanned] {
            f.set_wrote_position(f.file_size());
            f.set_flushed_position(f.file_size());
        }
        let mut end = files[first_scanned].file_from_offset();
        'files: for f in &files[first_scanned..] {
            let size = f.file_size();
            let mut pos = 0;
            while pos + CQ_UNIT_SIZE <= size {
                if !Unit::parse(f.slice(pos, CQ_UNIT_SIZE).unwrap()).is_valid() {
                    end = f.file_from_offset() + pos as u64;
                    break 'files;
                }
                pos += CQ_UNIT_SIZE;
            }
            end = f.file_from_offset() + size as u64;
        }
        self.files.truncate_to(end)?;
        self.fix_min_offset();
        Ok(())
    }

    /// Read-only views: picks up units (and files) a writer added since the last look.
    pub fn refresh(&self) -> Result<()> {
        self.files.refresh()?;
        let files = self.files.files();
        let Some(mut idx) = files.iter().position(|f| !f.is_full()) else {
            return Ok(());
        };
        while idx < files.len() {
            let f = &files[idx];
            let mut pos = f.wrote_position();
            while pos + CQ_UNIT_SIZE <= f.file_size()
                && Unit::parse(f.slice(pos, CQ_UNIT_SIZE).unwrap()).is_valid()
            {
                pos += CQ_UNIT_SIZE;
            }
            f.set_wrote_position(pos);
            if pos + CQ_UNIT_SIZE <= f.file_size() {
                break;
            }
            idx += 1;
        }
        self.fix_min_offset();
        Ok(())
    }

    fn fix_min_offset(&self) {
        let Some(first) = self.files.first() else {
            return;
        };
        let mut pos = 0;
        while pos < first.wrote_position()
            && Unit::parse(first.slice(pos, CQ_UNIT_SIZE).unwrap()).is_pre_blank()
        {
            pos += CQ_UNIT_SIZE;
        }
        self.min_logic_offset
            .store(first.file_from_offset() + pos as u64, Ordering::Release);
    }

    /// RocketMQ's `correctMinOffset`: the first unit of the first file that points at or past
    /// `phys_min` (the CommitLog's first offset) becomes the queue's min offset. Units before it
    /// point into deleted CommitLog files. Nothing changes if the first file has no such unit.
    pub fn correct_min_offset(&self, phys_min: i64) {
        let Some(first) = self.files.first() else {
            return;
        };
        let start = first.file_from_offset();
        let current = self.min_logic_offset.load(Ordering::Acquire);
        let mut pos = 0;
        while pos + CQ_UNIT_SIZE <= first.wrote_position() {
            let u = Unit::parse(first.slice(pos, CQ_UNIT_SIZE).unwrap());
            if !u.is_pre_blank() && u.offset >= phys_min {
                let at = start + pos as u64;
                if at != current {
                    log::info!(
                        "consume queue {}/{}: min offset {} (CommitLog starts at {phys_min})",
                        self.topic,
                        self.queue_id,
                        at / CQ_UNIT_SIZE as u64
                    );
                }
                self.min_logic_offset.store(at, Ordering::Release);
                return;
            }
            pos += CQ_UNIT_SIZE;
        }
        // Never below the first file still there.
        if current < start {
            self.min_logic_offset.store(start, Ordering::Release);
        }
    }

    /// RocketMQ's `ConsumeQueue.deleteExpiredFile`: deletes head files whose last unit points
    /// below `phys_min` (never the last file, never one not yet full), then corrects the min
    /// offset. Returns how many files went.
    pub fn delete_expired_files(&self, phys_min: i64) -> Result<usize> {
        let deleted = self.files.delete_head_files(
            usize::MAX,
            || true,
            |f| {
                let size = f.file_size();
                if f.wrote_position() < size {
                    return false;
                }
                let last = Unit::parse(f.slice(size - CQ_UNIT_SIZE, CQ_UNIT_SIZE).unwrap());
                last.offset < phys_min
            },
        )?;
        self.correct_min_offset(phys_min);
        Ok(deleted.len())
    }

    /// CommitLog end of the last unit, -1 when the queue has none (RocketMQ's `getLastOffset`).
    pub fn last_offset(&self) -> i64 {
        let max = self.max_offset();
        if max <= self.min_offset() {
            return -1;
        }
        self.unit(max - 1).map_or(-1, |u| u.end())
    }

    /// The queue's files (for removal of a whole queue).
    pub fn dir(&self) -> &Path {
        self.files.dir()
    }

    /// Logical offset of the first unit.
    pub fn min_offset(&self) -> i64 {
        (self.min_logic_offset.load(Ordering::Acquire) / CQ_UNIT_SIZE as u64) as i64
    }

    /// Logical offset one past the last unit.
    pub fn max_offset(&self) -> i64 {
        (self.files.max_offset() / CQ_UNIT_SIZE as u64) as i64
    }

    pub fn unit(&self, index: i64) -> Option<Unit> {
        if index < self.min_offset() || index >= self.max_offset() {
            return None;
        }
        let at = index as u64 * CQ_UNIT_SIZE as u64;
        let f = self.files.find(at)?;
        let pos = (at - f.file_from_offset()) as usize;
        if pos + CQ_UNIT_SIZE > f.wrote_position() {
            return None;
        }
        Some(Unit::parse(f.slice(pos, CQ_UNIT_SIZE)?))
    }

    /// Writes the unit for logical offset `index` (writer only). Units already present are
    /// skipped (recovery re-dispatch); a gap is padded with pre-blank units so that unit n
    /// stays at byte n * 20.
    pub fn put(&self, index: i64, unit: Unit) -> Result<()> {
        let max = self.max_offset();
        if index < max && !self.files.is_empty() {
            return Ok(());
        }
        let file_size = self.files.file_size() as u64;
        let target = index as u64 * CQ_UNIT_SIZE as u64;
        if self.files.is_empty() {
            // A queue whose first unit is not at a file start: pad the file's head.
            let f = self.files.roll(target / file_size * file_size)?;
            let head = (target - f.file_from_offset()) as usize;
            self.files.prepare_write(&f, head)?;
            for pos in (0..head).step_by(CQ_UNIT_SIZE) {
                f.write_at(pos, &PRE_BLANK.encode());
            }
            f.set_wrote_position(head);
            self.min_logic_offset.store(target, Ordering::Release);
        } else if index > max {
            log::warn!(
                "consume queue {}/{}: gap from {max} to {index}, padding with blank units",
                self.topic,
                self.queue_id
            );
            for i in max..index {
                self.append_unit(i as u64 * CQ_UNIT_SIZE as u64, PRE_BLANK)?;
            }
        }
        self.append_unit(target, unit)
    }

    /// Creates the file that will hold unit `first` and reserves the blocks of the `count` units
    /// from there that it holds, so that they can be written once their records are (writer
    /// only). Units of a batch that spill into the next file get it when they are written. A
    /// queue with no file yet is left to `put`, which pads the head of its first file.
    pub fn prepare(&self, first: i64, count: usize) -> Result<()> {
        if self.files.is_empty() || first < self.max_offset() {
            return Ok(());
        }
        let (f, pos) = self.writable_at(first as u64 * CQ_UNIT_SIZE as u64)?;
        let end = (pos + count * CQ_UNIT_SIZE).min(self.files.file_size());
        self.files.prepare_write(&f, end)
    }

    /// The file holding byte `at` of the queue, created if needed, with the unit there reserved.
    fn writable_at(&self, at: u64) -> Result<(Arc<MappedFile>, usize)> {
        let file_size = self.files.file_size() as u64;
        let f = match self.files.last() {
            Some(f) if at < f.file_from_offset() + file_size => f,
            _ => self.files.roll(at / file_size * file_size)?,
        };
        let pos = (at - f.file_from_offset()) as usize;
        self.files.prepare_write(&f, pos + CQ_UNIT_SIZE)?;
        Ok((f, pos))
    }

    fn append_unit(&self, at: u64, unit: Unit) -> Result<()> {
        let (f, pos) = self.writable_at(at)?;
        debug_assert_eq!(pos, f.wrote_position());
        let bytes = unit.encode();
        // Size last: a reader in another process that sees size > 0 sees the whole unit.
        f.write_at(pos, &bytes[..8]);
        f.write_at(pos + 12, &bytes[12..]);
        std::sync::atomic::fence(Ordering::Release);
        f.write_at(pos + 8, &bytes[8..12]);
        f.set_wrote_position(pos + CQ_UNIT_SIZE);
        Ok(())
    }

    /// Drops units that point at or past `phys_end` (the CommitLog was cut there).
    pub fn truncate_dirty(&self, phys_end: i64) -> Result<()> {
        let (min, mut max) = (self.min_offset(), self.max_offset());
        while max > min {
            match self.unit(max - 1) {
                Some(u) if u.end() > phys_end && !u.is_pre_blank() => max -= 1,
                _ => break,
            }
        }
        if max < self.max_offset() {
            log::info!(
                "consume queue {}/{}: truncated to {max} (CommitLog ends at {phys_end})",
                self.topic,
                self.queue_id
            );
            self.files.truncate_to(max as u64 * CQ_UNIT_SIZE as u64)?;
        }
        Ok(())
    }

    /// CommitLog end of the last unit (0 when empty).
    pub fn max_physical_end(&self) -> i64 {
        let max = self.max_offset();
        if max <= self.min_offset() {
            return 0;
        }
        self.unit(max - 1).map_or(0, |u| u.end())
    }

    pub fn flush(&self, least_pages: usize) -> Result<()> {
        self.files.flush(least_pages).map(|_| ())
    }

    /// Releases the flushed pages behind the last `hot_window` bytes; see
    /// `MappedFileQueue::release_cold_pages`.
    pub fn release_cold_pages(&self, hot_window: usize, sweep: bool) -> usize {
        self.files.release_cold_pages(hot_window, sweep)
    }
}

impl<T: Units + ?Sized> Units for Arc<T> {
    fn unit(&self, offset: i64) -> Option<Unit> {
        (**self).unit(offset)
    }

    fn min_offset(&self) -> i64 {
        (**self).min_offset()
    }

    fn max_offset(&self) -> i64 {
        (**self).max_offset()
    }
}

impl Units for ConsumeQueue {
    fn unit(&self, offset: i64) -> Option<Unit> {
        ConsumeQueue::unit(self, offset)
    }

    fn min_offset(&self) -> i64 {
        ConsumeQueue::min_offset(self)
    }

    fn max_offset(&self) -> i64 {
        ConsumeQueue::max_offset(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_golden_bytes() {
        let u = Unit {
            offset: 1234,
            size: 122,
            tags_code: 2598919,
        };
        let hex: String = u.encode().iter().map(|b| format!("{b:02X}")).collect();
        assert_eq!(hex, "00000000000004D20000007A000000000027A807");
        assert_eq!(Unit::parse(&u.encode()), u);
    }

    #[test]
    fn put_read_rollover_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let size = round_file_size(100); // 5 units per file
        {
            let cq = ConsumeQueue::load(dir.path(), "T", 0, size, true).unwrap();
            for i in 0..12 {
                cq.put(
                    i,
                    Unit {
                        offset: i * 100,
                        size: 100,
                        tags_code: i,
                    },
                )
                .unwrap();
            }
            cq.put(
                3,
                Unit {
                    offset: 999,
                    size: 1,
                    tags_code: 0,
                },
            )
            .unwrap(); // duplicate: skipped
            assert_eq!(cq.max_offset(), 12);
            assert_eq!(cq.unit(3).unwrap().offset, 300);
            assert_eq!(cq.unit(12), None);
        }
        let cq = ConsumeQueue::load(dir.path(), "T", 0, size, true).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (0, 12));
        assert_eq!(cq.max_physical_end(), 1200);
        cq.truncate_dirty(1000).unwrap();
        assert_eq!(cq.max_offset(), 10);
        let ro = ConsumeQueue::load(dir.path(), "T", 0, size, false).unwrap();
        assert_eq!(ro.max_offset(), 10);
    }

    #[test]
    fn queue_starting_mid_way_is_padded() {
        let dir = tempfile::tempdir().unwrap();
        let cq = ConsumeQueue::load(dir.path(), "T", 1, round_file_size(100), true).unwrap();
        cq.put(
            7,
            Unit {
                offset: 70,
                size: 10,
                tags_code: 0,
            },
        )
        .unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (7, 8));
        drop(cq);
        let cq = ConsumeQueue::load(dir.path(), "T", 1, round_file_size(100), true).unwrap();
        assert_eq!((cq.min_offset(), cq.max_offset()), (7, 8));
        assert_eq!(cq.unit(7).unwrap().offset, 70);
    }
}
