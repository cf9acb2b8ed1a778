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
        let mut last_sweep = Instant::now();
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
            // Reads fault released pages back in: release them again once a thorough interval.
            let sweep = last_sweep.elapsed() >= thorough;
            if sweep {
                last_sweep = Instant::now();
            }
            self.release_commitlog_pages(sweep);
        }
    }

    /// Lets go of the CommitLog's flushed pages behind the hot window (`mapped_file_hot_window`).
    fn release_commitlog_pages(&self, sweep: bool) {
        if let Some(window) = self.config.mapped_file_hot_window {
            self.commitlog.files().release_cold_pages(window, sweep);
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
        // Pages behind the hot window go once flushed; thorough rounds also sweep up what reads
        // faulted back in.
        let window = self.config.mapped_file_hot_window;
        for cq in self.all_queues() {
            cq.flush(least_pages)?;
            if let Some(window) = window {
                cq.release_cold_pages(window, thorough);
            }
        }
        let Some(cp) = &self.checkpoint else {
            return Ok(());
        };
        if thorough {
            if let Some(index) = &self.index {
                index.flush()?;
            }
            self.lmqs.sync()?;
        }
        if let (Some(index), Some(window)) = (&self.index, window) {
            index.release_cold_pages(window, thorough);
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
        self.release_commitlog_pages(true);
        self.flush_queues(0, true)
    }
}
