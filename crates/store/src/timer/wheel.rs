//! `timerwheel`: the timer's slots (Java's `TimerWheel`), one file of `2 × SLOTS_TOTAL` slots
//! of 32 bytes: the slot's time divided by the precision (long), the first and the last unit of
//! its chain in the timer log (longs), how many messages it holds (int), and a magic (int).
//! A time's slot is `time / precision % (2 × SLOTS_TOTAL)`; a slot whose stored time is not the
//! one asked for is empty for that time (it belongs to an earlier turn of the wheel).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::MmapMut;

use crate::error::{io_err, Result, StoreError};

/// Slots of one turn: seven days of seconds (`TIMER_WHEEL_TTL_DAY × DAY_SECS`), whatever the
/// precision.
pub const SLOTS_TOTAL: usize = 7 * 24 * 3600;
const SLOT_SIZE: usize = 32;

/// One slot of the wheel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// The slot's time in ms (a multiple of the precision), -1 when empty.
    pub time_ms: i64,
    pub first_pos: i64,
    pub last_pos: i64,
    pub num: i32,
    pub magic: i32,
}

impl Slot {
    /// What an empty slot reads as (Java's `new Slot(-1, -1, -1)`).
    pub const EMPTY: Slot = Slot {
        time_ms: -1,
        first_pos: -1,
        last_pos: -1,
        num: 0,
        magic: 0,
    };
}

/// The wheel, mapped.
pub struct TimerWheel {
    path: PathBuf,
    map: MmapMut,
    /// The file, for syncing without the map (Linux writes back pages dirtied through a shared
    /// mapping on fsync): a checkpoint syncs while the timer goes on writing.
    file: Arc<File>,
    precision_ms: i64,
}

impl TimerWheel {
    /// Opens (or creates) the wheel file at `path` for `precision_ms` (`timerPrecisionMs`). A file
    /// of another length is refused, as Java refuses it.
    pub fn open(path: &Path, precision_ms: i64) -> Result<TimerWheel> {
        if precision_ms <= 0 {
            return Err(StoreError::InvalidArgument(format!(
                "timerPrecisionMs must be positive, not {precision_ms}"
            )));
        }
        let len = (2 * SLOTS_TOTAL * SLOT_SIZE) as u64;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io_err(path))?;
        let found = file.metadata().map_err(io_err(path))?.len();
        if found != 0 && found != len {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("timer wheel of {found} bytes, expected {len}"),
            });
        }
        if found == 0 {
            // Its blocks are reserved now: a write into a hole of a full disk would kill the
            // process (SIGBUS) instead of failing.
            file.set_len(len).map_err(io_err(path))?;
            // SAFETY: plain libc call on a valid descriptor.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len as libc::off_t) };
            if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
                let e = std::io::Error::from_raw_os_error(rc);
                let _ = std::fs::remove_file(path);
                return Err(io_err(path)(e));
            }
        }
        // SAFETY: the file is this process's to map; the store's lock keeps other writers out.
        let map = unsafe { MmapMut::map_mut(&file) }.map_err(io_err(path))?;
        Ok(TimerWheel {
            path: path.to_path_buf(),
            map,
            file: Arc::new(file),
            precision_ms,
        })
    }

    pub fn precision_ms(&self) -> i64 {
        self.precision_ms
    }

    fn index(&self, time_ms: i64) -> usize {
        (time_ms / self.precision_ms).rem_euclid((2 * SLOTS_TOTAL) as i64) as usize * SLOT_SIZE
    }

    /// The slot of `time_ms`, or [`Slot::EMPTY`] when the slot holds another turn's time.
    pub fn slot(&self, time_ms: i64) -> Slot {
        let at = self.index(time_ms);
        let b = &self.map[at..at + SLOT_SIZE];
        let long = |o: usize| i64::from_be_bytes(b[o..o + 8].try_into().unwrap());
        let int = |o: usize| i32::from_be_bytes(b[o..o + 4].try_into().unwrap());
        let stored_time = long(0) * self.precision_ms;
        if stored_time != time_ms / self.precision_ms * self.precision_ms {
            return Slot::EMPTY;
        }
        Slot {
            time_ms: stored_time,
            first_pos: long(8),
            last_pos: long(16),
            num: int(24),
            magic: int(28),
        }
    }

    /// Writes the slot of `time_ms`.
    pub fn put_slot(&mut self, time_ms: i64, first_pos: i64, last_pos: i64, num: i32, magic: i32) {
        let at = self.index(time_ms);
        let b = &mut self.map[at..at + SLOT_SIZE];
        b[0..8].copy_from_slice(&(time_ms / self.precision_ms).to_be_bytes());
        b[8..16].copy_from_slice(&first_pos.to_be_bytes());
        b[16..24].copy_from_slice(&last_pos.to_be_bytes());
        b[24..28].copy_from_slice(&num.to_be_bytes());
        b[28..32].copy_from_slice(&magic.to_be_bytes());
    }

    /// Recovery's repair of a slot (Java's `reviseSlot(time, IGNORE, pos, true)`): the unit at
    /// `pos` is the newest of `time_ms`'s slot. A slot still holding another turn's time becomes
    /// this one's, its chain starting and ending at `pos` (count and magic left as they were).
    pub fn revise_last(&mut self, time_ms: i64, pos: i64) {
        let at = self.index(time_ms);
        let b = &mut self.map[at..at + SLOT_SIZE];
        let slot_time = time_ms / self.precision_ms;
        if i64::from_be_bytes(b[0..8].try_into().unwrap()) != slot_time {
            b[0..8].copy_from_slice(&slot_time.to_be_bytes());
            b[8..16].copy_from_slice(&pos.to_be_bytes());
        }
        b[16..24].copy_from_slice(&pos.to_be_bytes());
    }

    /// Messages in the slots from `start_ms` up to `end_ms` (at most one turn of the wheel).
    pub fn all_num(&self, start_ms: i64, end_ms: i64) -> i64 {
        let slots = ((end_ms - start_ms) / self.precision_ms).clamp(0, 2 * SLOTS_TOTAL as i64);
        (0..slots)
            .map(|i| self.slot(start_ms + i * self.precision_ms))
            .filter(|s| s.time_ms >= 0)
            .map(|s| s.num as i64)
            .sum()
    }

    /// Something that writes the wheel to disk (see [`WheelSync`]).
    pub fn syncer(&self) -> WheelSync {
        WheelSync {
            file: self.file.clone(),
            path: self.path.clone(),
        }
    }
}

