//! A directory of equally sized files named by their start offset, treated as one log.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;

use crate::error::{io_err, Result, StoreError};
use crate::mapped_file::{
    file_name_to_offset, offset_to_file_name, remove_unfinished_files, MappedFile,
};

pub struct MappedFileQueue {
    dir: PathBuf,
    file_size: usize,
    writable: bool,
    files: RwLock<Vec<Arc<MappedFile>>>,
    warmer: Option<Warmer>,
}

/// How far ahead of the writer a warmed queue keeps its pages reserved and pre-touched: a 16th of
/// a file, between 1 and 32 MiB. Idle, a 1 GiB CommitLog then holds about 64 MiB of warm pages
/// (its current and its next file), not 2 GiB.
pub fn warm_window(file_size: usize) -> usize {
    (file_size / 16)
        .clamp(1024 * 1024, 32 * 1024 * 1024)
        .min(file_size)
}

/// A queue releases the pages behind its hot window in steps of at least this much (or a file's
/// whole rest): each release is a syscall and a TLB flush, so it comes once per MiB written, not
/// once per flush.
pub(crate) const RELEASE_STEP: usize = 1024 * 1024;

/// Lets go of this process's mapping of the flushed pages of `files` (a queue, oldest first) that
/// lie more than `hot_window` bytes behind its write end; see `MappedFile::release_flushed`. Each
/// file's pages are released from where the last call stopped, or, with `sweep`, from its start:
/// a sweep also drops the pages reads have faulted back in since. Returns the bytes released.
pub fn release_cold_pages(files: &[Arc<MappedFile>], hot_window: usize, sweep: bool) -> usize {
    let Some(last) = files.last() else {
        return 0;
    };
    let end = last.file_from_offset() + last.wrote_position() as u64;
    let cold_end = end.saturating_sub(hot_window as u64);
    let mut released = 0;
    for f in files {
        let start = f.file_from_offset();
        if start >= cold_end {
            break;
        }
        // Never past the flushed position: those pages are still being written back.
        let to = ((cold_end - start) as usize)
            .min(f.file_size())
            .min(f.flushed_position());
        let from = if sweep { 0 } else { f.released() };
        if to > from && (sweep || to - from >= RELEASE_STEP || to == f.file_size()) {
            released += f.release_flushed(from, to);
        }
    }
    released
}

