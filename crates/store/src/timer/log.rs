//! `timerlog/`: the timer's log of 52-byte units (Java's `TimerLog`).
//!
//! A unit: size (int, 52), the position of the previous unit of its slot (long, -1 for the
//! first), magic (int), the write time in ms (long), the delay from that time in ms (int), the
//! message's CommitLog offset (long) and size (int), the real topic's hash (int), a reserved long
//! (0). A unit never crosses a file end: when one does not fit with room for a blank after it,
//! the rest of the file is a blank (its length, a zero long, [`BLANK_MAGIC`]) and the unit goes
//! at the start of the next file.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::mapped_file::MappedFile;
use crate::mapped_file_queue::MappedFileQueue;

pub const UNIT_SIZE: usize = 4 + 8 + 4 + 8 + 4 + 8 + 4 + 4 + 8;
/// Java's `0xBBCCDDEE ^ 1880681586 + 8` (the addition binds first).
pub const BLANK_MAGIC: i32 = (0xBBCC_DDEE_u32 ^ (1_880_681_586 + 8)) as i32;
/// A blank's length: size, a zero long, magic.
const MIN_BLANK_LEN: usize = 4 + 8 + 4;

/// One unit of the timer log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerUnit {
    /// The previous unit of the same slot (-1: none).
    pub prev_pos: i64,
    pub magic: i32,
    pub write_time_ms: i64,
    /// The deliver time minus `write_time_ms`.
    pub delay_ms: i32,
    pub commitlog_offset: i64,
    pub size: i32,
    pub topic_hash: i32,
}

impl TimerUnit {
    /// When the message is due.
    pub fn deliver_time_ms(&self) -> i64 {
        self.write_time_ms + self.delay_ms as i64
    }

    pub fn encode(&self) -> [u8; UNIT_SIZE] {
        let mut out = [0u8; UNIT_SIZE];
        out[0..4].copy_from_slice(&(UNIT_SIZE as i32).to_be_bytes());
        out[4..12].copy_from_slice(&self.prev_pos.to_be_bytes());
        out[12..16].copy_from_slice(&self.magic.to_be_bytes());
        out[16..24].copy_from_slice(&self.write_time_ms.to_be_bytes());
        out[24..28].copy_from_slice(&self.delay_ms.to_be_bytes());
        out[28..36].copy_from_slice(&self.commitlog_offset.to_be_bytes());
        out[36..40].copy_from_slice(&self.size.to_be_bytes());
        out[40..44].copy_from_slice(&self.topic_hash.to_be_bytes());
        // 44..52: reserved, 0.
        out
    }

    /// The unit at the start of `bytes`, or None when they hold no unit (a blank, zeros, a
    /// torn write).
    pub fn decode(bytes: &[u8]) -> Option<TimerUnit> {
        let b = bytes.get(..UNIT_SIZE)?;
        let int = |at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        let long = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().unwrap());
        let magic = int(12);
        if int(0) != UNIT_SIZE as i32 || magic & super::MAGIC_DEFAULT == 0 || magic & !7 != 0 {
            return None;
        }
        Some(TimerUnit {
            prev_pos: long(4),
            magic,
            write_time_ms: long(16),
            delay_ms: int(24),
            commitlog_offset: long(28),
            size: int(36),
            topic_hash: int(40),
        })
    }
}

/// The timer log: its files, appended to by one writer.
pub struct TimerLog {
    files: MappedFileQueue,
}

impl TimerLog {
    /// Opens (or creates) the log in `dir` with files of `file_size` bytes
    /// (`mappedFileSizeTimerLog`). The last file's end is found by reading its units: it ends at
    /// the first place that holds no unit (a crash may leave a torn unit; it is not kept).
    pub fn open(dir: &Path, file_size: usize) -> Result<TimerLog> {
        if file_size < UNIT_SIZE + MIN_BLANK_LEN {
            return Err(StoreError::InvalidArgument(format!(
                "mappedFileSizeTimerLog {file_size} is smaller than a unit and a blank"
            )));
        }
        let files = MappedFileQueue::load(dir, file_size, true, false)?;
        let all = files.files();
        for (i, file) in all.iter().enumerate() {
            let end = if i + 1 < all.len() {
                file.file_size()
            } else {
                units_end(file)
            };
            file.set_wrote_position(end);
            file.set_flushed_position(end);
        }
        Ok(TimerLog { files })
    }

