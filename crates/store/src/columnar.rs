//! Stored records decoded into columns laid out as Apache Arrow buffers, for analytics readers
//! (the Spark data source). No Arrow dependency: every column is a set of little-endian byte
//! buffers (validity bitmap, offsets, values) that the reader wraps without copying.
//!
//! Bodies come out decompressed; the properties become a map column (entry offsets, keys, values).
//! A reader that writes the rows on (the table topics' tiering) can take the bodies as views into
//! the CommitLog's mapped files instead of copies ([`ColumnFilter::body_views`]).

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Result, StoreError};
use crate::mapped_file::MappedFile;
use crate::message::{property, push_offset_msg_id, sysflag, PropertySpans, RecordView};

/// Which records a [`ColumnBuilder`] keeps, whether it decodes the properties map, and how it
/// lays out bodies. Ranges are `[min, max)`; timestamps are in ms, as stored.
#[derive(Debug, Clone, Default)]
pub struct ColumnFilter {
    /// Keep only records whose TAGS property is one of these (exact match).
    pub tags: Option<Vec<String>>,
    /// Keep only records whose KEYS property is one of these (the whole property, exactly).
    pub keys: Option<Vec<String>>,
    pub min_store_timestamp: Option<i64>,
    pub max_store_timestamp: Option<i64>,
    pub min_born_timestamp: Option<i64>,
    pub max_born_timestamp: Option<i64>,
    pub min_commitlog_offset: Option<i64>,
    pub max_commitlog_offset: Option<i64>,
    pub include_properties: bool,
    /// Bodies as views into the mapped files records are read from ([`ViewColumn`]) rather than
    /// copies: for a reader that writes them on at once and does not keep them.
    pub body_views: bool,
}

fn in_range(value: i64, min: Option<i64>, max: Option<i64>) -> bool {
    min.is_none_or(|m| value >= m) && max.is_none_or(|m| value < m)
}

fn one_of(wanted: &Option<Vec<String>>, value: Option<&str>) -> bool {
    match (wanted, value) {
        (None, _) => true,
        (Some(wanted), Some(v)) => wanted.iter().any(|w| w == v),
        (Some(_), None) => false,
    }
}

impl ColumnFilter {
    /// The checks on the record's fixed fields, before its properties are parsed.
    fn accepts_header(&self, rec: &RecordView) -> bool {
        in_range(
            rec.physical_offset,
            self.min_commitlog_offset,
            self.max_commitlog_offset,
        ) && in_range(
            rec.store_timestamp,
            self.min_store_timestamp,
            self.max_store_timestamp,
        ) && in_range(
            rec.born_timestamp,
            self.min_born_timestamp,
            self.max_born_timestamp,
        )
    }

    fn accepts(&self, tags: Option<&str>, keys: Option<&str>) -> bool {
        one_of(&self.tags, tags) && one_of(&self.keys, keys)
    }
}

/// Records the column builders of this process have looked at (kept or not): what a query
/// decoded, for proving that pushed-down filters pruned the reads.
static RECORDS_EXAMINED: AtomicU64 = AtomicU64::new(0);

pub fn records_examined() -> u64 {
    RECORDS_EXAMINED.load(Ordering::Relaxed)
}

/// A variable-length column: an Arrow (utf8 or binary) array with 32-bit offsets.
#[derive(Debug, Default)]
pub struct VarColumn {
    /// Validity bitmap (bit set = present), empty while every value is present.
    pub validity: Vec<u8>,
    pub null_count: usize,
    pub offsets: Vec<u8>,
    pub data: Vec<u8>,
    len: usize,
}

impl VarColumn {
    fn with_capacity(values: usize, bytes: usize) -> Self {
        let mut c = VarColumn {
            offsets: Vec::with_capacity((values + 1) * 4),
            data: Vec::with_capacity(bytes),
            ..Default::default()
        };
        c.offsets.extend_from_slice(&0i32.to_le_bytes());
        c
    }