impl MappedFileQueue {
    /// Maps every file in `dir`. Read-only queues of a missing directory are empty.
    /// With `warm`, a background thread creates the next file before it is needed and keeps a
    /// window ahead of the writer reserved and pre-touched (see `prepare_write`).
    pub fn load(dir: &Path, file_size: usize, writable: bool, warm: bool) -> Result<Self> {
        if writable {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
            remove_unfinished_files(dir)?;
        }
        // A read-only view takes the segment size from the files themselves, so tools need not
        // know the writer's configuration (Java brokers and tests often use small segments).
        let (listed, file_size) = if writable {
            (list_files(dir)?, file_size)
        } else {
            list_published_files(dir, file_size)?
        };
        let mut files = Vec::new();
        for (offset, path) in listed {
            match MappedFile::open(&path, offset, file_size, writable) {
                Ok(f) => files.push(Arc::new(f)),
                // A read-only view racing the writer's retention: a head file deleted between
                // the listing and the open is simply no longer part of the log.
                Err(StoreError::Io { source, .. })
                    if !writable
                        && files.is_empty()
                        && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        for pair in files.windows(2) {
            if pair[1].file_from_offset() != pair[0].file_from_offset() + file_size as u64 {
                return Err(StoreError::Corrupt {
                    path: pair[1].path().to_path_buf(),
                    reason: format!("gap or overlap after {}", pair[0].path().display()),
                });
            }
        }
        Ok(MappedFileQueue {
            dir: dir.to_path_buf(),
            file_size,
            writable,
            files: RwLock::new(files),
            warmer: (writable && warm).then(|| Warmer::start(dir.to_path_buf(), file_size)),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn file_size(&self) -> usize {
        self.file_size
    }

    pub fn is_empty(&self) -> bool {
        self.files.read().unwrap().is_empty()
    }

    pub fn files(&self) -> Vec<Arc<MappedFile>> {
        self.files.read().unwrap().clone()
    }

    pub fn first(&self) -> Option<Arc<MappedFile>> {
        self.files.read().unwrap().first().cloned()
    }

    pub fn last(&self) -> Option<Arc<MappedFile>> {
        self.files.read().unwrap().last().cloned()
    }

    /// Start offset of the first file (0 when empty).
    pub fn min_offset(&self) -> u64 {
        self.first().map_or(0, |f| f.file_from_offset())
    }

    /// Offset just past the last published byte.
    pub fn max_offset(&self) -> u64 {
        self.last()
            .map_or(0, |f| f.file_from_offset() + f.wrote_position() as u64)
    }

    /// Offset just past the last flushed byte.
    pub fn flushed_offset(&self) -> u64 {
        let files = self.files.read().unwrap();
        for f in files.iter().rev() {
            let flushed = f.flushed_position();
            if flushed > 0 {
                return f.file_from_offset() + flushed as u64;
            }
        }
        files.first().map_or(0, |f| f.file_from_offset())
    }

    /// The file holding `offset`, if mapped.
    pub fn find(&self, offset: u64) -> Option<Arc<MappedFile>> {
        let files = self.files.read().unwrap();
        let first = files.first()?.file_from_offset();
        if offset < first {
            return None;
        }
        let idx = ((offset - first) / self.file_size as u64) as usize;
        files.get(idx).cloned()
    }

    /// Appends a new file starting at `start` (must follow the last one), taking the
    /// preallocated file when it is the right one.
    pub fn roll(&self, start: u64) -> Result<Arc<MappedFile>> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        if let Some(last) = self.last() {
            debug_assert_eq!(last.file_from_offset() + self.file_size as u64, start);
        }
        let path = self.dir.join(offset_to_file_name(start));
        let file = match self.warmer.as_ref().and_then(|w| w.take(start)) {
            Some(file) => file,
            None => Arc::new(MappedFile::create(&path, start, self.file_size)?),
        };
        self.files.write().unwrap().push(file.clone());
        if let Some(w) = &self.warmer {
            w.request_next(start + self.file_size as u64);
        }
        Ok(file)
    }

    /// Replication: a slave whose log holds no byte yet starts it at `start` (a file boundary),
    /// where the master's stream begins: its empty files (and a preallocated one) go, and the
    /// first file is created at `start`, so the file names match the master's.
    pub fn restart_at(&self, start: u64) -> Result<Arc<MappedFile>> {
        if !start.is_multiple_of(self.file_size as u64) {
            return Err(StoreError::InvalidArgument(format!(
                "a log can only start at a file boundary, not at {start}"
            )));
        }
        {
            let mut files = self.files.write().unwrap();
            if files.iter().any(|f| f.wrote_position() > 0) {
                return Err(StoreError::InvalidArgument(format!(
                    "cannot restart a log that holds data at {start}"
                )));
            }
            if let Some(w) = &self.warmer {
                w.prepare_for(start);
            }
            for f in files.drain(..) {
                let path = f.path().to_path_buf();
                drop(f);
                std::fs::remove_file(&path).map_err(io_err(&path))?;
            }
        }
        self.roll(start)
    }

    /// For a warmed queue: creates the first file if there is none (sparse, so at once: a first
    /// append never waits for a warmer), asks the warmer for the file after the last one and to
    /// warm the window past the last file's write position.
    pub fn preallocate_next(&self) -> Result<()> {
        if self.warmer.is_none() {
            return Ok(());
        }
        let last = match self.last() {
            Some(f) => f,
            None => self.roll(0)?,
        };
        if let Some(w) = &self.warmer {
            w.request_next(last.file_from_offset() + self.file_size as u64);
        }
        self.warm_ahead(&last, last.wrote_position());
        Ok(())
    }

    /// Makes `[.., end)` of `file` writable (its blocks reserved; see `MappedFile::reserve`) and,
    /// for a warmed queue, asks the warmer to keep the next window ready once the writer is half
    /// way through the current one (one request per half window, not per append).
    pub fn prepare_write(&self, file: &Arc<MappedFile>, end: usize) -> Result<()> {
        self.warm_ahead(file, end);
        file.reserve(end)
    }

    fn warm_ahead(&self, file: &Arc<MappedFile>, end: usize) {
        if let Some(w) = &self.warmer {
            let window = warm_window(self.file_size);
            if end + window / 2 > file.warm_requested() {
                let target = (end + window).min(self.file_size);
                if file.request_warm(target) {
                    w.request_warm(file.clone());
                }
            }
        }
    }

    /// Makes `offset` the end of the log: deletes later files and sets positions in the file
    /// that holds it. Bytes past `offset` in that file are zeroed so no stale tail survives.
    pub fn truncate_to(&self, offset: u64) -> Result<()> {
        let mut files = self.files.write().unwrap();
        let mut keep = Vec::with_capacity(files.len());
        for f in files.drain(..) {
            let start = f.file_from_offset();
            if start + self.file_size as u64 <= offset {
                f.set_wrote_position(self.file_size);
                f.set_flushed_position(self.file_size);
                keep.push(f);
            } else if start < offset || (start == offset && keep.is_empty()) {
                let pos = (offset - start) as usize;
                if self.writable {
                    let end = written_extent(&f, pos);
                    f.zero_range(pos, end);
                }
                f.set_wrote_position(pos);
                f.set_flushed_position(pos);
                keep.push(f);
            } else if self.writable {
                let path = f.path().to_path_buf();
                drop(f);
                std::fs::remove_file(&path).map_err(io_err(&path))?;
                log::info!(
                    "deleted store file {} past the end at offset {offset}",
                    path.display()
                );
            }
        }
        let next = keep
            .last()
            .map_or(offset - offset % self.file_size as u64, |f| {
                f.file_from_offset() + self.file_size as u64
            });
        *files = keep;
        drop(files);
        // A file the warmer made for the old end would outlive the cut on disk and leave a gap
        // (a replica cut back to where a new master's epoch began, then killed, could not open).
        if let Some(w) = &self.warmer {
            w.prepare_for(next);
        }
        Ok(())
    }

    /// Deletes files from the head of the queue while `expired` says so (RocketMQ's
    /// `deleteExpiredFileByTime` / `deleteExpiredFileByOffset`): never the last file (the one
    /// being written), at most `max` files, pausing `interval` between two deletions. Stops at
    /// the first file that is not expired, so no file in the middle goes. `pause` runs between
    /// two deletions (RocketMQ sleeps `deleteCommitLogFilesInterval` there); false stops early.
    ///
    /// A file still mapped by a reader (an `Arc` in a read in progress, another process's
    /// view) is unlinked at once: its mapping stays valid until the last holder drops it, then
    /// the kernel frees the blocks. RocketMQ instead waits for its reference count, up to
    /// `destroyMapedFileIntervalForcibly`, because it unmaps by hand.
    pub fn delete_head_files(
        &self,
        max: usize,
        mut pause: impl FnMut() -> bool,
        mut expired: impl FnMut(&MappedFile) -> bool,
    ) -> Result<Vec<PathBuf>> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let mut deleted = Vec::new();
        while deleted.len() < max {
            let (head, candidates) = {
                let files = self.files.read().unwrap();
                if files.len() <= 1 {
                    break;
                }
                (files[0].clone(), files.len() - 1)
            };
            if !expired(&head) {
                break;
            }
            {
                let mut files = self.files.write().unwrap();
                if !files.first().is_some_and(|f| Arc::ptr_eq(f, &head)) || files.len() <= 1 {
                    break;
                }
                files.remove(0);
            }
            let path = head.path().to_path_buf();
            drop(head);
            match std::fs::remove_file(&path) {
                Ok(()) => log::info!("retention: deleted {}", path.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => log::error!("retention: deleting {} failed: {e}", path.display()),
            }
            deleted.push(path);
            if deleted.len() < max && candidates > 1 && !pause() {
                break;
            }
        }
        Ok(deleted)
    }

    /// Read-only queues: forgets head files a writer deleted and maps files it created since
    /// the last look.
    pub fn refresh(&self) -> Result<()> {
        let listed = list_files(&self.dir)?;
        {
            let mut files = self.files.write().unwrap();
            let first_listed = listed.first().map(|(o, _)| *o);
            let gone = files
                .iter()
                .take_while(|f| first_listed.is_none_or(|first| f.file_from_offset() < first))
                .count();
            if gone > 0 {
                files.drain(..gone);
            }
        }
        let known_end = self.last().map(|f| f.file_from_offset());
        let mut added = Vec::new();
        for (offset, path) in listed {
            if known_end.is_none_or(|end| offset > end) {
                match MappedFile::open(&path, offset, self.file_size, self.writable) {
                    Ok(f) => added.push(Arc::new(f)),
                    // A file being created right now may not have its full length yet.
                    Err(StoreError::Corrupt { .. }) => break,
                    // Deleted by the writer's retention since the listing.
                    Err(StoreError::Io { source, .. })
                        if source.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if !added.is_empty() {
            self.files.write().unwrap().extend(added);
        }
        Ok(())
    }

    /// Releases the flushed pages behind the last `hot_window` bytes; see `release_cold_pages`.
    pub fn release_cold_pages(&self, hot_window: usize, sweep: bool) -> usize {
        release_cold_pages(&self.files(), hot_window, sweep)
    }

    /// Flushes files from the one holding the flushed offset up to the last; see `MappedFile::flush`.
    pub fn flush(&self, least_pages: usize) -> Result<u64> {
        let files = self.files();
        let mut flushed = self.min_offset();
        for f in &files {
            if f.flushed_position() == self.file_size {
                flushed = f.file_from_offset() + self.file_size as u64;
                continue;
            }
            let pos = f.flush(least_pages)?;
            flushed = f.file_from_offset() + pos as u64;
            if pos < self.file_size {
                break;
            }
        }
        Ok(flushed)
    }
}

/// Where non-zero bytes end in `f`, scanning whole pages from `from` (bounded by the file).
fn written_extent(f: &MappedFile, from: usize) -> usize {
    let size = f.file_size();
    let mut end = from;
    let page = crate::mapped_file::OS_PAGE_SIZE;
    let mut at = from;
    while at < size {
        let len = (page - at % page).min(size - at);
        let chunk = f.slice(at, len).unwrap();
        if chunk.iter().all(|b| *b == 0) {
            break;
        }
        at += len;
        end = at;
    }
    end
}

/// The files of a log a writer may be growing, listed again (a bounded number of times) while
/// the listing has a gap: the writer names a new file only once it has its full length, and its
/// warmer may publish the file after that one first, so a listing can catch a file still under
/// its temporary name with its successor already there. A gap that stays is reported by `load`.
fn list_published_files(
    dir: &Path,
    configured_size: usize,
) -> Result<(Vec<(u64, PathBuf)>, usize)> {
    const ATTEMPTS: usize = 20;
    let mut listed = list_files(dir)?;
    for _ in 1..ATTEMPTS {
        let size = segment_size(&listed, configured_size)?;
        let gap = listed
            .windows(2)
            .any(|pair| pair[1].0 != pair[0].0 + size as u64);
        if !gap {
            return Ok((listed, size));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
        listed = list_files(dir)?;
    }
    // `load` refuses the gap that stayed.
    let size = segment_size(&listed, configured_size)?;
    Ok((listed, size))
}

/// The segment size of listed files: the first one's length (`configured` when there is none).
fn segment_size(listed: &[(u64, PathBuf)], configured: usize) -> Result<usize> {
    match listed.first() {
        Some((_, path)) => Ok(std::fs::metadata(path).map_err(io_err(path))?.len() as usize),
        None => Ok(configured),
    }
}

fn list_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io_err(dir))?;
        let name = entry.file_name();
        if let Some(offset) = name.to_str().and_then(file_name_to_offset) {
            out.push((offset, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// A background thread that creates the next file (sparse, its first window warm) before the
/// writer needs it, and pre-touches the window ahead of the writer in the current file, so
/// appends find reserved, mapped pages without holding more of them than a window.
struct Warmer {
    shared: Arc<(Mutex<WarmState>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

#[derive(Default)]
struct WarmState {
    /// Start offset of the file to create next.
    wanted: Option<u64>,
    ready: Option<Arc<MappedFile>>,
    /// A file whose `warm_requested` prefix is to be pre-touched.
    warm: Option<Arc<MappedFile>>,
    stop: bool,
}

enum WarmJob {
    Create(u64),
    Touch(Arc<MappedFile>),
}

impl Warmer {
    fn start(dir: PathBuf, file_size: usize) -> Self {
        let shared = Arc::new((Mutex::new(WarmState::default()), Condvar::new()));
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("ferromq-warmer".into())
            .spawn(move || Self::run(&worker, &dir, file_size))
            .expect("spawn warmer thread");
        Warmer {
            shared,
            thread: Some(thread),
        }
    }

    fn run(shared: &(Mutex<WarmState>, Condvar), dir: &Path, file_size: usize) {
        let (lock, cv) = shared;
        // How far each file is warm already (pre-touching a range twice costs a page walk).
        let mut touched: Option<(u64, usize)> = None;
        loop {
            let job = {
                let mut st = lock.lock().unwrap();
                loop {
                    if st.stop {
                        return;
                    }
                    // The writer's own window first: it is the one an append may wait on.
                    if let Some(f) = st.warm.take() {
                        break WarmJob::Touch(f);
                    }
                    match st.wanted {
                        Some(w) if st.ready.as_ref().map(|f| f.file_from_offset()) != Some(w) => {
                            break WarmJob::Create(w)
                        }
                        _ => st = cv.wait(st).unwrap(),
                    }
                }
            };
            match job {
                WarmJob::Touch(f) => {
                    let from = match touched {
                        Some((start, end)) if start == f.file_from_offset() => end,
                        _ => f.wrote_position(),
                    };
                    let to = f.warm_requested();
                    if let Err(e) = f.pretouch(from, to) {
                        // The writer's own `reserve` meets the same error and reports it.
                        log::warn!("warming {} failed: {e}", f.path().display());
                    }
                    touched = Some((f.file_from_offset(), to.max(from)));
                }
                WarmJob::Create(start) => {
                    let path = dir.join(offset_to_file_name(start));
                    let made = MappedFile::create(&path, start, file_size).and_then(|file| {
                        let window = warm_window(file_size);
                        file.request_warm(window);
                        file.pretouch(0, window)?;
                        Ok(file)
                    });
                    let mut st = lock.lock().unwrap();
                    match made {
                        Ok(file) if st.wanted == Some(start) => {
                            touched = Some((start, warm_window(file_size)));
                            st.ready = Some(Arc::new(file));
                        }
                        Ok(file) => {
                            // Nobody wants it any more (a roll happened without it): remove it.
                            drop(file);
                            let _ = std::fs::remove_file(&path);
                        }
                        Err(e) => {
                            log::warn!("preallocating {} failed: {e}", path.display());
                            let _ = std::fs::remove_file(&path);
                            st.wanted = None;
                        }
                    }
                    cv.notify_all();
                }
            }
        }
    }

    fn request_next(&self, start: u64) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap().wanted = Some(start);
        cv.notify_all();
    }

    fn request_warm(&self, file: Arc<MappedFile>) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap().warm = Some(file);
        cv.notify_all();
    }

    /// The next file is the one at `start`: a preallocated file for another offset is removed
    /// (one being made now is removed by the warmer itself, as nobody wants it any more), and
    /// `take(start)` then waits for the warmer's file rather than racing it for the same name.
    fn prepare_for(&self, start: u64) {
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap();
        if st
            .ready
            .as_ref()
            .is_some_and(|f| f.file_from_offset() != start)
        {
            if let Some(f) = st.ready.take() {
                let path = f.path().to_path_buf();
                drop(f);
                let _ = std::fs::remove_file(path);
            }
        }
        st.wanted = Some(start);
        cv.notify_all();
    }

    /// The preallocated file for `start`, waiting for it if it is being made right now.
    fn take(&self, start: u64) -> Option<Arc<MappedFile>> {
        let (lock, cv) = &*self.shared;
        let mut st = lock.lock().unwrap();
        if st.wanted != Some(start) {
            return None;
        }
        while st.ready.is_none() && st.wanted == Some(start) {
            st = cv.wait(st).unwrap();
        }
        st.wanted = None;
        st.ready.take().filter(|f| f.file_from_offset() == start)
    }
}

impl Drop for Warmer {
    fn drop(&mut self) {
        let (lock, cv) = &*self.shared;
        lock.lock().unwrap().stop = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapped_file::offset_to_file_name;

    #[test]
    fn a_read_only_listing_waits_out_a_file_published_after_its_successor() {
        let dir = tempfile::tempdir().unwrap();
        let size = 4096;
        let write = |n: u64| {
            std::fs::write(
                dir.path().join(offset_to_file_name(n * size as u64)),
                vec![0u8; size],
            )
            .unwrap()
        };
        write(0);
        write(2); // the successor first, as a warmer racing the writer may publish it
        let late = {
            let path = dir.path().join(offset_to_file_name(size as u64));
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                std::fs::write(path, vec![0u8; 4096]).unwrap();
            })
        };
        let view = MappedFileQueue::load(dir.path(), size, false, false).unwrap();
        late.join().unwrap();
        assert_eq!(view.files().len(), 3);
        // A gap that stays is still an error.
        std::fs::remove_file(dir.path().join(offset_to_file_name(size as u64))).unwrap();
        assert!(matches!(
            MappedFileQueue::load(dir.path(), size, false, false),
            Err(StoreError::Corrupt { .. })
        ));
    }

    #[test]
    fn cold_pages_go_once_flushed_in_steps_and_again_on_a_sweep() {
        let dir = tempfile::tempdir().unwrap();
        let size = 4 * RELEASE_STEP;
        let window = 4096;
        let q = MappedFileQueue::load(dir.path(), size, true, false).unwrap();
        let write = |f: &MappedFile, to: usize| {
            let from = f.wrote_position();
            f.reserve(to).unwrap();
            f.write_at(from, &vec![1u8; to - from]);
            f.set_wrote_position(to);
        };
        let a = q.roll(0).unwrap();
        write(&a, size);
        let b = q.roll(size as u64).unwrap();
        write(&b, size / 2);
        // Nothing is flushed yet: nothing goes.
        assert_eq!(q.release_cold_pages(window, false), 0);
        q.flush(0).unwrap();
        assert_eq!(
            q.release_cold_pages(window, false),
            size + size / 2 - window
        );
        assert_eq!(q.release_cold_pages(window, false), 0);
        // Less than a step more: it waits for the rest of the step.
        write(&b, size / 2 + RELEASE_STEP / 2);
        q.flush(0).unwrap();
        assert_eq!(q.release_cold_pages(window, false), 0);
        write(&b, size);
        q.flush(0).unwrap();
        assert_eq!(q.release_cold_pages(window, false), size / 2);
        // A sweep goes over everything behind the window again.
        assert_eq!(q.release_cold_pages(window, true), 2 * size - window);
        // Every byte is still there.
        assert!(a.slice(0, size).unwrap().iter().all(|b| *b == 1));
        assert!(b.slice(0, size).unwrap().iter().all(|b| *b == 1));
    }
}
