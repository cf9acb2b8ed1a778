//! One fixed-size store file mapped into memory.
//!
//! Exactly one writer (the store's put lock holder) appends past `wrote_position`; readers only
//! look below it. `wrote_position` is published with Release after the bytes are written, so a
//! reader that loads it with Acquire sees complete data.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use memmap2::{Advice, MmapOptions, MmapRaw, UncheckedAdvice};

use crate::error::{io_err, Result, StoreError};

pub const OS_PAGE_SIZE: usize = 4096;

/// Disk blocks are reserved in steps of a 64th of the file, between these bounds: a few
/// `fallocate` calls per file, and a 1 GiB CommitLog holds at most 4 MiB reserved ahead of its
/// data.
const MIN_RESERVE_STEP: usize = 64 * 1024;
const MAX_RESERVE_STEP: usize = 4 * 1024 * 1024;

/// The reservation step of a file of `file_size` bytes (see `MappedFile::reserve`).
pub fn reserve_step(file_size: usize) -> usize {
    (file_size / 64).clamp(MIN_RESERVE_STEP, MAX_RESERVE_STEP)
}

/// Extension of a file being created (see `MappedFile::create`).
const CREATING_SUFFIX: &str = "creating";

/// Removes files a crash left half-created in `dir` (writers only, at load).
pub fn remove_unfinished_files(dir: &Path) -> Result<()> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) == Some(CREATING_SUFFIX) {
            log::warn!("removing {}, left half-created by a crash", path.display());
            std::fs::remove_file(&path).map_err(io_err(&path))?;
        }
    }
    Ok(())
}

/// 20-digit zero-padded file name of a start offset (`UtilAll.offset2FileName`).
pub fn offset_to_file_name(offset: u64) -> String {
    format!("{offset:020}")
}

pub fn file_name_to_offset(name: &str) -> Option<u64> {
    (name.len() == 20 && name.bytes().all(|b| b.is_ascii_digit()))
        .then(|| name.parse().ok())
        .flatten()
}

pub struct MappedFile {
    path: PathBuf,
    file_from_offset: u64,
    file_size: usize,
    map: MmapRaw,
    writable: bool,
    wrote_position: AtomicUsize,
    flushed_position: AtomicUsize,
    /// `[0, reserved)` has its disk blocks allocated (writers only; see `reserve`).
    reserved: AtomicUsize,
    /// Serialises `fallocate` between the writer and the background warmer.
    reserve_lock: Mutex<()>,
    /// End of the prefix a warmer has been asked to pre-touch (see `MappedFileQueue`).
    warm_requested: AtomicUsize,
    /// End of the last range whose pages were released (see `release_flushed`): the pages
    /// before it are released already, unless a read faulted them back in since.
    released: AtomicUsize,
    file: File,
}

impl std::fmt::Debug for MappedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MappedFile")
            .field("path", &self.path)
            .field("wrote", &self.wrote_position())
            .field("flushed", &self.flushed_position())
            .finish()
    }
}