    fn end_value(&mut self) -> Result<()> {
        let end = i32::try_from(self.data.len())
            .map_err(|_| StoreError::InvalidArgument("column batch exceeds 2 GiB".into()))?;
        self.offsets.extend_from_slice(&end.to_le_bytes());
        if !self.validity.is_empty() {
            set_bit(&mut self.validity, self.len, true);
        }
        self.len += 1;
        Ok(())
    }

    fn push(&mut self, value: &[u8]) -> Result<()> {
        self.data.extend_from_slice(value);
        self.end_value()
    }

    fn push_msg_id(&mut self, store_host: &SocketAddr, physical_offset: i64) -> Result<()> {
        push_offset_msg_id(&mut self.data, store_host, physical_offset);
        self.end_value()
    }

    fn push_null(&mut self) -> Result<()> {
        if self.validity.is_empty() {
            // First null: every earlier value was present.
            self.validity = vec![0; self.len.div_ceil(8)];
            for i in 0..self.len {
                set_bit(&mut self.validity, i, true);
            }
        }
        self.end_value()?;
        set_bit(&mut self.validity, self.len - 1, false);
        self.null_count += 1;
        Ok(())
    }

    fn push_opt(&mut self, value: Option<&str>) -> Result<()> {
        match value {
            Some(v) => self.push(v.as_bytes()),
            None => self.push_null(),
        }
    }
}

/// A binary column in Arrow's binary-view layout: 16 bytes per value, holding the value itself
/// when it fits in 12 bytes, else its length, its first 4 bytes, a data buffer and the offset in
/// it. Values stay where the CommitLog's mapped files hold them (buffers 1 and up, `mapped`): no
/// copy, no fresh pages. Only values that had to be inflated are copied, into buffer 0 (`owned`).
#[derive(Debug, Default)]
pub struct ViewColumn {
    pub views: Vec<u8>,
    pub owned: Vec<u8>,
    /// The files the views point into, each with the end of the last value in it: the bytes a
    /// reader of the column may look at.
    pub mapped: Vec<(Arc<MappedFile>, usize)>,
}

const INLINE_VIEW_BYTES: usize = 12;

impl ViewColumn {
    fn with_capacity(values: usize) -> Self {
        ViewColumn {
            views: Vec::with_capacity(values * 16),
            ..Default::default()
        }
    }

    fn push_view(&mut self, value: &[u8], buffer: usize, offset: usize) -> Result<()> {
        let too_large = || StoreError::InvalidArgument("a view column value exceeds 2 GiB".into());
        let len = i32::try_from(value.len()).map_err(|_| too_large())?;
        self.views.extend_from_slice(&len.to_le_bytes());
        if value.len() <= INLINE_VIEW_BYTES {
            self.views.extend_from_slice(value);
            self.views
                .resize(self.views.len() + INLINE_VIEW_BYTES - value.len(), 0);
        } else {
            self.views.extend_from_slice(&value[..4]);
            let buffer = i32::try_from(buffer).map_err(|_| too_large())?;
            let offset = i32::try_from(offset).map_err(|_| too_large())?;
            self.views.extend_from_slice(&buffer.to_le_bytes());
            self.views.extend_from_slice(&offset.to_le_bytes());
        }
        Ok(())
    }

    fn push_owned(&mut self, value: &[u8]) -> Result<()> {
        let offset = self.owned.len();
        if value.len() > INLINE_VIEW_BYTES {
            self.owned.extend_from_slice(value);
        }
        self.push_view(value, 0, offset)
    }

    /// `value` is a slice of `file`'s mapping (else, or where an offset would not fit in a view,
    /// it is copied).
    fn push_mapped(&mut self, value: &[u8], file: &Arc<MappedFile>) -> Result<()> {
        let Some(pos) = file
            .position_of(value)
            .filter(|p| i32::try_from(p + value.len()).is_ok())
        else {
            return self.push_owned(value);
        };
        let end = pos + value.len();
        let index = match self.mapped.iter().rposition(|(f, _)| Arc::ptr_eq(f, file)) {
            Some(i) => i,
            None => {
                self.mapped.push((file.clone(), 0));
                self.mapped.len() - 1
            }
        };
        let seen = &mut self.mapped[index].1;
        *seen = (*seen).max(end);
        self.push_view(value, index + 1, pos)
    }
}

