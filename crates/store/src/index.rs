//! IndexFile: a hash table on disk from `topic#key` to CommitLog offsets, one file per
//! `max_index_num` entries, named by its creation time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use crate::error::{io_err, Result, StoreError};
use crate::hash::index_key_hash;
use crate::mapped_file::{remove_unfinished_files, MappedFile};
use crate::mapped_file_queue::RELEASE_STEP;
use crate::message::index_tokens;

pub const INDEX_HEADER_SIZE: usize = 40;
const SLOT_SIZE: usize = 4;
const ENTRY_SIZE: usize = 20;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexHeader {
    pub begin_timestamp: i64,
    pub end_timestamp: i64,
    pub begin_phy_offset: i64,
    pub end_phy_offset: i64,
    pub hash_slot_count: i32,
    pub index_count: i32,
}

impl IndexHeader {
    fn parse(b: &[u8]) -> Self {
        let l = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().unwrap());
        let i = |at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        IndexHeader {
            begin_timestamp: l(0),
            end_timestamp: l(8),
            begin_phy_offset: l(16),
            end_phy_offset: l(24),
            hash_slot_count: i(32),
            index_count: i(36).max(1),
        }
    }

    fn encode(&self) -> [u8; INDEX_HEADER_SIZE] {
        let mut b = [0u8; INDEX_HEADER_SIZE];
        b[0..8].copy_from_slice(&self.begin_timestamp.to_be_bytes());
        b[8..16].copy_from_slice(&self.end_timestamp.to_be_bytes());
        b[16..24].copy_from_slice(&self.begin_phy_offset.to_be_bytes());
        b[24..32].copy_from_slice(&self.end_phy_offset.to_be_bytes());
        b[32..36].copy_from_slice(&self.hash_slot_count.to_be_bytes());
        b[36..40].copy_from_slice(&self.index_count.to_be_bytes());
        b
    }
}

pub fn index_file_size(slot_num: usize, index_num: usize) -> usize {
    INDEX_HEADER_SIZE + slot_num * SLOT_SIZE + index_num * ENTRY_SIZE
}

pub struct IndexFile {
    file: MappedFile,
    slot_num: usize,
    index_num: usize,
    writable: bool,
    /// The writer's copy of the header; read-only views parse the mapped bytes instead.
    header: Mutex<IndexHeader>,
    /// Byte end of the entries known to be on disk (see `flush`).
    flushed_entries: AtomicUsize,
}

impl IndexFile {
    fn open(
        path: &Path,
        slot_num: usize,
        index_num: usize,
        writable: bool,
        create: bool,
    ) -> Result<Self> {
        let size = index_file_size(slot_num, index_num);
        let file = if create {
            let file = MappedFile::create(path, 0, size)?;
            // The hash slots are written anywhere; the entries after them in order, reserved
            // as they grow (`put_key`).
            file.reserve(INDEX_HEADER_SIZE + slot_num * SLOT_SIZE)?;
            file
        } else {
            let file = MappedFile::open(path, 0, size, writable)?;
            // What an earlier run wrote is on disk (or in the page cache), as for the CommitLog.
            file.set_flushed_position(size);
            file
        };
        file.set_wrote_position(size);
        let header = IndexHeader::parse(file.slice(0, INDEX_HEADER_SIZE).unwrap());
        let flushed_entries = if create {
            0
        } else {
            INDEX_HEADER_SIZE + slot_num * SLOT_SIZE + header.index_count as usize * ENTRY_SIZE
        };
        Ok(IndexFile {
            file,
            slot_num,
            index_num,
            writable,
            header: Mutex::new(header),
            flushed_entries: AtomicUsize::new(flushed_entries),
        })
    }

    /// The current header: the writer's own copy, or what a writer elsewhere last wrote.
    pub fn header(&self) -> IndexHeader {
        if self.writable {
            *self.header.lock().unwrap()
        } else {
            IndexHeader::parse(self.file.slice(0, INDEX_HEADER_SIZE).unwrap())
        }
    }

    pub fn is_full(&self) -> bool {
        self.header().index_count as usize >= self.index_num
    }

    /// How many more entries the file takes.
    fn room(&self) -> usize {
        self.index_num
            .saturating_sub(self.header().index_count as usize)
    }

    fn slot_pos(&self, key_hash: i32) -> usize {
        INDEX_HEADER_SIZE + (key_hash as usize % self.slot_num) * SLOT_SIZE
    }

