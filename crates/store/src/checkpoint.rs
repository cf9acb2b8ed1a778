//! `{root}/checkpoint`: three big-endian longs at the head of a 4096-byte file.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{io_err, Result};

const CHECKPOINT_FILE_SIZE: u64 = 4096;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckpointTimes {
    /// Store time of the last CommitLog message known to be flushed.
    pub physic_msg_timestamp: i64,
    /// Store time of the last message whose ConsumeQueue unit is flushed.
    pub logics_msg_timestamp: i64,
    /// End time of the last flushed index file.
    pub index_msg_timestamp: i64,
}

impl CheckpointTimes {
    /// The store time before which everything is known to be dispatched and durable.
    pub fn min_timestamp(&self) -> i64 {
        (self.physic_msg_timestamp.min(self.logics_msg_timestamp) - 3000).max(0)
    }
}

pub struct Checkpoint {
    path: PathBuf,
    file: File,
    pub times: CheckpointTimes,
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(path))?;
        let times = read_times(&file, path)?;
        if file.metadata().map_err(io_err(path))?.len() < CHECKPOINT_FILE_SIZE {
            file.set_len(CHECKPOINT_FILE_SIZE).map_err(io_err(path))?;
        }
        Ok(Checkpoint {
            path: path.to_path_buf(),
            file,
            times,
        })
    }

    /// Reads a checkpoint without creating or locking anything.
    pub fn read(path: &Path) -> Result<CheckpointTimes> {
        match File::open(path) {
            Ok(f) => read_times(&f, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(CheckpointTimes::default()),
            Err(e) => Err(io_err(path)(e)),
        }
    }

    /// Writes the times; with `sync`, waits until they are on disk.
    pub fn write(&mut self, sync: bool) -> Result<()> {
        let mut b = [0u8; 24];
        b[0..8].copy_from_slice(&self.times.physic_msg_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.times.logics_msg_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.times.index_msg_timestamp.to_be_bytes());
        self.file.write_all_at(&b, 0).map_err(io_err(&self.path))?;
        if sync {
            self.file.sync_data().map_err(io_err(&self.path))?;
        }
        Ok(())
    }
}

fn read_times(file: &File, path: &Path) -> Result<CheckpointTimes> {
    let mut b = [0u8; 24];
    let n = file.read_at(&mut b, 0).map_err(io_err(path))?;
    if n < 24 {
        return Ok(CheckpointTimes::default());
    }
    let l = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().unwrap());
    Ok(CheckpointTimes {
        physic_msg_timestamp: l(0),
        logics_msg_timestamp: l(8),
        index_msg_timestamp: l(16),
    })
}

/// `{root}/lock`: an exclusive lock on byte 0 for as long as a writer has the store open.
/// Open-file-description locks conflict with Java's `FileChannel.tryLock` (a POSIX record lock)
/// and with a second writer in the same process.
pub struct StoreLock {
    _file: File,
}

impl StoreLock {
    pub fn acquire(path: &Path) -> Result<Self> {
        use std::os::fd::AsRawFd;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(path))?;
        // SAFETY: a zeroed flock is a valid value; fcntl gets a pointer to it for the call only.
        let mut fl: libc::flock = unsafe { std::mem::zeroed() };
        fl.l_type = libc::F_WRLCK as libc::c_short;
        fl.l_whence = libc::SEEK_SET as libc::c_short;
        fl.l_start = 0;
        fl.l_len = 1;
        let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            return match err.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EACCES) => Err(crate::error::StoreError::Locked(
                    path.parent().unwrap_or(path).to_path_buf(),
                )),
                _ => Err(io_err(path)(err)),
            };
        }
        file.write_all_at(b"lock", 0).map_err(io_err(path))?;
        Ok(StoreLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trip_and_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("checkpoint");
        let mut cp = Checkpoint::open(&path).unwrap();
        cp.times = CheckpointTimes {
            physic_msg_timestamp: 1,
            logics_msg_timestamp: 2,
            index_msg_timestamp: 3,
        };
        cp.write(true).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len(), 4096);
        assert_eq!(
            &bytes[..24],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3]
        );
        assert_eq!(Checkpoint::read(&path).unwrap(), cp.times);
    }

    #[test]
    fn second_lock_fails() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        let _held = StoreLock::acquire(&path).unwrap();
        assert!(matches!(
            StoreLock::acquire(&path),
            Err(crate::error::StoreError::Locked(_))
        ));
    }
}
