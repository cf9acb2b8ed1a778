//! Light message queues (LMQ): queues named `%LMQ%...` that a record joins through its
//! INNER_MULTI_DISPATCH property (RocketMQ's multi-dispatch), with its place in each written into
//! INNER_MULTI_QUEUE_OFFSET at append. RocketMQ 5.5 stores each lite topic in one
//! (`%LMQ%$<parent>$<lite>`), so a broker may hold millions, mostly idle.
//!
//! Java keeps one consume-queue directory per LMQ (`consumequeue/%LMQ%.../0/`). Here every LMQ's
//! units live in memory, in one map, and are journalled in one append-only file (`lmq/journal`):
//! an idle LMQ costs a map entry and its units, no file and no descriptor. The journal is written
//! through (one `write` per unit, under the put lock) so a killed process loses nothing the
//! CommitLog kept, and synced with the consume queues; recovery replays it and dispatches again,
//! from the CommitLog, whatever it may miss. Deleting an LMQ (a lite topic's expiration) is a
//! journal record too; the journal is rewritten from memory when mostly dead.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, RwLock};

use crate::consume_queue::{Unit, Units};
use crate::error::{Result, StoreError};
use crate::message::{append_properties, encode_properties, parse_properties, property};

pub const LMQ_PREFIX: &str = "%LMQ%";
/// An LMQ's only queue.
pub const LMQ_QUEUE_ID: i32 = 0;
pub use crate::message::property::{INNER_MULTI_DISPATCH, INNER_MULTI_QUEUE_OFFSET};
/// Separates the names and the offsets (MixAll.LMQ_DISPATCH_SEPARATOR).
pub const DISPATCH_SEPARATOR: char = ',';

const JOURNAL_DIR: &str = "lmq";
const JOURNAL_FILE: &str = "journal";
const KIND_UNIT: u8 = 1;
const KIND_DELETE: u8 = 2;
/// An LMQ without units, at its offset (a compaction writes those whose records retention took).
const KIND_EMPTY: u8 = 3;
/// kind, name length, then (unit) queue offset, CommitLog offset, size, tags code.
const UNIT_FIELDS: usize = 8 + 8 + 4 + 8;
/// The journal is rewritten when it is this many times the size its live units need, and more
/// than COMPACT_MIN_BYTES.
const COMPACT_RATIO: u64 = 4;
const COMPACT_MIN_BYTES: u64 = 4 << 20;

pub fn is_lmq(topic: &str) -> bool {
    topic.starts_with(LMQ_PREFIX)
}

/// The LMQ names of an INNER_MULTI_DISPATCH value, in order (the others are not LMQs and are left
/// to Java's multi-dispatch to ordinary queues, which ferromq does not do).
pub fn dispatch_names(value: &str) -> impl Iterator<Item = &str> {
    value.split(DISPATCH_SEPARATOR).filter(|n| is_lmq(n))
}

/// One LMQ: its units from queue offset `min` on.
#[derive(Debug, Default)]
struct Queue {
    min: i64,
    units: Vec<Unit>,
}

impl Queue {
    fn max(&self) -> i64 {
        self.min + self.units.len() as i64
    }

    /// Adds the unit at `offset`: false when it is there already (a dispatch again).
    fn put(&mut self, offset: i64, unit: Unit) -> bool {
        if offset < self.max() {
            return false;
        }
        if offset > self.max() {
            // Units lost between (a journal cut short and a CommitLog that no longer holds
            // them): the queue goes on from here, as a consume queue after retention does.
            if !self.units.is_empty() {
                log::warn!(
                    "lmq: units {}..{offset} missing; the queue starts again at {offset}",
                    self.max()
                );
            }
            self.units.clear();
            self.min = offset;
        }
        self.units.push(unit);
        true
    }

    /// Drops the units whose record lies below `min_phys` (retention).
    fn correct_min(&mut self, min_phys: i64) {
        let gone = self
            .units
            .iter()
            .take_while(|u| u.offset < min_phys)
            .count();
        if gone > 0 {
            self.units.drain(..gone);
            self.min += gone as i64;
            self.units.shrink_to_fit();
        }
    }

    /// Drops the units whose record ends past `end` (a CommitLog tail cut at recovery).
    fn truncate_dirty(&mut self, end: i64) {
        while self.units.last().is_some_and(|u| u.end() > end) {
            self.units.pop();
        }
    }
}