    fn entry_pos(&self, n: usize) -> usize {
        INDEX_HEADER_SIZE + self.slot_num * SLOT_SIZE + n * ENTRY_SIZE
    }

    fn read_i32(&self, pos: usize) -> i32 {
        i32::from_be_bytes(self.file.slice(pos, 4).unwrap().try_into().unwrap())
    }

    /// Reserves the blocks of the next `keys` entries (as many as the file has room for).
    fn reserve_entries(&self, keys: usize) -> Result<()> {
        let count = self.header.lock().unwrap().index_count as usize;
        let end = (count + keys).min(self.index_num);
        self.file.reserve(self.entry_pos(end))
    }

    /// Adds one key (writer only). Returns false when the file is full.
    fn put_key(&self, key: &str, phy_offset: i64, store_timestamp: i64) -> Result<bool> {
        let mut h = self.header.lock().unwrap();
        let count = h.index_count as usize;
        if count >= self.index_num {
            return Ok(false);
        }
        self.file.reserve(self.entry_pos(count) + ENTRY_SIZE)?;
        let key_hash = index_key_hash(key);
        let slot_pos = self.slot_pos(key_hash);
        let mut prev = self.read_i32(slot_pos);
        if prev <= 0 || prev as usize > count {
            prev = 0;
        }
        if count <= 1 {
            h.begin_phy_offset = phy_offset;
            h.begin_timestamp = store_timestamp;
        }
        let time_diff = if h.begin_timestamp <= 0 {
            0
        } else {
            ((store_timestamp - h.begin_timestamp) / 1000).clamp(0, i32::MAX as i64) as i32
        };
        let mut entry = [0u8; ENTRY_SIZE];
        entry[0..4].copy_from_slice(&key_hash.to_be_bytes());
        entry[4..12].copy_from_slice(&phy_offset.to_be_bytes());
        entry[12..16].copy_from_slice(&time_diff.to_be_bytes());
        entry[16..20].copy_from_slice(&prev.to_be_bytes());
        // Entry first, then the slot, then the header: a crash in between leaves only an
        // unreachable entry or a slot pointing at a complete entry.
        self.file.write_at(self.entry_pos(count), &entry);
        self.file.write_at(slot_pos, &(count as i32).to_be_bytes());
        if prev == 0 {
            h.hash_slot_count += 1;
        }
        h.index_count += 1;
        h.end_phy_offset = phy_offset;
        h.end_timestamp = store_timestamp;
        self.file.write_at(0, &h.encode());
        Ok(true)
    }

    /// Offsets of entries for `key` stored within `[begin, end]` ms, newest first.
    fn select(&self, key: &str, begin: i64, end: i64, max: usize, out: &mut Vec<i64>) {
        let h = self.header();
        let key_hash = index_key_hash(key);
        let mut n = self.read_i32(self.slot_pos(key_hash));
        let mut hops = 0;
        while n > 0
            && (n as usize) < h.index_count as usize
            && out.len() < max
            && hops < self.index_num
        {
            hops += 1;
            let Some(e) = self.file.slice(self.entry_pos(n as usize), ENTRY_SIZE) else {
                break;
            };
            let hash = i32::from_be_bytes(e[0..4].try_into().unwrap());
            let phy = i64::from_be_bytes(e[4..12].try_into().unwrap());
            let diff = i32::from_be_bytes(e[12..16].try_into().unwrap()) as i64;
            let prev = i32::from_be_bytes(e[16..20].try_into().unwrap());
            let time = h.begin_timestamp + diff * 1000;
            // Entries older than the range end the chain (it runs newest to oldest).
            if time < begin {
                break;
            }
            if hash == key_hash && time <= end {
                out.push(phy);
            }
            if prev >= n {
                break;
            }
            n = prev;
        }
    }

    /// Writes the file to disk: all of it, as the hash slots and the header change anywhere
    /// (a flush from the last flushed position on would write nothing after the first one).
    pub fn flush(&self) -> Result<()> {
        // Entries below the count read first are complete (`put_key` writes them under the
        // header's lock), so the sync below covers them.
        let entries_end = self.entry_pos(self.header().index_count as usize);
        self.file.force()?;
        self.flushed_entries
            .fetch_max(entries_end, Ordering::AcqRel);
        Ok(())
    }

