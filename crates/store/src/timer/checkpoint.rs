//! `config/timercheck`: how far the timer got (Java's `TimerCheckpoint`), one page of longs:
//! the last read time (ms), the timer log position flushed, the timer topic's queue offset
//! consumed, the master's (a slave's copy), and the data version (state version, timestamp,
//! counter).

use std::path::{Path, PathBuf};

use crate::error::{io_err, Result};

const PAGE: usize = 4096;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerCheckpoint {
    pub last_read_time_ms: i64,
    pub last_timer_log_flush_pos: i64,
    pub last_timer_queue_offset: i64,
    pub master_timer_queue_offset: i64,
    pub state_version: i64,
    pub timestamp: i64,
    pub counter: i64,
}

impl TimerCheckpoint {
    /// The checkpoint at `path`; all zeros when the file does not exist.
    pub fn load(path: &Path) -> Result<TimerCheckpoint> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(io_err(path)(e)),
        };
        let long = |at: usize| {
            bytes
                .get(at..at + 8)
                .map_or(0, |b| i64::from_be_bytes(b.try_into().unwrap()))
        };
        Ok(TimerCheckpoint {
            last_read_time_ms: long(0),
            last_timer_log_flush_pos: long(8),
            last_timer_queue_offset: long(16),
            master_timer_queue_offset: long(24),
            state_version: long(32),
            timestamp: long(40),
            counter: long(48),
        })
    }

    /// Writes the checkpoint to `path` (a page, as Java maps it) and syncs it.
    pub fn save(&self, path: &Path) -> Result<()> {
        let mut page = vec![0u8; PAGE];
        let fields = [
            self.last_read_time_ms,
            self.last_timer_log_flush_pos,
            self.last_timer_queue_offset,
            self.master_timer_queue_offset,
            self.state_version,
            self.timestamp,
            self.counter,
        ];
        for (i, v) in fields.iter().enumerate() {
            page[i * 8..i * 8 + 8].copy_from_slice(&v.to_be_bytes());
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        // Written beside and renamed over: a crash leaves the old checkpoint or the new one.
        let tmp: PathBuf = path.with_extension("tmp");
        std::fs::write(&tmp, &page).map_err(io_err(&tmp))?;
        std::fs::File::open(&tmp)
            .and_then(|f| f.sync_all())
            .map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_is_a_page_of_big_endian_longs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config").join("timercheck");
        assert_eq!(
            TimerCheckpoint::load(&path).unwrap(),
            TimerCheckpoint::default()
        );
        let cp = TimerCheckpoint {
            last_read_time_ms: 1_700_000_000_000,
            last_timer_log_flush_pos: 5_200,
            last_timer_queue_offset: 100,
            master_timer_queue_offset: 0,
            state_version: 1,
            timestamp: 1_700_000_000_001,
            counter: 3,
        };
        cp.save(&path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 4096);
        assert_eq!(&bytes[8..16], &5_200i64.to_be_bytes());
        assert_eq!(&bytes[48..56], &3i64.to_be_bytes());
        assert_eq!(TimerCheckpoint::load(&path).unwrap(), cp);
    }
}
