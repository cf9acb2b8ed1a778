//! The read side of the store: a queue walked from an offset under a batch limit (pulls, column
//! reads), records by physical offset, and queries by key.

use super::*;

impl Inner {
    pub(super) fn get_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        limit: &BatchLimit,
        filter: &dyn Fn(i64) -> bool,
    ) -> Result<GetResult> {
        let mut body = Vec::new();
        let mut queue_offsets = Vec::new();
        let mut last_start = None;
        let scan = self.scan_messages(
            topic,
            queue_id,
            offset,
            i64::MAX,
            limit,
            filter,
            &mut |rec, _, queue_offset| {
                last_start = Some(body.len());
                body.extend_from_slice(rec);
                queue_offsets.push(queue_offset);
            },
        )?;
        let last_offset = last_start.map(|at| {
            let field = at + message::pos::PHYSICAL_OFFSET;
            u64::from_be_bytes(body[field..field + 8].try_into().unwrap())
        });
        Ok(GetResult {
            status: scan.status,
            next_begin_offset: scan.next_begin_offset,
            min_offset: scan.min_offset,
            max_offset: scan.max_offset,
            body,
            message_count: queue_offsets.len(),
            queue_offsets,
            suggest_pulling_from_slave: last_offset.is_some_and(|at| limit.on_disk(at)),
        })
    }

    /// RocketMQ's `getMessage` walk over one queue from `offset` (and before `end`), handing each
    /// accepted record, still in the mapped file, to `visit` with its queue offset (and, in a
    /// read-only view, the record parsed to check it).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan_messages(
        &self,
        topic: &str,
        queue_id: i32,
        offset: i64,
        end: i64,
        limit: &BatchLimit,
        filter: &dyn Fn(i64) -> bool,
        visit: &mut Visitor,
    ) -> Result<Scan> {
        if lmq::is_lmq(topic) {
            let Some(view) = self.lmqs.view(topic) else {
                return Ok(Scan::NO_QUEUE);
            };
            return Ok(self.scan_units(&view, None, offset, end, limit, filter, visit));
        }
        let Some(cq) = self.queue(topic, queue_id) else {
            return Ok(Scan::NO_QUEUE);
        };
        if self.config.read_only && (offset >= cq.max_offset() || offset < cq.min_offset()) {
            self.commitlog.refresh()?;
            self.refresh_queue(&cq)?;
        }
        Ok(self.scan_units(cq.as_ref(), Some(&cq), offset, end, limit, filter, visit))
    }

    /// [`Self::scan_messages`] over `units`; `owner`, a consume queue, is what a read-only view
    /// checks its records against.
    #[allow(clippy::too_many_arguments)]
    fn scan_units(
        &self,
        units: &dyn Units,
        owner: Option<&ConsumeQueue>,
        offset: i64,
        end: i64,
        limit: &BatchLimit,
        filter: &dyn Fn(i64) -> bool,
        visit: &mut Visitor,
    ) -> Scan {
        let mut scan = Scan::NO_QUEUE;
        let min = units.min_offset();
        let max = self.visible_max(units);
        scan.min_offset = min;
        scan.max_offset = max;
        let (status, next) = if max == 0 {
            (GetStatus::NoMessageInQueue, 0)
        } else if offset < min {
            (GetStatus::OffsetTooSmall, min)
        } else if offset == max {
            (GetStatus::OffsetOverflowOne, offset)
        } else if offset > max {
            (GetStatus::OffsetOverflowBadly, max)
        } else {
            self.scan_queue(units, owner, offset, max.min(end), limit, filter, visit)
        };
        scan.status = status;
        scan.next_begin_offset = next;
        scan
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn scan_queue(
        &self,
        cq: &dyn Units,
        owner: Option<&ConsumeQueue>,
        offset: i64,
        max: i64,
        limit: &BatchLimit,
        filter: &dyn Fn(i64) -> bool,
        visit: &mut Visitor,
    ) -> (GetStatus, i64) {
        // RocketMQ scans at most max(16000 bytes, maxMsgNums * 20 bytes) of consume queue.
        let scan_end = max.min(offset + (limit.max_count as i64).max(800));
        let read_limit = self.read_limit();
        let min_phys = self.commitlog.min_offset() as i64;
        // With tiered storage (a retention floor), units whose record retention deleted are in
        // the bucket: the read stops before the first one still on disk and says the offset is
        // too small, so the caller reads them from the bucket rather than skipping them.
        let tiered = self.retention.keep_from().is_some();
        let mut next = offset;
        let mut removed = false;
        let mut below_start = false;
        let (mut count, mut bytes) = (0usize, 0usize);
        while next < scan_end {
            let Some(unit) = cq.unit(next) else {
                if count == 0 && next == offset {
                    return (GetStatus::OffsetFoundNull, next + 1);
                }
                break;
            };
            if unit.is_pre_blank() || !filter(unit.tags_code) {
                next += 1;
                continue;
            }
            if unit.offset < min_phys {
                removed = true;
                below_start = true;
                next += 1;
                continue;
            }
            if below_start && tiered {
                return (GetStatus::OffsetTooSmall, next);
            }
            let size = unit.size as usize;
            if limit.full(count, bytes, size, unit.offset as u64) {
                break;
            }
            let copied = self
                .commitlog
                .with_record(unit.offset as u64, read_limit, |rec| {
                    if rec.len() != size {
                        return false;
                    }
                    if !self.config.read_only {
                        visit(rec, None, next);
                        return true;
                    }
                    match self.checked_record(rec, owner, next) {
                        Some(view) => visit(rec, Some(&view), next),
                        None => return false,
                    }
                    true
                });
            if copied != Some(true) {
                if self.config.read_only {
                    // A writer elsewhere has not finished this record: stop before it.
                    break;
                }
                removed = true;
                next += 1;
                continue;
            }
            count += 1;
            bytes += size;
            next += 1;
        }
        let status = if count > 0 {
            GetStatus::Found
        } else if below_start && tiered {
            GetStatus::OffsetTooSmall
        } else if removed {
            GetStatus::MessageWasRemoving
        } else {
            GetStatus::NoMatchedMessage
        };
        (status, next)
    }

    /// Read-only views check that a record is the one its unit names (a writer elsewhere may
    /// be mid-way through it): the record parsed, or None.
    pub(super) fn checked_record<'a>(
        &self,
        rec: &'a [u8],
        owner: Option<&ConsumeQueue>,
        queue_offset: i64,
    ) -> Option<RecordView<'a>> {
        let v = RecordView::parse(rec, false).ok()?;
        // A light message queue's record is its topic's (the LMQ names it in its properties).
        let real = owner.is_none_or(|cq| {
            v.topic == cq.topic() && v.queue_id == cq.queue_id() && v.queue_offset == queue_offset
        });
        (real && message::body_crc(v.body) == v.body_crc).then_some(v)
    }

    pub(super) fn read_record(&self, physical_offset: i64) -> Option<Vec<u8>> {
        if physical_offset < 0 {
            return None;
        }
        let limit = self.read_limit();
        let bytes = self
            .commitlog
            .with_record(physical_offset as u64, limit, |rec| rec.to_vec())?;
        let view = RecordView::parse(&bytes, self.config.read_only).ok()?;
        (view.physical_offset == physical_offset).then_some(bytes)
    }

    pub(super) fn read_range(&self, physical_offset: i64, max_bytes: usize) -> (Vec<u8>, i64) {
        let mut out = Vec::new();
        let mut at = physical_offset.max(0) as u64;
        let limit = self.read_limit().min(self.commitlog.max_offset());
        let file_size = self.commitlog.file_size() as u64;
        while at < limit {
            let magic = self.commitlog.with_bytes(at, 8, u64::MAX, |b| {
                i32::from_be_bytes(b[4..8].try_into().unwrap())
            });
            match magic {
                Some(message::MESSAGE_MAGIC_CODE) => {
                    let copied = self.commitlog.with_record(at, limit, |rec| {
                        if !out.is_empty() && out.len() + rec.len() > max_bytes {
                            return None;
                        }
                        out.extend_from_slice(rec);
                        Some(rec.len())
                    });
                    match copied.flatten() {
                        Some(n) => at += n as u64,
                        None => break,
                    }
                }
                Some(message::BLANK_MAGIC_CODE) => {
                    at = (at / file_size + 1) * file_size;
                    break;
                }
                _ => break,
            }
        }
        (out, at as i64)
    }

    pub(super) fn query_by_key(
        &self,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> Result<Vec<Vec<u8>>> {
        let Some(index) = &self.index else {
            return match &self.index_error {
                Some(why) => Err(StoreError::InvalidArgument(format!(
                    "this view has no index: {why}; open it with the writer's maxHashSlotNum and maxIndexNum"
                ))),
                None => Ok(Vec::new()),
            };
        };
        index.refresh()?;
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        // Ask for more candidates than wanted: collisions and duplicates are filtered below.
        for phys in index.query(
            topic,
            key,
            max_num.saturating_mul(2).max(max_num + 8),
            begin,
            end,
        ) {
            if out.len() >= max_num || !seen.insert(phys) {
                continue;
            }
            let Some(bytes) = self.read_record(phys) else {
                continue;
            };
            let Ok(v) = RecordView::parse(&bytes, false) else {
                continue;
            };
            let has_key = v.property(property::UNIQ_KEY) == Some(key)
                || v.property(property::KEYS)
                    .is_some_and(|ks| ks.split(' ').any(|k| k == key));
            if v.topic == topic && has_key {
                out.push(bytes);
            }
        }
        Ok(out)
    }
}