fn set_bit(bitmap: &mut Vec<u8>, i: usize, on: bool) {
    if bitmap.len() <= i / 8 {
        bitmap.resize(i / 8 + 1, 0);
    }
    if on {
        bitmap[i / 8] |= 1 << (i % 8);
    } else {
        bitmap[i / 8] &= !(1 << (i % 8));
    }
}

/// The columns of the Spark schema, in its order. Fixed-width columns are little-endian values.
#[derive(Debug)]
pub struct ColumnBatch {
    pub rows: usize,
    /// The bodies' bytes, however they are laid out.
    pub body_bytes: usize,
    pub topic: VarColumn,
    pub queue_id: Vec<u8>,
    pub queue_offset: Vec<u8>,
    pub commitlog_offset: Vec<u8>,
    pub msg_id: VarColumn,
    pub uniq_key: VarColumn,
    pub tags: VarColumn,
    pub keys: VarColumn,
    /// Map entry offsets (i32, rows + 1 of them) into `property_keys` / `property_values`.
    pub property_offsets: Vec<u8>,
    pub property_keys: VarColumn,
    pub property_values: VarColumn,
    /// The bodies as copies, or (with [`ColumnFilter::body_views`]) empty, and `body_views` holds
    /// them.
    pub body: VarColumn,
    pub body_views: Option<ViewColumn>,
    /// Microseconds since the epoch, as Spark timestamps are.
    pub born_timestamp: Vec<u8>,
    pub store_timestamp: Vec<u8>,
    pub born_host: VarColumn,
    pub store_host: VarColumn,
    pub reconsume_times: Vec<u8>,
    pub sys_flag: Vec<u8>,
    pub flag: Vec<u8>,
}

/// Appends records to a [`ColumnBatch`], skipping those the filter rejects.
pub struct ColumnBuilder {
    filter: ColumnFilter,
    batch: ColumnBatch,
    property_entries: i32,
    properties: PropertySpans,
    scratch: Vec<u8>,
    born_host: HostText,
    store_host: HostText,
}

/// The text of the last address seen: hosts repeat from record to record, formatting does not
/// need to.
#[derive(Default)]
struct HostText {
    addr: Option<SocketAddr>,
    text: Vec<u8>,
}

impl HostText {
    fn push(&mut self, col: &mut VarColumn, addr: &SocketAddr) -> Result<()> {
        if self.addr.as_ref() != Some(addr) {
            self.text.clear();
            write_addr(&mut self.text, addr);
            self.addr = Some(*addr);
        }
        col.push(&self.text)
    }
}

/// `addr` as `Display` writes it; IPv4 (every producer's born host may differ) without the
/// formatting machinery, which cost as much as the rest of a record's columns.
fn write_addr(out: &mut Vec<u8>, addr: &SocketAddr) {
    let SocketAddr::V4(v4) = addr else {
        write!(out, "{addr}").expect("writing to a Vec cannot fail");
        return;
    };
    for (i, octet) in v4.ip().octets().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        write_decimal(out, u32::from(octet));
    }
    out.push(b':');
    write_decimal(out, u32::from(v4.port()));
}

fn write_decimal(out: &mut Vec<u8>, mut n: u32) {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[at..]);
}

impl ColumnBuilder {
    pub fn new(filter: ColumnFilter) -> Self {
        Self::with_capacity(filter, 0, 0)
    }

