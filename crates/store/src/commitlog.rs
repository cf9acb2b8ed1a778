//! The CommitLog: every message of every topic, appended in one sequence of files.

use std::path::Path;
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::mapped_file::MappedFile;
use crate::mapped_file_queue::MappedFileQueue;
use crate::message::{
    record_head, RecordHead, RecordView, BLANK_MAGIC_CODE, END_FILE_MIN_BLANK_LENGTH,
};

pub struct CommitLog {
    files: MappedFileQueue,
    file_size: usize,
}

impl CommitLog {
    pub fn load(dir: &Path, file_size: usize, writable: bool, warm: bool) -> Result<Self> {
        let files = MappedFileQueue::load(dir, file_size, writable, warm)?;
        let file_size = files.file_size();
        // Until recovery finds the real end, every byte of every file may be read.
        for f in files.files() {
            f.set_wrote_position(file_size);
            f.set_flushed_position(file_size);
        }
        Ok(CommitLog { files, file_size })
    }

    pub fn file_size(&self) -> usize {
        self.file_size
    }

    pub fn files(&self) -> &MappedFileQueue {
        &self.files
    }

    pub fn min_offset(&self) -> u64 {
        self.files.min_offset()
    }

    pub fn max_offset(&self) -> u64 {
        self.files.max_offset()
    }

    /// Room for `len` bytes at the end of the log (writer only). When the last file cannot
    /// hold `len` plus an end-of-file blank, the blank is written and a new file started.
    pub fn reserve(&self, len: usize) -> Result<(Arc<MappedFile>, usize)> {
        if len + END_FILE_MIN_BLANK_LENGTH > self.file_size {
            return Err(StoreError::InvalidArgument(format!(
                "a record of {len} bytes does not fit in a CommitLog file of {} bytes",
                self.file_size
            )));
        }
        let last = match self.files.last() {
            Some(f) => f,
            None => self.files.roll(0)?,
        };
        let pos = last.wrote_position();
        let (file, pos) = if len + END_FILE_MIN_BLANK_LENGTH <= self.file_size - pos {
            (last, pos)
        } else {
            if pos < self.file_size {
                let remaining = (self.file_size - pos) as i32;
                let mut blank = [0u8; END_FILE_MIN_BLANK_LENGTH];
                blank[..4].copy_from_slice(&remaining.to_be_bytes());
                blank[4..].copy_from_slice(&BLANK_MAGIC_CODE.to_be_bytes());
                self.files.prepare_write(&last, pos + blank.len())?;
                last.write_at(pos, &blank);
                last.set_wrote_position(self.file_size);
            }
            let next = self
                .files
                .roll(last.file_from_offset() + self.file_size as u64)?;
            (next, 0)
        };
        self.files.prepare_write(&file, pos + len)?;
        Ok((file, pos))
    }

    /// Calls `f` with the `len` bytes at `offset` if they lie below `limit` within one file.
    pub fn with_bytes<R>(
        &self,
        offset: u64,
        len: usize,
        limit: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        if offset + len as u64 > limit {
            return None;
        }
        let file = self.files.find(offset)?;
        let pos = (offset - file.file_from_offset()) as usize;
        if pos + len > file.wrote_position() {
            return None;
        }
        file.slice(pos, len).map(f)
    }

    /// The whole record starting at `offset` (its length read from its head).
    pub fn with_record<R>(&self, offset: u64, limit: u64, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let file = self.files.find(offset)?;
        let pos = (offset - file.file_from_offset()) as usize;
        let rest = file.slice(pos, file.wrote_position().checked_sub(pos)?)?;
        let RecordHead::Message(size) = record_head(rest) else {
            return None;
        };
        if offset + size as u64 > limit {
            return None;
        }
        Some(f(&rest[..size]))
    }