    /// Where the next unit goes.
    pub fn end(&self) -> u64 {
        self.files.max_offset()
    }

    /// Appends `unit`; its position in the log.
    pub fn append(&self, unit: &TimerUnit) -> Result<u64> {
        let file_size = self.files.file_size();
        let mut file = match self.files.last() {
            Some(f) if !f.is_full() => f,
            Some(f) => self.files.roll(f.file_from_offset() + file_size as u64)?,
            None => self.files.roll(0)?,
        };
        let mut pos = file.wrote_position();
        // Blocks first: a write into a hole of a full disk would kill the process (SIGBUS).
        file.reserve((pos + UNIT_SIZE + MIN_BLANK_LEN).min(file_size))?;
        if pos + UNIT_SIZE + MIN_BLANK_LEN > file_size {
            let mut blank = [0u8; MIN_BLANK_LEN];
            blank[0..4].copy_from_slice(&((file_size - pos) as i32).to_be_bytes());
            blank[12..16].copy_from_slice(&BLANK_MAGIC.to_be_bytes());
            file.write_at(pos, &blank);
            file.set_wrote_position(file_size);
            file = self
                .files
                .roll(file.file_from_offset() + file_size as u64)?;
            pos = 0;
            file.reserve(UNIT_SIZE + MIN_BLANK_LEN)?;
        }
        file.write_at(pos, &unit.encode());
        file.set_wrote_position(pos + UNIT_SIZE);
        Ok(file.file_from_offset() + pos as u64)
    }

    /// The unit at `position`, when one is there.
    pub fn read(&self, position: u64) -> Option<TimerUnit> {
        let file = self.files.find(position)?;
        let pos = (position - file.file_from_offset()) as usize;
        if pos + UNIT_SIZE > file.wrote_position() {
            return None;
        }
        TimerUnit::decode(file.slice(pos, UNIT_SIZE)?)
    }

    /// Calls `f` with each unit from the start of the file holding `from` on, with its position.
    pub fn scan(&self, from: u64, mut f: impl FnMut(u64, TimerUnit)) {
        for file in self.files.files() {
            let start = file.file_from_offset();
            if start + file.file_size() as u64 <= from {
                continue;
            }
            let mut pos = 0;
            while pos + UNIT_SIZE <= file.wrote_position() {
                match file.slice(pos, UNIT_SIZE).and_then(TimerUnit::decode) {
                    Some(unit) => f(start + pos as u64, unit),
                    None => break, // the file's blank
                }
                pos += UNIT_SIZE;
            }
        }
    }

    /// Deletes the files before the one holding `position` whose units all point below
    /// `min_commitlog_offset` (their messages are gone from the CommitLog, as Java's
    /// `deleteExpiredFileByOffsetForTimerLog` decides); how many went.
    pub fn delete_expired(&self, min_commitlog_offset: i64, position: u64) -> Result<usize> {
        let expired = |file: &MappedFile| {
            let last = (0..file.wrote_position() / UNIT_SIZE).rev().find_map(|i| {
                file.slice(i * UNIT_SIZE, UNIT_SIZE)
                    .and_then(TimerUnit::decode)
            });
            file.file_from_offset() + file.file_size() as u64 <= position
                && last.is_some_and(|u| u.commitlog_offset < min_commitlog_offset)
        };
        Ok(self
            .files
            .delete_head_files(usize::MAX, || true, expired)?
            .len())
    }

    /// Writes what was appended to disk; the position up to which the log is on disk.
    pub fn flush(&self) -> Result<u64> {
        self.files.flush(0)
    }

    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.files.files()
    }
}