/// One LMQ as a read walks it: each unit looked up when asked for, as a consume queue's.
pub struct LmqView<'a> {
    lmqs: &'a Lmqs,
    name: &'a str,
}

impl Units for LmqView<'_> {
    fn unit(&self, offset: i64) -> Option<Unit> {
        self.lmqs.unit(self.name, offset)
    }

    fn min_offset(&self) -> i64 {
        self.lmqs.min_offset(self.name)
    }

    fn max_offset(&self) -> i64 {
        self.lmqs.max_offset(self.name)
    }
}

/// An LMQ's offsets (tools, admin views).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LmqInfo {
    pub name: String,
    pub min_offset: i64,
    pub max_offset: i64,
    /// CommitLog offset of its newest record (-1: none left).
    pub last_physical_offset: i64,
}

struct Journal {
    file: File,
    bytes: u64,
}

/// Every LMQ of a store.
pub struct Lmqs {
    /// Filled at open in a writable store (recovery needs it); in a read-only view, from the
    /// journal on first use (a Spark task that reads a topic never pays for a million LMQs).
    queues: OnceLock<RwLock<HashMap<Box<str>, Queue>>>,
    /// None in a read-only view, and until the first LMQ of a store without a journal.
    journal: Mutex<Option<Journal>>,
    writable: bool,
    path: PathBuf,
}

/// An I/O error on `path` as the store's error.
fn io(path: &Path) -> impl Fn(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn unit_record(name: &str, offset: i64, u: &Unit) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + name.len() + UNIT_FIELDS);
    out.push(KIND_UNIT);
    put_u16(&mut out, name.len() as u16);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out.extend_from_slice(&u.offset.to_be_bytes());
    out.extend_from_slice(&u.size.to_be_bytes());
    out.extend_from_slice(&u.tags_code.to_be_bytes());
    out
}

fn empty_record(name: &str, min: i64) -> Vec<u8> {
    let mut out = Vec::with_capacity(11 + name.len());
    out.push(KIND_EMPTY);
    put_u16(&mut out, name.len() as u16);
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(&min.to_be_bytes());
    out
}

fn delete_record(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(3 + name.len());
    out.push(KIND_DELETE);
    put_u16(&mut out, name.len() as u16);
    out.extend_from_slice(name.as_bytes());
    out
}

/// The LMQs a journal file holds, the length of its whole records (a torn tail after them is
/// cut by a writer) and its length; none when there is no file.
fn read_journal(path: &Path) -> Result<(HashMap<Box<str>, Queue>, usize, usize)> {
    let mut bytes = Vec::new();
    match File::open(path) {
        Ok(mut f) => {
            f.read_to_end(&mut bytes).map_err(io(path))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(path)(e)),
    }
    let mut queues = HashMap::new();
    let valid = replay(&bytes, &mut queues);
    Ok((queues, valid, bytes.len()))
}

/// The journal's records replayed into `queues`; the length of its whole records (a torn tail
/// after it is cut).
fn replay(bytes: &[u8], queues: &mut HashMap<Box<str>, Queue>) -> usize {
    let mut at = 0;
    while at + 3 <= bytes.len() {
        let kind = bytes[at];
        let len = u16::from_be_bytes([bytes[at + 1], bytes[at + 2]]) as usize;
        let name_end = at + 3 + len;
        let end = name_end
            + match kind {
                KIND_UNIT => UNIT_FIELDS,
                KIND_EMPTY => 8,
                _ => 0,
            };
        if !matches!(kind, KIND_UNIT | KIND_DELETE | KIND_EMPTY) || end > bytes.len() {
            break;
        }
        let Ok(name) = std::str::from_utf8(&bytes[at + 3..name_end]) else {
            break;
        };
        if kind == KIND_DELETE {
            queues.remove(name);
        } else if kind == KIND_EMPTY {
            let min = i64::from_be_bytes(bytes[name_end..end].try_into().unwrap());
            let q = queues.entry(name.into()).or_default();
            if q.units.is_empty() {
                q.min = min;
            }
        } else {
            let f = &bytes[name_end..end];
            let offset = i64::from_be_bytes(f[0..8].try_into().unwrap());
            let unit = Unit {
                offset: i64::from_be_bytes(f[8..16].try_into().unwrap()),
                size: i32::from_be_bytes(f[16..20].try_into().unwrap()),
                tags_code: i64::from_be_bytes(f[20..28].try_into().unwrap()),
            };
            queues.entry(name.into()).or_default().put(offset, unit);
        }
        at = end;
    }
    at
}