    /// A builder whose buffers are sized up front for about `rows` records of `bytes` bytes in
    /// all: growing a buffer by doubling copies it, and touches twice the pages, which for the
    /// bodies costs about as much as decoding. Capacity the batch does not use is never touched,
    /// so it costs address space only.
    pub fn with_capacity(filter: ColumnFilter, rows: usize, bytes: usize) -> Self {
        let fixed = |width: usize| Vec::with_capacity(rows * width);
        // Per record: an offset message id (32), a host text (about 16) and a UNIQ_KEY (32).
        let short = |len: usize| VarColumn::with_capacity(rows, rows * len);
        let mut property_offsets = fixed(4);
        property_offsets.extend_from_slice(&0i32.to_le_bytes());
        let (body, body_views) = if filter.body_views {
            (VarColumn::default(), Some(ViewColumn::with_capacity(rows)))
        } else {
            (VarColumn::with_capacity(rows, bytes), None)
        };
        ColumnBuilder {
            filter,
            batch: ColumnBatch {
                rows: 0,
                body_bytes: 0,
                topic: short(16),
                queue_id: fixed(4),
                queue_offset: fixed(8),
                commitlog_offset: fixed(8),
                msg_id: short(32),
                uniq_key: short(32),
                tags: short(8),
                keys: short(16),
                property_offsets,
                property_keys: short(0),
                property_values: short(0),
                body,
                body_views,
                born_timestamp: fixed(8),
                store_timestamp: fixed(8),
                born_host: short(16),
                store_host: short(16),
                reconsume_times: fixed(4),
                sys_flag: fixed(4),
                flag: fixed(4),
            },
            property_entries: 0,
            properties: PropertySpans::default(),
            scratch: Vec::new(),
            born_host: HostText::default(),
            store_host: HostText::default(),
        }
    }

    pub fn rows(&self) -> usize {
        self.batch.rows
    }

    /// Bytes of the bodies gathered so far.
    pub fn body_bytes(&self) -> usize {
        self.batch.body_bytes
    }

    /// Adds one record (if the filter keeps it). Returns whether it was kept.
    pub fn push(&mut self, rec: &RecordView) -> Result<bool> {
        self.push_from(rec, None)
    }

    /// As `push`, for a record read in place from `file`'s mapping: with `body_views`, its body
    /// stays there.
    pub fn push_mapped(&mut self, rec: &RecordView, file: &Arc<MappedFile>) -> Result<bool> {
        self.push_from(rec, Some(file))
    }

    fn push_from(&mut self, rec: &RecordView, file: Option<&Arc<MappedFile>>) -> Result<bool> {
        RECORDS_EXAMINED.fetch_add(1, Ordering::Relaxed);
        if !self.filter.accepts_header(rec) {
            return Ok(false);
        }
        let props = rec.properties;
        self.properties.parse(props);
        let tags = self.properties.get(props, property::TAGS);
        let keys = self.properties.get(props, property::KEYS);
        if !self.filter.accepts(tags, keys) {
            return Ok(false);
        }
        let b = &mut self.batch;
        b.topic.push(rec.topic.as_bytes())?;
        b.queue_id.extend_from_slice(&rec.queue_id.to_le_bytes());
        b.queue_offset
            .extend_from_slice(&rec.queue_offset.to_le_bytes());
        b.commitlog_offset
            .extend_from_slice(&rec.physical_offset.to_le_bytes());
        b.msg_id.push_msg_id(&rec.store_host, rec.physical_offset)?;
        b.uniq_key
            .push_opt(self.properties.get(props, property::UNIQ_KEY))?;
        b.tags.push_opt(tags)?;
        b.keys.push_opt(keys)?;
        if self.filter.include_properties {
            for (k, v) in self.properties.pairs(props) {
                b.property_keys.push(k.as_bytes())?;
                b.property_values.push(v.as_bytes())?;
                self.property_entries += 1;
            }
            b.property_offsets
                .extend_from_slice(&self.property_entries.to_le_bytes());
        }
        let compressed = rec.sys_flag & sysflag::COMPRESSED != 0;
        let body = if compressed {
            self.scratch.clear();
            inflate(rec, &mut self.scratch)?;
            &self.scratch[..]
        } else {
            rec.body
        };
        b.body_bytes += body.len();
        match (&mut b.body_views, file) {
            (Some(views), Some(file)) if !compressed => views.push_mapped(body, file)?,
            (Some(views), _) => views.push_owned(body)?,
            (None, _) => b.body.push(body)?,
        }
        b.born_timestamp
            .extend_from_slice(&(rec.born_timestamp * 1000).to_le_bytes());
        b.store_timestamp
            .extend_from_slice(&(rec.store_timestamp * 1000).to_le_bytes());
        self.born_host.push(&mut b.born_host, &rec.born_host)?;
        self.store_host.push(&mut b.store_host, &rec.store_host)?;
        b.reconsume_times
            .extend_from_slice(&rec.reconsume_times.to_le_bytes());
        b.sys_flag.extend_from_slice(&rec.sys_flag.to_le_bytes());
        b.flag.extend_from_slice(&rec.flag.to_le_bytes());
        b.rows += 1;
        Ok(true)
    }