    /// Walks records from `from` (a record boundary), following end-of-file blanks, calling
    /// `visit` for each. Stops at zeros or at the first record that fails its checks and
    /// returns the offset just past the last good record.
    pub fn walk(
        &self,
        from: u64,
        check_crc: bool,
        mut visit: impl FnMut(&RecordView) -> Result<()>,
    ) -> Result<u64> {
        let mut offset = from;
        loop {
            let Some(file) = self.files.find(offset) else {
                return Ok(offset);
            };
            let start = file.file_from_offset();
            let mut pos = (offset - start) as usize;
            let avail = file.wrote_position();
            loop {
                if pos >= avail {
                    if avail < self.file_size {
                        return Ok(start + pos as u64);
                    }
                    offset = start + self.file_size as u64;
                    break;
                }
                let rest = file.slice(pos, avail - pos).unwrap();
                match record_head(rest) {
                    RecordHead::Message(_) => match RecordView::parse(rest, check_crc) {
                        Ok(view) if view.physical_offset == (start + pos as u64) as i64 => {
                            visit(&view)?;
                            pos += view.total_size();
                        }
                        Ok(view) => {
                            log::warn!(
                                "CommitLog record at {} says it is at {}; treating it as the end",
                                start + pos as u64,
                                view.physical_offset
                            );
                            return Ok(start + pos as u64);
                        }
                        Err(e) => {
                            log::warn!("CommitLog ends at {}: {e}", start + pos as u64);
                            return Ok(start + pos as u64);
                        }
                    },
                    RecordHead::Blank => {
                        offset = start + self.file_size as u64;
                        break;
                    }
                    RecordHead::End => return Ok(start + pos as u64),
                    RecordHead::Invalid => {
                        log::warn!(
                            "CommitLog ends at {}: torn or corrupt record",
                            start + pos as u64
                        );
                        return Ok(start + pos as u64);
                    }
                }
            }
            if self.files.find(offset).is_none() {
                return Ok(offset);
            }
        }
    }

    /// Where the records end, found by walking the last file that holds any (without CRC
    /// checks). For a read-only view, which maps every file whole and so cannot take the end
    /// from its write position.
    pub fn data_end(&self) -> u64 {
        let files = self.files.files();
        for f in files.iter().rev() {
            let started = f
                .slice(0, 8)
                .is_some_and(|head| head.iter().any(|b| *b != 0));
            if started {
                return self
                    .walk(f.file_from_offset(), false, |_| Ok(()))
                    .unwrap_or_else(|_| f.file_from_offset());
            }
        }
        files.first().map_or(0, |f| f.file_from_offset())
    }

    /// Read-only views: forgets files the writer deleted and maps new ones whole (a view reads
    /// up to what the records themselves say).
    pub fn refresh(&self) -> Result<()> {
        let known = self.files.last().map(|f| f.file_from_offset());
        self.files.refresh()?;
        for f in self.files.files() {
            if known.is_none_or(|k| f.file_from_offset() > k) {
                f.set_wrote_position(self.file_size);
                f.set_flushed_position(self.file_size);
            }
        }
        Ok(())
    }

    /// RocketMQ's `CommitLog.deleteExpiredFile`: deletes head files last modified more than
    /// `expired_ms` before `now_ms` (any age with `clean_at_once`), never the file being
    /// written, never one that ends past `keep_from` (tiered storage has not taken it yet), at
    /// most `max` of them, with `pause` between two (false stops). Returns the deleted paths.
    pub fn delete_expired_files(
        &self,
        expired_ms: i64,
        now_ms: i64,
        pause: impl FnMut() -> bool,
        clean_at_once: bool,
        max: usize,
        keep_from: Option<u64>,
    ) -> Result<Vec<std::path::PathBuf>> {
        self.files.delete_head_files(max, pause, |f| {
            if keep_from.is_some_and(|k| f.file_from_offset() + f.file_size() as u64 > k) {
                return false;
            }
            if clean_at_once {
                return true;
            }
            match last_modified_ms(f.path()) {
                Some(modified) => now_ms >= modified.saturating_add(expired_ms),
                None => false,
            }
        })
    }

    pub fn truncate_to(&self, end: u64) -> Result<()> {
        self.files.truncate_to(end)
    }

    pub fn flush(&self, least_pages: usize) -> Result<u64> {
        self.files.flush(least_pages)
    }
}

/// A file's last modification time in ms since the epoch (`File.lastModified`).
pub fn last_modified_ms(path: &Path) -> Option<i64> {
    let modified = std::fs::metadata(path).ok()?.modified().ok()?;
    let since = modified.duration_since(std::time::UNIX_EPOCH).ok()?;
    Some(since.as_millis() as i64)
}