    /// Releases flushed pages (see `MappedFile::release_flushed`): of the file being written
    /// (`last`), the entries more than `hot_window` bytes behind the newest, as entries are only
    /// appended (its hash slots and header stay mapped: every put writes them); of an older,
    /// full file, all of it, once (only queries read it). With `sweep`, also what reads faulted
    /// back in. Returns the bytes released.
    fn release_cold_pages(&self, last: bool, hot_window: usize, sweep: bool) -> usize {
        let f = &self.file;
        if !last {
            if !sweep && f.released() >= f.file_size() {
                return 0;
            }
            return f.release_flushed(0, f.file_size());
        }
        let start = self.entry_pos(0);
        let newest = self.entry_pos(self.header().index_count as usize);
        let to = newest
            .saturating_sub(hot_window)
            .min(self.flushed_entries.load(Ordering::Acquire));
        let from = if sweep {
            start
        } else {
            f.released().max(start)
        };
        if to > from && (sweep || to - from >= RELEASE_STEP) {
            f.release_flushed(from, to)
        } else {
            0
        }
    }
}

pub struct IndexService {
    dir: PathBuf,
    slot_num: usize,
    index_num: usize,
    writable: bool,
    files: RwLock<Vec<Arc<IndexFile>>>,
    /// Reused key buffer for `topic#key` (writer only).
    key_buf: Mutex<String>,
    /// CommitLog offset of the last indexed record (-1: none).
    last_indexed: AtomicI64,
}