    pub fn finish(self) -> ColumnBatch {
        self.batch
    }
}

/// Decompresses a body with the codec its sysFlag names (bits 8–10: 0 or 3 zlib, 1 LZ4 frame,
/// 2 zstd), as the 4.9.4+ Java client writes them.
fn inflate(rec: &RecordView, out: &mut Vec<u8>) -> Result<()> {
    let codec = (rec.sys_flag & sysflag::COMPRESSION_TYPE) >> 8;
    let result = match codec {
        0 | 3 => flate2::read::ZlibDecoder::new(rec.body).read_to_end(out),
        1 => lz4_flex::frame::FrameDecoder::new(rec.body).read_to_end(out),
        2 => ruzstd::decoding::StreamingDecoder::new(rec.body)
            .map_err(std::io::Error::other)
            .and_then(|mut d| d.read_to_end(out)),
        _ => Err(std::io::Error::other(format!(
            "unknown compression type {codec}"
        ))),
    };
    result.map(|_| ()).map_err(|e| StoreError::Corrupt {
        path: Default::default(),
        reason: format!(
            "compressed body of {} at CommitLog offset {} does not inflate: {e}",
            rec.topic, rec.physical_offset
        ),
    })
}

/// Decodes packed records (a pull body, a CommitLog range) into columns.
pub fn decode_columns(buf: &[u8], filter: ColumnFilter) -> Result<ColumnBatch> {
    let mut builder = ColumnBuilder::new(filter);
    for rec in crate::message::iter_records(buf, false) {
        builder.push(&rec?)?;
    }
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nulls_start_a_bitmap_that_marks_earlier_values_present() {
        let mut c = VarColumn::with_capacity(0, 0);
        for _ in 0..9 {
            c.push(b"x").unwrap();
        }
        c.push_null().unwrap();
        c.push(b"yz").unwrap();
        assert_eq!(c.null_count, 1);
        assert_eq!(c.validity, vec![0xff, 0b101]);
        let offsets: Vec<i32> = c
            .offsets
            .chunks(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(offsets, vec![0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 9, 11]);
    }

    #[test]
    fn hosts_and_message_ids_are_written_as_display_writes_them() {
        let hosts: [SocketAddr; 4] = [
            "127.0.0.1:10911".parse().unwrap(),
            "0.0.0.0:0".parse().unwrap(),
            "255.255.255.255:65535".parse().unwrap(),
            "[::1]:10911".parse().unwrap(),
        ];
        for addr in hosts {
            let mut out = Vec::new();
            write_addr(&mut out, &addr);
            assert_eq!(String::from_utf8(out).unwrap(), addr.to_string());
            let mut id = VarColumn::with_capacity(0, 0);
            id.push_msg_id(&addr, 0x1234_5678).unwrap();
            let (decoded, offset) =
                crate::message::decode_offset_msg_id(std::str::from_utf8(&id.data).unwrap())
                    .unwrap();
            assert_eq!((decoded, offset), (addr, 0x1234_5678));
        }
    }
}