impl Lmqs {
    /// The LMQs journalled under `store_root` (none when there is no journal yet); `writable`
    /// opens the journal to append (cutting a torn tail). A store that never had an LMQ gets its
    /// `lmq/` directory with the first.
    pub fn open(store_root: &Path, writable: bool) -> Result<Lmqs> {
        let path = store_root.join(JOURNAL_DIR).join(JOURNAL_FILE);
        let lmqs = Lmqs {
            queues: OnceLock::new(),
            journal: Mutex::new(None),
            writable,
            path,
        };
        if writable {
            let (queues, valid, len) = read_journal(&lmqs.path)?;
            if len > 0 || lmqs.path.exists() {
                let file = OpenOptions::new()
                    .append(true)
                    .read(true)
                    .open(&lmqs.path)
                    .map_err(io(&lmqs.path))?;
                if valid < len {
                    log::warn!(
                        "lmq: cutting {} bytes of a torn journal record at {valid}",
                        len - valid
                    );
                    file.set_len(valid as u64).map_err(io(&lmqs.path))?;
                }
                *lmqs.journal.lock().unwrap() = Some(Journal {
                    file,
                    bytes: valid as u64,
                });
            }
            let _ = lmqs.queues.set(RwLock::new(queues));
        }
        Ok(lmqs)
    }

    /// The map of LMQs (a read-only view reads the journal the first time).
    fn queues(&self) -> &RwLock<HashMap<Box<str>, Queue>> {
        self.queues.get_or_init(|| {
            let queues = read_journal(&self.path).map_or_else(
                |e| {
                    log::warn!("lmq: the journal could not be read: {e}");
                    HashMap::new()
                },
                |(queues, _, _)| queues,
            );
            RwLock::new(queues)
        })
    }