/// Writes a wheel's pages to disk from another thread than its writer's.
pub struct WheelSync {
    file: Arc<File>,
    path: PathBuf,
}

impl WheelSync {
    pub fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(io_err(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_holds_its_time_by_the_precision_and_its_chain() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timerwheel");
        let mut wheel = TimerWheel::open(&path, 1000).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            2 * 604_800 * 32,
            "the length Java expects"
        );
        let t = 1_700_000_123_456;
        assert_eq!(wheel.slot(t), Slot::EMPTY);
        wheel.put_slot(t, 52, 104, 2, 0);
        let s = wheel.slot(t + 500); // the same second
        assert_eq!(
            (s.time_ms, s.first_pos, s.last_pos, s.num),
            (1_700_000_123_000, 52, 104, 2)
        );
        // The bytes as Java's putSlot writes them, at time / precision % (2 × slots).
        let at = (t / 1000 % (2 * 604_800)) as usize * 32;
        assert_eq!(&wheel.map[at..at + 8], &(t / 1000).to_be_bytes());
        assert_eq!(&wheel.map[at + 16..at + 24], &104i64.to_be_bytes());
        // The same slot a turn later is another time: empty for it.
        let next_turn = t + 2 * 604_800 * 1000;
        assert_eq!(wheel.slot(next_turn), Slot::EMPTY);
        assert_eq!(wheel.all_num(t - 10_000, t + 3_600_000), 2);
        wheel.syncer().sync().unwrap();
        drop(wheel);
        let wheel = TimerWheel::open(&path, 1000).unwrap();
        assert_eq!(wheel.slot(t).last_pos, 104);
    }

    #[test]
    fn a_wheel_of_another_length_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("timerwheel");
        std::fs::write(&path, [0u8; 100]).unwrap();
        assert!(matches!(
            TimerWheel::open(&path, 1000),
            Err(StoreError::Corrupt { .. })
        ));
    }
}
