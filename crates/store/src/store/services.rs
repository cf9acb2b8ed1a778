//! The store's background services: the CommitLog flusher (ASYNC timer or SYNC group commit)
//! and the consume-queue / index / checkpoint flusher.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::Inner;
use crate::config::FlushDiskType;
use crate::error::Result;

impl Inner {
    /// CommitLog flush service: on request (SYNC_FLUSH group commit, explicit flushes) or
    /// every `flush_interval_commitlog_ms` with the least-pages rule (ASYNC_FLUSH).
    pub(super) fn run_commitlog_flush(&self) {
        let cfg = &self.config;
        let interval = Duration::from_millis(cfg.flush_interval_commitlog_ms.max(1));
        let thorough = Duration::from_millis(cfg.flush_commitlog_thorough_interval_ms);
        let mut last_thorough = Instant::now();
        while self.flush.wait_for_work(interval) {
            let requested = self.flush.has_request();
            let full = cfg.flush_disk_type == FlushDiskType::Sync
                || requested
                || last_thorough.elapsed() >= thorough;
            if full {
                last_thorough = Instant::now();
            }
            self.flush_commitlog(if full {
                0
            } else {
                cfg.flush_commitlog_least_pages
            });
        }
    }

    fn flush_commitlog(&self, least_pages: usize) {
        let ts = self.last_store_ts.load(Ordering::Acquire);
        let written = self.commitlog.max_offset();
        match self.commitlog.flush(least_pages) {
            Ok(flushed) => {
                if flushed >= written {
                    self.flushed_store_ts.fetch_max(ts, Ordering::AcqRel);
                }
                self.flush.complete(flushed, true);
            }
            Err(e) => {
                log::error!("CommitLog flush failed: {e}");
                self.flush.complete(self.flush.flushed(), false);
            }
        }
    }

    /// Consume queue flush service; on thorough rounds also the index and the checkpoint.
    pub(super) fn run_consume_queue_flush(&self) {
        let cfg = &self.config;
        let interval = Duration::from_millis(cfg.flush_interval_consume_queue_ms.max(1));
        let thorough = Duration::from_millis(cfg.flush_consume_queue_thorough_interval_ms);
        let mut last_thorough = Instant::now();
        loop {
            {
                let (lock, cv) = &self.stop;
                let stopped = cv
                    .wait_timeout_while(lock.lock().unwrap(), interval, |s| !*s)
                    .unwrap()
                    .0;
                if *stopped {
                    return;
                }
            }
            let full = last_thorough.elapsed() >= thorough;
            if full {
                last_thorough = Instant::now();
            }
            if let Err(e) = self.flush_queues(
                if full {
                    0
                } else {
                    cfg.flush_consume_queue_least_pages
                },
                full,
            ) {
                log::error!("consume queue flush failed: {e}");
            }
        }
    }

    pub(super) fn flush_queues(&self, least_pages: usize, thorough: bool) -> Result<()> {
        let logics_ts = self.last_store_ts.load(Ordering::Acquire);
        for cq in self.all_queues() {
            cq.flush(least_pages)?;
        }
        let Some(cp) = &self.checkpoint else {
            return Ok(());
        };
        if thorough {
            if let Some(index) = &self.index {
                index.flush()?;
            }
        }
        let mut cp = cp.lock().unwrap();
        cp.times.physic_msg_timestamp = self.flushed_store_ts.load(Ordering::Acquire);
        if thorough {
            cp.times.logics_msg_timestamp = logics_ts;
            if let Some(index) = &self.index {
                cp.times.index_msg_timestamp = index.last_end_timestamp();
            }
        }
        cp.write(thorough)
    }

    pub(super) fn flush_all(&self) -> Result<()> {
        let _guard = self.put_lock.lock().unwrap();
        self.flush_commitlog(0);
        self.flush_queues(0, true)
    }
}