impl MappedFile {
    /// Creates a sparse file of `file_size` bytes: it takes no disk space until `reserve` allocates
    /// blocks ahead of the writer (so an idle store is small, and a full disk fails a `reserve`
    /// with an error instead of a SIGBUS on a later write through the map).
    ///
    /// The file is sized under a temporary name and renamed into place, so a crash never leaves
    /// a short file under a real name (the next open would refuse it).
    pub fn create(path: &Path, file_from_offset: u64, file_size: usize) -> Result<Self> {
        let tmp = path.with_extension(CREATING_SUFFIX);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .map_err(io_err(&tmp))?;
        file.set_len(file_size as u64).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io_err(path))?;
        // The new name must survive a power loss as much as the bytes later written to it.
        if let Some(dir) = path.parent() {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io_err(dir))?;
        }
        Self::map(path, file, file_from_offset, file_size, true)
    }

    /// Opens an existing file; its length must be `file_size`.
    pub fn open(
        path: &Path,
        file_from_offset: u64,
        file_size: usize,
        writable: bool,
    ) -> Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .open(path)
            .map_err(io_err(path))?;
        let len = file.metadata().map_err(io_err(path))?.len();
        if len != file_size as u64 {
            return Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("file is {len} bytes, the configured file size is {file_size}"),
            });
        }
        Self::map(path, file, file_from_offset, file_size, writable)
    }

    fn map(
        path: &Path,
        file: File,
        file_from_offset: u64,
        file_size: usize,
        writable: bool,
    ) -> Result<Self> {
        let map = if writable {
            MmapOptions::new().len(file_size).map_raw(&file)
        } else {
            MmapOptions::new().len(file_size).map_raw_read_only(&file)
        }
        .map_err(io_err(path))?;
        if writable {
            let _ = map.advise(Advice::Random);
        }
        Ok(MappedFile {
            path: path.to_path_buf(),
            file_from_offset,
            file_size,
            map,
            writable,
            wrote_position: AtomicUsize::new(0),
            flushed_position: AtomicUsize::new(0),
            reserved: AtomicUsize::new(0),
            reserve_lock: Mutex::new(()),
            warm_requested: AtomicUsize::new(0),
            released: AtomicUsize::new(0),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn file_from_offset(&self) -> u64 {
        self.file_from_offset
    }

    pub fn file_size(&self) -> usize {
        self.file_size
    }

    pub fn wrote_position(&self) -> usize {
        self.wrote_position.load(Ordering::Acquire)
    }

    pub fn flushed_position(&self) -> usize {
        self.flushed_position.load(Ordering::Acquire)
    }

    /// Publishes bytes up to `pos` to readers (writer only).
    pub fn set_wrote_position(&self, pos: usize) {
        debug_assert!(pos <= self.file_size);
        self.wrote_position.store(pos, Ordering::Release);
    }

    /// Used by recovery: everything up to `pos` is known to be on disk already.
    pub fn set_flushed_position(&self, pos: usize) {
        self.flushed_position.store(pos, Ordering::Release);
        // A cut-back file is written again past `pos`: those pages are to be released again.
        self.released.fetch_min(pos, Ordering::AcqRel);
    }

    pub fn is_full(&self) -> bool {
        self.wrote_position() == self.file_size
    }

    /// Bytes `[pos, pos + len)` of the file, or `None` if out of range.
    /// Callers bound `pos + len` by what they know to be written.
    pub fn slice(&self, pos: usize, len: usize) -> Option<&[u8]> {
        if pos.checked_add(len)? > self.file_size {
            return None;
        }
        // SAFETY: in bounds of a live mapping; the range is below the writer's published
        // position (or, read-only, validated by the caller), so no write races with this read.
        Some(unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(pos), len) })
    }

    /// Where `bytes`, a slice of this file's mapping (as `slice` lends them), starts in the file;
    /// None for bytes from elsewhere.
    pub fn position_of(&self, bytes: &[u8]) -> Option<usize> {
        let start = (bytes.as_ptr() as usize).checked_sub(self.map.as_ptr() as usize)?;
        (start + bytes.len() <= self.file_size).then_some(start)
    }

    /// The writable bytes `[pos, pos + len)`.
    ///
    /// # Safety
    /// Only the single writer may call this, for a range no reader has been told about
    /// (at or past `wrote_position`), and must not keep two overlapping slices.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, pos: usize, len: usize) -> &mut [u8] {
        assert!(self.writable, "write to a read-only mapping");
        assert!(
            pos + len <= self.file_size,
            "write past the end of {}",
            self.path.display()
        );
        std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(pos), len)
    }

    /// Writes `data` at `pos` (writer only; see `slice_mut`).
    pub fn write_at(&self, pos: usize, data: &[u8]) {
        // SAFETY: writer-only by contract of the callers in this crate.
        unsafe { self.slice_mut(pos, data.len()) }.copy_from_slice(data);
    }

    /// Writes dirty pages up to the current write position to disk.
    /// With `least_pages > 0`, does nothing until that many pages are dirty.
    /// Returns the flushed position.
    pub fn flush(&self, least_pages: usize) -> Result<usize> {
        let flushed = self.flushed_position();
        let wrote = self.wrote_position();
        if wrote <= flushed {
            return Ok(flushed);
        }
        if least_pages > 0 && wrote / OS_PAGE_SIZE - flushed / OS_PAGE_SIZE < least_pages {
            return Ok(flushed);
        }
        let start = flushed / OS_PAGE_SIZE * OS_PAGE_SIZE;
        self.map
            .flush_range(start, wrote - start)
            .map_err(io_err(&self.path))?;
        self.flushed_position.fetch_max(wrote, Ordering::AcqRel);
        Ok(self.flushed_position())
    }

    /// Writes every dirty page below the write position to disk, wherever it lies (`flush` only
    /// looks past the flushed position: not enough for a file written at random places, as an
    /// IndexFile's hash slots are). Returns the flushed position.
    pub fn force(&self) -> Result<usize> {
        let wrote = self.wrote_position();
        if wrote > 0 {
            self.map.flush_range(0, wrote).map_err(io_err(&self.path))?;
        }
        self.flushed_position.fetch_max(wrote, Ordering::AcqRel);
        Ok(self.flushed_position())
    }

    /// Lets go of this process's mapping of the pages of `[from, to)` that lie below the
    /// flushed position (`from` rounded up and `to` down to whole pages, except that the file's
    /// end counts as a page end). Returns the bytes released.
    ///
    /// The data stays in the page cache and on disk; a later read faults the page back in from
    /// the page cache, without I/O. This is how a store that wrote gigabytes keeps a resident
    /// set of a few hot windows (RocketMQ does the same for the files it no longer writes).
    pub fn release_flushed(&self, from: usize, to: usize) -> usize {
        let from = from.next_multiple_of(OS_PAGE_SIZE);
        let to = to.min(self.flushed_position()).min(self.file_size);
        let to = if to == self.file_size {
            to
        } else {
            to / OS_PAGE_SIZE * OS_PAGE_SIZE
        };
        if to <= from {
            return 0;
        }
        // SAFETY: the mapping is MAP_SHARED over a regular file (`map`), and MADV_DONTNEED on a
        // shared file mapping only drops page-table entries: a dirty page keeps its data in the
        // page cache (the kernel moves the dirty bit to it), and the next access maps the same
        // page cache page again. So no byte any slice of this mapping sees ever changes, unlike
        // the zero-fill of a private or anonymous mapping, and the range is flushed (on disk)
        // besides. The range lies within the mapping (`to <= file_size`).
        let advised = unsafe {
            self.map
                .unchecked_advise_range(UncheckedAdvice::DontNeed, from, to - from)
        };
        match advised {
            Ok(()) => {
                self.released.fetch_max(to, Ordering::AcqRel);
                to - from
            }
            Err(e) => {
                log::warn!("releasing pages of {} failed: {e}", self.path.display());
                0
            }
        }
    }

    /// End of the last range whose pages were released (0 at first).
    pub fn released(&self) -> usize {
        self.released.load(Ordering::Acquire)
    }

    /// Allocates the disk blocks of `[0, end)` (rounded up to the reservation step) unless that is
    /// done already. Every write through the map stays below a reserved end, so running out of
    /// disk is this call's error, never a SIGBUS. Costs one atomic load when nothing is to do.
    pub fn reserve(&self, end: usize) -> Result<()> {
        if end <= self.reserved.load(Ordering::Acquire) {
            return Ok(());
        }
        let _guard = self.reserve_lock.lock().unwrap();
        let from = self.reserved.load(Ordering::Acquire);
        if end <= from {
            return Ok(());
        }
        let step = reserve_step(self.file_size);
        let to = end.div_ceil(step).saturating_mul(step).min(self.file_size);
        // SAFETY: plain libc call on a valid descriptor.
        let rc = unsafe {
            libc::posix_fallocate(
                self.file.as_raw_fd(),
                from as libc::off_t,
                (to - from) as libc::off_t,
            )
        };
        // File systems without fallocate (tmpfs of old kernels, some FUSE) keep the sparse file.
        if rc != 0 && rc != libc::EOPNOTSUPP && rc != libc::EINVAL {
            return Err(StoreError::Io {
                path: self.path.clone(),
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
        self.reserved.store(to, Ordering::Release);
        Ok(())
    }

    /// End of the prefix whose blocks are reserved.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Acquire)
    }

    /// Records that a warmer was asked to pre-touch up to `end`; false if it was asked already.
    pub fn request_warm(&self, end: usize) -> bool {
        self.warm_requested.fetch_max(end, Ordering::AcqRel) < end
    }

    pub fn warm_requested(&self) -> usize {
        self.warm_requested.load(Ordering::Acquire)
    }

    /// Reserves `[from, to)` and faults its pages in for writing, so appends there run at memory
    /// speed. Safe while the writer appends: the kernel only populates page tables, it never
    /// changes bytes (kernels without MADV_POPULATE_WRITE, before 5.14, skip the pre-touch).
    pub fn pretouch(&self, from: usize, to: usize) -> Result<()> {
        let to = to.min(self.file_size);
        if from >= to {
            return Ok(());
        }
        self.reserve(to)?;
        let start = from / OS_PAGE_SIZE * OS_PAGE_SIZE;
        let _ = self
            .map
            .advise_range(Advice::PopulateWrite, start, to - start);
        Ok(())
    }

    /// Zeroes `[pos, end)` (writer only; used to wipe a torn tail during recovery).
    pub fn zero_range(&self, pos: usize, end: usize) {
        if end > pos {
            // SAFETY: writer-only, during recovery before any reader exists.
            unsafe { self.slice_mut(pos, end - pos) }.fill(0);
        }
    }
}