impl IndexService {
    pub fn load(dir: &Path, slot_num: usize, index_num: usize, writable: bool) -> Result<Self> {
        if writable {
            std::fs::create_dir_all(dir).map_err(io_err(dir))?;
            remove_unfinished_files(dir)?;
        }
        let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
            Ok(entries) => entries
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.len() == 17 && n.bytes().all(|b| b.is_ascii_digit()))
                })
                .collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(io_err(dir)(e)),
        };
        paths.sort();
        let mut files = Vec::new();
        for p in paths {
            match IndexFile::open(&p, slot_num, index_num, writable, false) {
                Ok(f) => files.push(Arc::new(f)),
                // A read-only view racing the writer's retention: the file is gone.
                Err(StoreError::Io { source, .. })
                    if !writable && source.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let last_indexed = files
            .last()
            .map(|f| f.header())
            .filter(|h| h.index_count > 1)
            .map_or(-1, |h| h.end_phy_offset);
        Ok(IndexService {
            dir: dir.to_path_buf(),
            slot_num,
            index_num,
            writable,
            files: RwLock::new(files),
            key_buf: Mutex::new(String::new()),
            last_indexed: AtomicI64::new(last_indexed),
        })
    }

    /// Physical offset of the last indexed record (-1 when nothing is indexed).
    pub fn end_phy_offset(&self) -> i64 {
        self.last_indexed.load(Ordering::Acquire)
    }

    pub fn last_end_timestamp(&self) -> i64 {
        self.files
            .read()
            .unwrap()
            .last()
            .map_or(0, |f| f.header().end_timestamp)
    }

    /// The file that takes a record's `keys` entries: the last one while they all fit, else a
    /// new one. A record's entries stay in one file (unless they exceed a whole file), so that
    /// `prepare` can reserve all of them before the record is written.
    fn writable_file(&self, keys: usize) -> Result<Arc<IndexFile>> {
        let fits = keys.clamp(1, self.index_num.saturating_sub(1).max(1));
        if let Some(last) = self.files.read().unwrap().last() {
            if last.room() >= fits {
                return Ok(last.clone());
            }
        }
        let prev = self.files.read().unwrap().last().map(|f| f.header());
        let name = chrono::Local::now().format("%Y%m%d%H%M%S%3f").to_string();
        let mut path = self.dir.join(&name);
        let mut n = 0;
        while path.exists() {
            n += 1;
            path = self.dir.join(format!(
                "{}{:03}",
                &name[..14],
                (name[14..].parse::<u32>().unwrap() + n) % 1000
            ));
        }
        let file = Arc::new(IndexFile::open(
            &path,
            self.slot_num,
            self.index_num,
            true,
            true,
        )?);
        if let Some(prev) = prev {
            // A new file starts where the previous one ended.
            let mut h = file.header.lock().unwrap();
            h.begin_timestamp = prev.end_timestamp;
            h.end_timestamp = prev.end_timestamp;
            h.begin_phy_offset = prev.end_phy_offset;
            h.end_phy_offset = prev.end_phy_offset;
            file.file.write_at(0, &h.encode());
        }
        if let Some(full) = self.files.read().unwrap().last() {
            full.flush()?;
        }
        self.files.write().unwrap().push(file.clone());
        Ok(file)
    }

    /// Makes room for `keys` more entries before the record they index is written (writer
    /// only): the current file (or a new one when it is full) gets their blocks.
    pub fn prepare(&self, keys: usize) -> Result<()> {
        if keys == 0 {
            return Ok(());
        }
        self.writable_file(keys)?.reserve_entries(keys)
    }

    /// Indexes one dispatched record (writer only): `topic#UNIQ_KEY` and `topic#key` per KEYS
    /// token. Records at or below the last indexed offset are skipped (recovery dispatches some
    /// records again).
    pub fn build_index(
        &self,
        topic: &str,
        uniq_key: Option<&str>,
        keys: Option<&str>,
        phy_offset: i64,
        store_timestamp: i64,
    ) -> Result<()> {
        if uniq_key.is_none() && keys.is_none() {
            return Ok(());
        }
        if phy_offset <= self.last_indexed.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut buf = self.key_buf.lock().unwrap();
        let mut file = self.writable_file(index_tokens(uniq_key, keys).count())?;
        for key in index_tokens(uniq_key, keys) {
            buf.clear();
            buf.push_str(topic);
            buf.push('#');
            buf.push_str(key);
            if !file.put_key(&buf, phy_offset, store_timestamp)? {
                file = self.writable_file(1)?;
                file.put_key(&buf, phy_offset, store_timestamp)?;
            }
        }
        self.last_indexed.store(phy_offset, Ordering::Release);
        Ok(())
    }

    /// Candidate offsets for `topic#key` within `[begin, end]` ms, newest first. Hash
    /// collisions are possible: callers check the record.
    pub fn query(&self, topic: &str, key: &str, max: usize, begin: i64, end: i64) -> Vec<i64> {
        let full_key = format!("{topic}#{key}");
        let mut out = Vec::new();
        let files = self.files.read().unwrap().clone();
        for f in files.iter().rev() {
            let h = f.header();
            if h.index_count <= 1 {
                continue;
            }
            // Skip files whose time span misses the range entirely.
            if h.end_timestamp != 0 && (h.end_timestamp < begin || h.begin_timestamp > end) {
                continue;
            }
            f.select(&full_key, begin, end, max, &mut out);
            if out.len() >= max {
                break;
            }
        }
        out
    }

    /// RocketMQ's `IndexService.deleteExpiredFile`: deletes the index files (never the last)
    /// whose last entry points below `phys_min`, from the oldest on. Returns how many went.
    /// A query holding one keeps reading its mapping until it is done (see
    /// `MappedFileQueue::delete_head_files`).
    pub fn delete_expired_files(&self, phys_min: i64) -> usize {
        let doomed: Vec<Arc<IndexFile>> = {
            let files = self.files.read().unwrap();
            match files.first() {
                Some(f) if f.header().end_phy_offset < phys_min => files[..files.len() - 1]
                    .iter()
                    .take_while(|f| f.header().end_phy_offset < phys_min)
                    .cloned()
                    .collect(),
                _ => return 0,
            }
        };
        if doomed.is_empty() {
            return 0;
        }
        self.files
            .write()
            .unwrap()
            .retain(|f| !doomed.iter().any(|d| Arc::ptr_eq(d, f)));
        for f in &doomed {
            let path = f.file.path();
            match std::fs::remove_file(path) {
                Ok(()) => log::info!("retention: deleted index file {}", path.display()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => log::error!("retention: deleting {} failed: {e}", path.display()),
            }
        }
        doomed.len()
    }

    /// How many index files are mapped.
    pub fn file_count(&self) -> usize {
        self.files.read().unwrap().len()
    }

    /// Read-only views: pick up index files created since the last look.
    pub fn refresh(&self) -> Result<()> {
        if self.writable {
            return Ok(());
        }
        let fresh = IndexService::load(&self.dir, self.slot_num, self.index_num, false)?;
        *self.files.write().unwrap() = fresh.files.into_inner().unwrap();
        Ok(())
    }

    pub fn flush(&self) -> Result<()> {
        if let Some(last) = self.files.read().unwrap().last() {
            last.flush()?;
        }
        Ok(())
    }

    /// Releases the flushed pages of the index files no put needs mapped; see
    /// `IndexFile::release_cold_pages`. Returns the bytes released.
    pub fn release_cold_pages(&self, hot_window: usize, sweep: bool) -> usize {
        let files = self.files.read().unwrap().clone();
        let n = files.len();
        files
            .iter()
            .enumerate()
            .map(|(i, f)| f.release_cold_pages(i + 1 == n, hot_window, sweep))
            .sum()
    }
}