/// The end of the units written from the start of `file`.
fn units_end(file: &MappedFile) -> usize {
    let mut pos = 0;
    while let Some(bytes) = file.slice(pos, UNIT_SIZE) {
        if TimerUnit::decode(bytes).is_none() {
            let blank = file
                .slice(pos, MIN_BLANK_LEN)
                .is_some_and(|b| i32::from_be_bytes(b[12..16].try_into().unwrap()) == BLANK_MAGIC);
            return if blank { file.file_size() } else { pos };
        }
        pos += UNIT_SIZE;
    }
    // Less than a unit left: only a blank fits there.
    file.file_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(n: i64) -> TimerUnit {
        TimerUnit {
            prev_pos: n - 1,
            magic: super::super::MAGIC_DEFAULT,
            write_time_ms: 1_700_000_000_000 + n,
            delay_ms: 5_000,
            commitlog_offset: n * 100,
            size: 200,
            topic_hash: crate::hash::java_string_hash("T"),
        }
    }

    #[test]
    fn the_blank_magic_is_javas() {
        // 0xBBCCDDEE ^ 1880681594, as Java evaluates `0xBBCCDDEE ^ 1880681586 + 8`.
        assert_eq!(BLANK_MAGIC, 0xBBCC_DDEE_u32 as i32 ^ 1_880_681_594);
        assert_eq!(UNIT_SIZE, 52);
    }

    #[test]
    fn a_unit_is_laid_out_as_java_writes_it() {
        let u = unit(7);
        let b = u.encode();
        assert_eq!(&b[0..4], &52i32.to_be_bytes());
        assert_eq!(&b[4..12], &6i64.to_be_bytes());
        assert_eq!(&b[12..16], &1i32.to_be_bytes());
        assert_eq!(&b[24..28], &5_000i32.to_be_bytes());
        assert_eq!(&b[28..36], &700i64.to_be_bytes());
        assert_eq!(&b[36..40], &200i32.to_be_bytes());
        assert_eq!(&b[44..52], &[0u8; 8]);
        assert_eq!(TimerUnit::decode(&b), Some(u));
        assert_eq!(u.deliver_time_ms(), 1_700_000_005_007);
        assert_eq!(TimerUnit::decode(&[0u8; UNIT_SIZE]), None);
    }

    #[test]
    fn units_fill_a_file_then_a_blank_then_the_next_file_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        // Room for 3 units and a blank of 16: the 4th unit starts the next file.
        let size = 3 * UNIT_SIZE + MIN_BLANK_LEN + 10;
        let log = TimerLog::open(dir.path(), size).unwrap();
        let positions: Vec<u64> = (1..=5).map(|n| log.append(&unit(n)).unwrap()).collect();
        assert_eq!(positions[..3], [0, 52, 104]);
        assert_eq!(positions[3], size as u64);
        assert_eq!(positions[4], size as u64 + 52);
        let blank = log.files()[0].slice(156, MIN_BLANK_LEN).unwrap().to_vec();
        assert_eq!(&blank[0..4], &((size - 156) as i32).to_be_bytes());
        assert_eq!(&blank[12..16], &BLANK_MAGIC.to_be_bytes());
        log.flush().unwrap();
        drop(log);
        let log = TimerLog::open(dir.path(), size).unwrap();
        for (n, pos) in (1..=5).zip(&positions) {
            assert_eq!(log.read(*pos), Some(unit(n)));
        }
        assert_eq!(log.end(), size as u64 + 104);
        assert_eq!(log.append(&unit(6)).unwrap(), size as u64 + 104);
    }

    #[test]
    fn a_torn_last_unit_is_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let log = TimerLog::open(dir.path(), 1024).unwrap();
        log.append(&unit(1)).unwrap();
        let second = log.append(&unit(2)).unwrap();
        // A crash in the middle of the second unit: its size written, the rest not.
        log.files()[0].write_at(second as usize + 4, &[0u8; UNIT_SIZE - 4]);
        log.flush().unwrap();
        drop(log);
        let log = TimerLog::open(dir.path(), 1024).unwrap();
        assert_eq!(log.end(), second);
        assert_eq!(log.read(second), None);
    }
}
