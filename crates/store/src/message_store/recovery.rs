//! Recovery at open: find the end of valid CommitLog data, cut what follows, and dispatch again
//! whatever the consume queues and the index may miss.

use std::sync::atomic::Ordering;

use super::{Inner, RecoveryReport};
use crate::consume_queue::Unit;
use crate::error::Result;
use crate::message::{sysflag, DispatchProperties, RecordView};

impl Inner {
    /// Brings the store to a consistent state after a clean or unclean stop: finds the end of
    /// valid CommitLog data (magic and CRC), cuts the torn tail, drops consume-queue units past
    /// it and dispatches again every record that may be missing from queues or the index.
    pub(super) fn recover(&self, abnormal_exit: bool) -> Result<RecoveryReport> {
        let files = self.commitlog.files().files();
        let mut report = RecoveryReport {
            abnormal_exit,
            ..Default::default()
        };
        let cp_times = self
            .checkpoint
            .as_ref()
            .map(|c| c.lock().unwrap().times)
            .unwrap_or_default();
        let check_crc = self.config.check_crc_on_recover;
        // Where to start looking for the end: the third-last file after a clean stop; after a
        // crash, the newest file whose first record is older than the checkpoint says is safe.
        let scan_from_idx = if !abnormal_exit {
            files.len().saturating_sub(3)
        } else {
            let mut safe = cp_times.min_timestamp();
            if self.index.is_some() {
                safe = safe.min(cp_times.index_msg_timestamp - 3000);
            }
            let mut idx = 0;
            for (i, f) in files.iter().enumerate().rev() {
                let first_ok = f
                    .slice(0, f.file_size())
                    .and_then(|b| RecordView::parse(b, check_crc).ok())
                    .is_some_and(|v| {
                        v.store_timestamp <= safe
                            && v.physical_offset as u64 == f.file_from_offset()
                    });
                if first_ok {
                    idx = i;
                    break;
                }
            }
            idx
        };
        let scan_from = files.get(scan_from_idx).map_or(0, |f| f.file_from_offset());
        let end = self.commitlog.walk(scan_from, check_crc, |_| Ok(()))?;
        // Bytes that were written but lie past the valid end (a torn tail).
        if let Some(f) = self.commitlog.files().find(end) {
            let pos = (end - f.file_from_offset()) as usize;
            let tail = f.slice(pos, f.file_size() - pos).unwrap_or(&[]);
            report.truncated_bytes = tail
                .iter()
                .rposition(|b| *b != 0)
                .map_or(0, |p| p as u64 + 1);
            if report.truncated_bytes > 0 {
                log::warn!(
                    "store recovery: cutting {} bytes of torn or corrupt data after CommitLog offset {end}",
                    report.truncated_bytes
                );
            }
        }
        self.commitlog.truncate_to(end)?;
        report.commitlog_end = end;

        let min_phys = self.commitlog.min_offset();
        for cq in self.all_queues() {
            cq.truncate_dirty(end as i64)?;
            // Units below a CommitLog start that retention moved (`recoverTopicQueueTable`).
            cq.correct_min_offset(min_phys as i64);
        }
        self.lmqs.recover(min_phys as i64, end as i64);
        // Dispatch again from the oldest point a dispatcher may be missing. Dispatch runs under
        // the put lock right after each append, so after a clean stop (and after a process
        // crash, whose page cache survives) the queues are complete up to their newest unit.
        // After an unclean stop the index and the unflushed part of the queues may lag too.
        let mut from = self
            .all_queues()
            .iter()
            .map(|cq| cq.max_physical_end() as u64)
            .max()
            .unwrap_or(min_phys);
        if abnormal_exit {
            from = from.min(scan_from);
            if let Some(index) = &self.index {
                let idx_end = index.end_phy_offset();
                if idx_end >= 0 {
                    from = from.min(idx_end as u64);
                }
            }
        }
        let from = from.clamp(min_phys, end);
        let mut redispatched = 0u64;
        let mut last_ts = 0i64;
        self.commitlog.walk(from, false, |v| {
            self.dispatch(v)?;
            last_ts = v.store_timestamp;
            redispatched += 1;
            Ok(())
        })?;
        report.redispatched = redispatched;

        // Everything that survived is on disk from here on.
        let flushed = self.commitlog.flush(0)?;
        self.flush.complete(flushed.max(end), true);
        let last_ts = if last_ts > 0 {
            last_ts
        } else {
            self.last_record_timestamp(end)
        };
        self.last_store_ts.store(last_ts, Ordering::Release);
        self.flushed_store_ts.store(last_ts, Ordering::Release);
        self.flush_queues(0, true)?;
        if abnormal_exit || report.redispatched > 0 {
            log::info!(
                "store recovery ({} exit): CommitLog ends at {end}, {} records dispatched again",
                if abnormal_exit { "abnormal" } else { "normal" },
                report.redispatched
            );
        }
        Ok(report)
    }

    fn last_record_timestamp(&self, end: u64) -> i64 {
        // The newest unit of any queue points at one of the last records.
        self.all_queues()
            .iter()
            .filter_map(|cq| {
                let max = cq.max_offset();
                (max > cq.min_offset()).then(|| cq.unit(max - 1)).flatten()
            })
            .filter(|u| u.end() as u64 <= end)
            .filter_map(|u| self.store_timestamp_at(u.offset as u64))
            .max()
            .unwrap_or(0)
    }

    /// Builds the consume-queue unit and index entries of a record found in the CommitLog.
    pub(super) fn dispatch(&self, v: &RecordView) -> Result<()> {
        let tx = sysflag::transaction_value(v.sys_flag);
        let dp = DispatchProperties::parse(v.properties);
        if tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE {
            let cq = self.queue_or_create(v.topic, v.queue_id)?;
            let unit = Unit {
                offset: v.physical_offset,
                size: v.total_size() as i32,
                tags_code: self.record_tags_code(v.topic, v.properties, v.store_timestamp),
            };
            cq.put(v.queue_offset, unit)?;
            if let (true, Some(names), Some(offsets)) = (
                self.config.enable_multi_dispatch && self.lmq_on(v.topic),
                dp.multi_dispatch,
                dp.multi_queue_offset,
            ) {
                self.lmqs.dispatch(names, offsets, unit)?;
            }
        }
        if tx != sysflag::TRANSACTION_ROLLBACK_TYPE {
            if let Some(index) = &self.index {
                index.build_index(
                    v.topic,
                    dp.uniq_key,
                    dp.keys,
                    v.physical_offset,
                    v.store_timestamp,
                )?;
            }
        }
        Ok(())
    }
}