    fn write(&self, record: &[u8]) -> Result<()> {
        let mut journal = self.journal.lock().unwrap();
        if journal.is_none() {
            if !self.writable {
                return Err(StoreError::ReadOnly);
            }
            let dir = self.path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir).map_err(io(dir))?;
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .read(true)
                .open(&self.path)
                .map_err(io(&self.path))?;
            *journal = Some(Journal { file, bytes: 0 });
        }
        let Some(j) = journal.as_mut() else {
            return Err(StoreError::ReadOnly);
        };
        j.file.write_all(record).map_err(io(&self.path))?;
        j.bytes += record.len() as u64;
        Ok(())
    }

    /// The next offset of each LMQ named (0 for one not there yet), for INNER_MULTI_QUEUE_OFFSET;
    /// under the put lock, before the record is written.
    pub fn next_offsets<'a>(&self, names: impl Iterator<Item = &'a str>) -> Vec<i64> {
        let queues = self.queues().read().unwrap();
        names.map(|n| queues.get(n).map_or(0, Queue::max)).collect()
    }

    /// Puts a record's unit into LMQ `name` at `offset` (journalled); a unit it has already is
    /// left as it is.
    pub fn put(&self, name: &str, offset: i64, unit: Unit) -> Result<()> {
        if name.len() > u16::MAX as usize {
            return Err(StoreError::InvalidArgument(format!(
                "LMQ name of {} bytes",
                name.len()
            )));
        }
        let added = {
            let mut queues = self.queues().write().unwrap();
            match queues.get_mut(name) {
                Some(q) => q.put(offset, unit),
                None => {
                    let mut q = Queue::default();
                    q.put(offset, unit);
                    queues.insert(name.into(), q);
                    true
                }
            }
        };
        if added {
            self.write(&unit_record(name, offset, &unit))?;
        }
        Ok(())
    }

    /// Dispatches a record that names LMQs (its INNER_MULTI_DISPATCH and INNER_MULTI_QUEUE_OFFSET
    /// property values): each LMQ gets `unit` at its offset.
    pub fn dispatch(&self, names: &str, offsets: &str, unit: Unit) -> Result<()> {
        let all: Vec<&str> = names.split(DISPATCH_SEPARATOR).collect();
        let at: Vec<&str> = offsets.split(DISPATCH_SEPARATOR).collect();
        if all.len() != at.len() {
            log::error!(
                "lmq: {} names but {} offsets in a record",
                all.len(),
                at.len()
            );
            return Ok(());
        }
        for (name, offset) in all.into_iter().zip(at) {
            if let (true, Ok(offset)) = (is_lmq(name), offset.parse::<i64>()) {
                self.put(name, offset, unit)?;
            }
        }
        Ok(())
    }

    pub fn contains(&self, name: &str) -> bool {
        self.queues().read().unwrap().contains_key(name)
    }

    pub fn min_offset(&self, name: &str) -> i64 {
        self.queues().read().unwrap().get(name).map_or(0, |q| q.min)
    }

    pub fn max_offset(&self, name: &str) -> i64 {
        self.queues()
            .read()
            .unwrap()
            .get(name)
            .map_or(0, Queue::max)
    }

    pub fn unit(&self, name: &str, offset: i64) -> Option<Unit> {
        let queues = self.queues().read().unwrap();
        let q = queues.get(name)?;
        q.units.get(usize::try_from(offset - q.min).ok()?).copied()
    }

    /// LMQ `name` as a read walks it; None when there is no such LMQ.
    pub fn view<'a>(&'a self, name: &'a str) -> Option<LmqView<'a>> {
        self.contains(name).then_some(LmqView { lmqs: self, name })
    }

    /// How many LMQs there are.
    pub fn len(&self) -> usize {
        self.queues().read().unwrap().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The LMQs whose names start with `prefix`, sorted by name.
    pub fn infos(&self, prefix: &str) -> Vec<LmqInfo> {
        let queues = self.queues().read().unwrap();
        let mut out: Vec<LmqInfo> = queues
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .map(|(n, q)| LmqInfo {
                name: n.to_string(),
                min_offset: q.min,
                max_offset: q.max(),
                last_physical_offset: q.units.last().map_or(-1, |u| u.offset),
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Deletes LMQ `name` (journalled); false when there was none.
    pub fn delete(&self, name: &str) -> Result<bool> {
        Ok(self.delete_many([name])? == 1)
    }

    /// Deletes the LMQs named (journalled), how many there were. One pass for them all: whether
    /// the journal needs compacting is judged over every LMQ, once (a million lite topics expiring
    /// one call each took hours).
    pub fn delete_many<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Result<usize> {
        let mut deleted = 0;
        for name in names {
            if self.queues().write().unwrap().remove(name).is_some() {
                self.write(&delete_record(name))?;
                deleted += 1;
            }
        }
        if deleted > 0 {
            self.compact_if_stale()?;
        }
        Ok(deleted)
    }

    /// The newest CommitLog end any LMQ unit names (0: none).
    pub fn max_physical_end(&self) -> i64 {
        let queues = self.queues().read().unwrap();
        queues
            .values()
            .filter_map(|q| q.units.last().map(Unit::end))
            .max()
            .unwrap_or(0)
    }

    /// Recovery: drops the units past the CommitLog's `end` and below its `min_phys`.
    pub fn recover(&self, min_phys: i64, end: i64) {
        let mut queues = self.queues().write().unwrap();
        for q in queues.values_mut() {
            q.truncate_dirty(end);
            q.correct_min(min_phys);
        }
    }

    /// Retention: the units whose records are gone are dropped (the LMQs stay, empty, with their
    /// offsets); the journal is rewritten when mostly dead.
    pub fn correct_min(&self, min_phys: i64) -> Result<()> {
        {
            let mut queues = self.queues().write().unwrap();
            for q in queues.values_mut() {
                q.correct_min(min_phys);
            }
        }
        self.compact_if_stale()
    }

    /// Writes what the journal holds to disk.
    pub fn sync(&self) -> Result<()> {
        if let Some(j) = self.journal.lock().unwrap().as_ref() {
            j.file.sync_data().map_err(io(&self.path))?;
        }
        Ok(())
    }

    fn live_bytes(queues: &HashMap<Box<str>, Queue>) -> u64 {
        queues
            .iter()
            .map(|(n, q)| (3 + n.len() + UNIT_FIELDS) as u64 * q.units.len().max(1) as u64)
            .sum()
    }

    fn compact_if_stale(&self) -> Result<()> {
        let live = Self::live_bytes(&self.queues().read().unwrap());
        let bytes = self.journal.lock().unwrap().as_ref().map_or(0, |j| j.bytes);
        if bytes > COMPACT_MIN_BYTES && bytes > live * COMPACT_RATIO {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the journal from memory (a new file renamed over the old one): each unit, and
    /// each LMQ without units at its offset, so that its offsets go on after a restart.
    pub fn compact(&self) -> Result<()> {
        if !self.writable {
            return Err(StoreError::ReadOnly);
        }
        let mut journal = self.journal.lock().unwrap();
        let tmp = self.path.with_extension("compacting");
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io(dir))?;
        }
        let mut out = std::io::BufWriter::new(File::create(&tmp).map_err(io(&tmp))?);
        let mut bytes = 0u64;
        {
            let queues = self.queues().read().unwrap();
            for (name, q) in queues.iter() {
                if q.units.is_empty() {
                    let record = empty_record(name, q.min);
                    out.write_all(&record).map_err(io(&tmp))?;
                    bytes += record.len() as u64;
                }
                for (i, u) in q.units.iter().enumerate() {
                    let record = unit_record(name, q.min + i as i64, u);
                    out.write_all(&record).map_err(io(&tmp))?;
                    bytes += record.len() as u64;
                }
            }
        }
        let file = out.into_inner().map_err(|e| io(&tmp)(e.into_error()))?;
        file.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(io(&self.path))?;
        let file = OpenOptions::new()
            .append(true)
            .read(true)
            .open(&self.path)
            .map_err(io(&self.path))?;
        *journal = Some(Journal { file, bytes });
        log::info!("lmq: journal rewritten, {bytes} bytes");
        Ok(())
    }
}

/// INNER_MULTI_QUEUE_OFFSET's value for a record dispatched to `names` (INNER_MULTI_DISPATCH's
/// value): each LMQ's next offset, empty for a name that is not an LMQ (Java joins nulls as
/// empty strings).
pub fn queue_offsets_value(lmqs: &Lmqs, names: &str) -> String {
    let all: Vec<&str> = names.split(DISPATCH_SEPARATOR).collect();
    let offsets = lmqs.next_offsets(all.iter().copied().filter(|n| is_lmq(n)));
    let mut next = offsets.into_iter();
    all.iter()
        .map(|n| {
            if is_lmq(n) {
                next.next().unwrap_or(0).to_string()
            } else {
                String::new()
            }
        })
        .collect::<Vec<_>>()
        .join(&DISPATCH_SEPARATOR.to_string())
}

/// `properties` with INNER_MULTI_QUEUE_OFFSET set to `offsets` (last) and WAIT dropped, re-encoded
/// from their entries as Java's LmqDispatch.wrapLmqDispatch leaves a record's properties.
pub fn with_queue_offsets(properties: &str, offsets: &str) -> String {
    let kept = parse_properties(properties)
        .into_iter()
        .filter(|(name, _)| *name != INNER_MULTI_QUEUE_OFFSET && *name != property::WAIT);
    let mut out = encode_properties(kept);
    append_properties(&mut out, [(INNER_MULTI_QUEUE_OFFSET, offsets)]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(offset: i64) -> Unit {
        Unit {
            offset,
            size: 100,
            tags_code: 7,
        }
    }

    #[test]
    fn units_journal_and_replay() {
        let dir = tempfile::tempdir().unwrap();
        let lmqs = Lmqs::open(dir.path(), true).unwrap();
        lmqs.put("%LMQ%$p$a", 0, unit(0)).unwrap();
        lmqs.put("%LMQ%$p$a", 1, unit(100)).unwrap();
        lmqs.put("%LMQ%$p$a", 1, unit(100)).unwrap(); // a dispatch again: kept once
        lmqs.put("%LMQ%$p$b", 0, unit(200)).unwrap();
        lmqs.delete("%LMQ%$p$b").unwrap();
        assert_eq!(lmqs.max_offset("%LMQ%$p$a"), 2);
        drop(lmqs);
        let again = Lmqs::open(dir.path(), true).unwrap();
        assert_eq!(again.len(), 1);
        assert_eq!(again.unit("%LMQ%$p$a", 1), Some(unit(100)));
        assert!(!again.contains("%LMQ%$p$b"));
    }

    #[test]
    fn many_deleted_in_one_pass_stay_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let lmqs = Lmqs::open(dir.path(), true).unwrap();
        for (i, name) in ["%LMQ%$p$a", "%LMQ%$p$b", "%LMQ%$p$c"].iter().enumerate() {
            lmqs.put(name, 0, unit(100 * i as i64)).unwrap();
        }
        let gone = lmqs
            .delete_many(["%LMQ%$p$a", "%LMQ%$p$c", "%LMQ%$p$none"])
            .unwrap();
        assert_eq!(gone, 2);
        drop(lmqs);
        let again = Lmqs::open(dir.path(), true).unwrap();
        assert_eq!(again.len(), 1);
        assert!(again.contains("%LMQ%$p$b"));
        assert!(!again.contains("%LMQ%$p$a") && !again.contains("%LMQ%$p$c"));
    }

    #[test]
    fn a_torn_journal_tail_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let lmqs = Lmqs::open(dir.path(), true).unwrap();
        lmqs.put("%LMQ%$p$a", 0, unit(0)).unwrap();
        lmqs.put("%LMQ%$p$a", 1, unit(100)).unwrap();
        drop(lmqs);
        let path = dir.path().join(JOURNAL_DIR).join(JOURNAL_FILE);
        let len = std::fs::metadata(&path).unwrap().len();
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 5).unwrap();
        let again = Lmqs::open(dir.path(), true).unwrap();
        assert_eq!(again.max_offset("%LMQ%$p$a"), 1);
        again.put("%LMQ%$p$a", 1, unit(100)).unwrap();
        drop(again);
        assert_eq!(
            Lmqs::open(dir.path(), false)
                .unwrap()
                .max_offset("%LMQ%$p$a"),
            2
        );
    }

    #[test]
    fn recovery_and_retention_cut_units() {
        let dir = tempfile::tempdir().unwrap();
        let lmqs = Lmqs::open(dir.path(), true).unwrap();
        for i in 0..4 {
            lmqs.put("%LMQ%$p$a", i, unit(i * 100)).unwrap();
        }
        lmqs.recover(100, 300); // the record at 300 ends past the CommitLog's end
        assert_eq!(
            (lmqs.min_offset("%LMQ%$p$a"), lmqs.max_offset("%LMQ%$p$a")),
            (1, 3)
        );
        lmqs.correct_min(250).unwrap();
        assert_eq!(
            (lmqs.min_offset("%LMQ%$p$a"), lmqs.max_offset("%LMQ%$p$a")),
            (3, 3)
        );
        lmqs.compact().unwrap();
        drop(lmqs);
        // An LMQ whose records are all gone keeps its offset through a compaction and a restart.
        let again = Lmqs::open(dir.path(), true).unwrap();
        assert_eq!(again.max_offset("%LMQ%$p$a"), 3);
        again.put("%LMQ%$p$a", 3, unit(300)).unwrap();
        drop(again);
        let again = Lmqs::open(dir.path(), false).unwrap();
        assert_eq!(again.unit("%LMQ%$p$a", 3), Some(unit(300)));
    }

    #[test]
    fn queue_offsets_and_properties() {
        let dir = tempfile::tempdir().unwrap();
        let lmqs = Lmqs::open(dir.path(), true).unwrap();
        lmqs.put("%LMQ%$p$a", 0, unit(0)).unwrap();
        assert_eq!(
            queue_offsets_value(&lmqs, "%LMQ%$p$a,plain,%LMQ%$p$b"),
            "1,,0"
        );
        assert_eq!(
            with_queue_offsets("A\u{1}1\u{2}WAIT\u{1}true\u{2}B\u{1}2", "1"),
            "A\u{1}1\u{2}B\u{1}2\u{2}INNER_MULTI_QUEUE_OFFSET\u{1}1"
        );
        let view = lmqs.view("%LMQ%$p$a").unwrap();
        assert_eq!((view.min_offset(), view.max_offset()), (0, 1));
        assert_eq!(view.unit(0), Some(unit(0)));
        assert!(lmqs.view("%LMQ%$p$none").is_none());
    }
}
