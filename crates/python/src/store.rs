//! The `Store` class: a store directory opened by `MessageStore`, its writes, reads, queries
//! and retention.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferromq_store::message::MessageMeta;
use ferromq_store::message_store::Delivered;
use ferromq_store::{BatchItem, FlushDiskType, MessageStore, StoreConfig};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString};

use crate::codec::{parse_addr, PropertyEdits};
use crate::columns;
use crate::errors::IntoPy;
use crate::results::{GetResult, PutBatchResult, PutResult};

/// (time_up, space_full, manual, clean_at_once, commitlog, consume-queue and index files
/// deleted, min physical offset) of a retention round.
type CleanReportTuple = (bool, bool, bool, bool, usize, usize, usize, i64);

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A RocketMQ store directory opened for writing (one writer per directory) or read-only.
#[pyclass(frozen, module = "ferromq._store")]
pub struct Store {
    /// Shared with the data plane, which stores sends on its own threads.
    pub(crate) store: Arc<MessageStore>,
}

/// A master's HA service: streams the CommitLog to slaves and tells when they have an offset.
/// Its methods are in `ha.rs`, which builds it from a `Store`; it is declared here because a
/// `Store`'s reads may wait for its slaves (`confirm_reads_by`), and `ha.rs` uses this module,
/// not the reverse.
#[pyclass(frozen, module = "ferromq._store")]
pub struct HaMaster {
    /// Shared with the data plane, which waits for slaves on its own threads.
    pub(crate) inner: Arc<ferromq_store::ha::HaMaster>,
}

/// `_store.STORE_DEFAULTS`: `StoreConfig::new`'s value of every `Store` argument but `root`, by
/// the argument's name (the flush type and the delay levels as the arguments spell them). The
/// binding's signature, `_store.pyi`, `ferromq.store.StoreConfig` and the broker's configuration
/// repeat them; tests/unit/test_store_defaults.py checks each against this.
pub(crate) fn store_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let c = StoreConfig::new("");
    let d = PyDict::new(py);
    d.set_item("read_only", c.read_only)?;
    d.set_item("commitlog_dir", c.commitlog_dir)?;
    d.set_item("mapped_file_size_commitlog", c.mapped_file_size_commitlog)?;
    d.set_item(
        "mapped_file_size_consume_queue",
        c.mapped_file_size_consume_queue,
    )?;
    d.set_item(
        "flush_disk_type",
        match c.flush_disk_type {
            FlushDiskType::Async => "ASYNC_FLUSH",
            FlushDiskType::Sync => "SYNC_FLUSH",
        },
    )?;
    d.set_item("flush_interval_commitlog_ms", c.flush_interval_commitlog_ms)?;
    d.set_item("flush_commitlog_least_pages", c.flush_commitlog_least_pages)?;
    d.set_item(
        "flush_commitlog_thorough_interval_ms",
        c.flush_commitlog_thorough_interval_ms,
    )?;
    d.set_item(
        "flush_interval_consume_queue_ms",
        c.flush_interval_consume_queue_ms,
    )?;
    d.set_item(
        "flush_consume_queue_least_pages",
        c.flush_consume_queue_least_pages,
    )?;
    d.set_item(
        "flush_consume_queue_thorough_interval_ms",
        c.flush_consume_queue_thorough_interval_ms,
    )?;
    d.set_item("sync_flush_timeout_ms", c.sync_flush_timeout_ms)?;
    d.set_item("max_message_size", c.max_message_size)?;
    d.set_item("message_index_enable", c.message_index_enable)?;
    d.set_item("max_hash_slot_num", c.max_hash_slot_num)?;
    d.set_item("max_index_num", c.max_index_num)?;
    d.set_item(
        "message_delay_level",
        ferromq_store::config::DEFAULT_MESSAGE_DELAY_LEVEL,
    )?;
    d.set_item("store_host", c.store_host.to_string())?;
    d.set_item("check_crc_on_recover", c.check_crc_on_recover)?;
    d.set_item("enable_lmq", c.enable_lmq)?;
    d.set_item("enable_multi_dispatch", c.enable_multi_dispatch)?;
    d.set_item("warm_mapped_file_enable", c.warm_mapped_file_enable)?;
    d.set_item("file_reserved_time_hours", c.file_reserved_time_hours)?;
    d.set_item("delete_when", &c.delete_when)?;
    d.set_item("disk_max_used_space_ratio", c.disk_max_used_space_ratio)?;
    d.set_item(
        "disk_space_clean_forcibly_ratio",
        c.disk_space_clean_forcibly_ratio,
    )?;
    d.set_item(
        "disk_space_warning_level_ratio",
        c.disk_space_warning_level_ratio,
    )?;
    d.set_item("clean_file_forcibly_enable", c.clean_file_forcibly_enable)?;
    d.set_item(
        "delete_commitlog_files_interval_ms",
        c.delete_commitlog_files_interval_ms,
    )?;
    d.set_item(
        "delete_consume_queue_files_interval_ms",
        c.delete_consume_queue_files_interval_ms,
    )?;
    d.set_item(
        "destroy_mapped_file_interval_forcibly_ms",
        c.destroy_mapped_file_interval_forcibly_ms,
    )?;
    d.set_item("clean_resource_interval_ms", c.clean_resource_interval_ms)?;
    d.set_item(
        "max_transfer_count_on_message_in_memory",
        c.max_transfer_count_on_message_in_memory,
    )?;
    d.set_item(
        "max_transfer_bytes_on_message_in_memory",
        c.max_transfer_bytes_on_message_in_memory,
    )?;
    d.set_item(
        "max_transfer_count_on_message_in_disk",
        c.max_transfer_count_on_message_in_disk,
    )?;
    d.set_item(
        "max_transfer_bytes_on_message_in_disk",
        c.max_transfer_bytes_on_message_in_disk,
    )?;
    d.set_item(
        "access_message_in_memory_max_ratio",
        c.access_message_in_memory_max_ratio,
    )?;
    d.set_item("timer_wheel_enable", c.timer_wheel_enable)?;
    d.set_item("timer_precision_ms", c.timer_precision_ms)?;
    d.set_item("timer_max_delay_sec", c.timer_max_delay_sec)?;
    d.set_item("timer_roll_window_slot", c.timer_roll_window_slot)?;
    d.set_item("timer_congest_num_each_slot", c.timer_congest_num_each_slot)?;
    d.set_item("mapped_file_size_timer_log", c.mapped_file_size_timer_log)?;
    d.set_item("mapped_file_hot_window", c.mapped_file_hot_window)?;
    Ok(d)
}

fn flush_type(s: &str) -> PyResult<FlushDiskType> {
    match s {
        "ASYNC_FLUSH" => Ok(FlushDiskType::Async),
        "SYNC_FLUSH" => Ok(FlushDiskType::Sync),
        _ => Err(PyValueError::new_err(format!(
            "flush_disk_type must be ASYNC_FLUSH or SYNC_FLUSH, not {s:?}"
        ))),
    }
}

#[allow(clippy::too_many_arguments)]
impl Store {
    fn meta<'a>(
        topic: &'a str,
        queue_id: i32,
        flag: i32,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: &str,
        reconsume_times: i32,
        prepared_transaction_offset: i64,
    ) -> PyResult<MessageMeta<'a>> {
        Ok(MessageMeta {
            topic,
            queue_id,
            flag,
            sys_flag,
            born_timestamp: if born_timestamp > 0 {
                born_timestamp
            } else {
                now_ms()
            },
            born_host: parse_addr(born_host)?,
            reconsume_times,
            prepared_transaction_offset,
        })
    }

    fn wait_if(&self, wait: bool, end_offset: u64) -> bool {
        let sync = self.store.config().flush_disk_type == FlushDiskType::Sync;
        !(wait && sync)
            || self
                .store
                .wait_flushed(end_offset, self.store.sync_flush_timeout())
    }
}

#[pymethods]
#[allow(clippy::too_many_arguments)]
impl Store {
    #[new]
    #[pyo3(signature = (
        root, *, read_only=false, commitlog_dir=None,
        mapped_file_size_commitlog=1073741824, mapped_file_size_consume_queue=6000000,
        flush_disk_type="ASYNC_FLUSH", flush_interval_commitlog_ms=500, flush_commitlog_least_pages=4,
        flush_commitlog_thorough_interval_ms=10000, flush_interval_consume_queue_ms=1000,
        flush_consume_queue_least_pages=2, flush_consume_queue_thorough_interval_ms=60000,
        sync_flush_timeout_ms=5000, max_message_size=4194304, message_index_enable=true,
        max_hash_slot_num=5000000, max_index_num=20000000,
        message_delay_level="1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h",
        store_host="127.0.0.1:10911", check_crc_on_recover=true, enable_lmq=false,
        enable_multi_dispatch=false, warm_mapped_file_enable=true,
        file_reserved_time_hours=72, delete_when="04", disk_max_used_space_ratio=75,
        disk_space_clean_forcibly_ratio=85, disk_space_warning_level_ratio=90,
        clean_file_forcibly_enable=true,
        delete_commitlog_files_interval_ms=100, delete_consume_queue_files_interval_ms=100,
        destroy_mapped_file_interval_forcibly_ms=120000, clean_resource_interval_ms=10000,
        max_transfer_count_on_message_in_memory=32, max_transfer_bytes_on_message_in_memory=262144,
        max_transfer_count_on_message_in_disk=8, max_transfer_bytes_on_message_in_disk=65536,
        access_message_in_memory_max_ratio=40, timer_wheel_enable=true, timer_precision_ms=1000,
        timer_max_delay_sec=259200, timer_roll_window_slot=172800,
        timer_congest_num_each_slot=2147483647, mapped_file_size_timer_log=104857600,
        mapped_file_hot_window=Some(ferromq_store::config::DEFAULT_MAPPED_FILE_HOT_WINDOW)
    ))]
    fn new(
        py: Python<'_>,
        root: PathBuf,
        read_only: bool,
        commitlog_dir: Option<PathBuf>,
        mapped_file_size_commitlog: usize,
        mapped_file_size_consume_queue: usize,
        flush_disk_type: &str,
        flush_interval_commitlog_ms: u64,
        flush_commitlog_least_pages: usize,
        flush_commitlog_thorough_interval_ms: u64,
        flush_interval_consume_queue_ms: u64,
        flush_consume_queue_least_pages: usize,
        flush_consume_queue_thorough_interval_ms: u64,
        sync_flush_timeout_ms: u64,
        max_message_size: usize,
        message_index_enable: bool,
        max_hash_slot_num: usize,
        max_index_num: usize,
        message_delay_level: &str,
        store_host: &str,
        check_crc_on_recover: bool,
        enable_lmq: bool,
        enable_multi_dispatch: bool,
        warm_mapped_file_enable: bool,
        file_reserved_time_hours: u64,
        delete_when: &str,
        disk_max_used_space_ratio: u32,
        disk_space_clean_forcibly_ratio: u32,
        disk_space_warning_level_ratio: u32,
        clean_file_forcibly_enable: bool,
        delete_commitlog_files_interval_ms: u64,
        delete_consume_queue_files_interval_ms: u64,
        destroy_mapped_file_interval_forcibly_ms: u64,
        clean_resource_interval_ms: u64,
        max_transfer_count_on_message_in_memory: usize,
        max_transfer_bytes_on_message_in_memory: usize,
        max_transfer_count_on_message_in_disk: usize,
        max_transfer_bytes_on_message_in_disk: usize,
        access_message_in_memory_max_ratio: u32,
        timer_wheel_enable: bool,
        timer_precision_ms: i64,
        timer_max_delay_sec: i64,
        timer_roll_window_slot: i64,
        timer_congest_num_each_slot: i64,
        mapped_file_size_timer_log: usize,
        mapped_file_hot_window: Option<usize>,
    ) -> PyResult<Self> {
        let mut c = StoreConfig::new(root);
        c.read_only = read_only;
        c.commitlog_dir = commitlog_dir;
        c.mapped_file_size_commitlog = mapped_file_size_commitlog;
        c.mapped_file_size_consume_queue = mapped_file_size_consume_queue;
        c.flush_disk_type = flush_type(flush_disk_type)?;
        c.flush_interval_commitlog_ms = flush_interval_commitlog_ms;
        c.flush_commitlog_least_pages = flush_commitlog_least_pages;
        c.flush_commitlog_thorough_interval_ms = flush_commitlog_thorough_interval_ms;
        c.flush_interval_consume_queue_ms = flush_interval_consume_queue_ms;
        c.flush_consume_queue_least_pages = flush_consume_queue_least_pages;
        c.flush_consume_queue_thorough_interval_ms = flush_consume_queue_thorough_interval_ms;
        c.sync_flush_timeout_ms = sync_flush_timeout_ms;
        c.max_message_size = max_message_size;
        c.message_index_enable = message_index_enable;
        c.max_hash_slot_num = max_hash_slot_num;
        c.max_index_num = max_index_num;
        c.message_delay_level =
            ferromq_store::config::parse_delay_levels(message_delay_level).py_err(py)?;
        c.store_host = parse_addr(store_host)?;
        c.check_crc_on_recover = check_crc_on_recover;
        c.enable_lmq = enable_lmq;
        c.enable_multi_dispatch = enable_multi_dispatch;
        c.warm_mapped_file_enable = warm_mapped_file_enable;
        c.file_reserved_time_hours = file_reserved_time_hours;
        c.delete_when = delete_when.to_string();
        c.disk_max_used_space_ratio = disk_max_used_space_ratio;
        c.disk_space_clean_forcibly_ratio = disk_space_clean_forcibly_ratio;
        c.disk_space_warning_level_ratio = disk_space_warning_level_ratio;
        c.clean_file_forcibly_enable = clean_file_forcibly_enable;
        c.delete_commitlog_files_interval_ms = delete_commitlog_files_interval_ms;
        c.delete_consume_queue_files_interval_ms = delete_consume_queue_files_interval_ms;
        c.destroy_mapped_file_interval_forcibly_ms = destroy_mapped_file_interval_forcibly_ms;
        c.clean_resource_interval_ms = clean_resource_interval_ms;
        c.max_transfer_count_on_message_in_memory = max_transfer_count_on_message_in_memory;
        c.max_transfer_bytes_on_message_in_memory = max_transfer_bytes_on_message_in_memory;
        c.max_transfer_count_on_message_in_disk = max_transfer_count_on_message_in_disk;
        c.max_transfer_bytes_on_message_in_disk = max_transfer_bytes_on_message_in_disk;
        c.access_message_in_memory_max_ratio = access_message_in_memory_max_ratio;
        c.timer_wheel_enable = timer_wheel_enable;
        c.timer_precision_ms = timer_precision_ms;
        c.timer_max_delay_sec = timer_max_delay_sec;
        c.timer_roll_window_slot = timer_roll_window_slot;
        c.timer_congest_num_each_slot = timer_congest_num_each_slot;
        c.mapped_file_size_timer_log = mapped_file_size_timer_log;
        c.mapped_file_hot_window = mapped_file_hot_window;
        let store = py.detach(|| MessageStore::open(c)).py_err(py)?;
        Ok(Store {
            store: Arc::new(store),
        })
    }

    /// Appends one message; in SYNC_FLUSH mode with `wait`, returns once it is on disk.
    #[pyo3(signature = (
        topic, queue_id, body, properties="", *, flag=0, sys_flag=0, born_timestamp=0,
        born_host="127.0.0.1:0", reconsume_times=0, prepared_transaction_offset=0, wait=true
    ))]
    fn put(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        properties: &str,
        flag: i32,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: &str,
        reconsume_times: i32,
        prepared_transaction_offset: i64,
        wait: bool,
    ) -> PyResult<PutResult> {
        let meta = Self::meta(
            topic,
            queue_id,
            flag,
            sys_flag,
            born_timestamp,
            born_host,
            reconsume_times,
            prepared_transaction_offset,
        )?;
        let (r, flush_ok) = py
            .detach(|| {
                let r = self.store.put_message(&meta, body, properties)?;
                let ok = self.wait_if(wait, r.end_offset());
                Ok((r, ok))
            })
            .py_err(py)?;
        Ok(PutResult::new(r, flush_ok))
    }

    /// The send pipeline in one call: applies `edits` to the raw `properties` (see
    /// `ferromq_store::send`), appends and dispatches, without waiting for the disk. The result's
    /// `wait` says whether the producer waits for the disk.
    #[pyo3(signature = (
        topic, queue_id, body, properties, edits, *, flag=0, sys_flag=0, born_timestamp=0,
        born_host="127.0.0.1:0", reconsume_times=0, prepared_transaction_offset=0
    ))]
    fn send(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        properties: &str,
        edits: &PropertyEdits,
        flag: i32,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: &str,
        reconsume_times: i32,
        prepared_transaction_offset: i64,
    ) -> PyResult<PutResult> {
        let meta = Self::meta(
            topic,
            queue_id,
            flag,
            sys_flag,
            born_timestamp,
            born_host,
            reconsume_times,
            prepared_transaction_offset,
        )?;
        let r = py
            .detach(|| self.store.send(&meta, body, properties, &edits.rewrite()))
            .py_err(py)?;
        Ok(PutResult::new(r, true))
    }

    /// A client-encoded batch body (facts sheet §4.3) through the send pipeline: `edits` apply
    /// to the batch's own `properties`, which are joined to each message's.
    #[pyo3(signature = (
        topic, queue_id, body, properties, edits, *, sys_flag=0, born_timestamp=0,
        born_host="127.0.0.1:0"
    ))]
    fn send_batch(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        body: &[u8],
        properties: &str,
        edits: &PropertyEdits,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: &str,
    ) -> PyResult<PutBatchResult> {
        let meta = Self::meta(
            topic,
            queue_id,
            0,
            sys_flag,
            born_timestamp,
            born_host,
            0,
            0,
        )?;
        let inner = py
            .detach(|| {
                let items = ferromq_store::send::decode_batch(body)?;
                self.store
                    .send_batch(&meta, &items, properties, &edits.rewrite())
            })
            .py_err(py)?;
        Ok(PutBatchResult::new(inner, true))
    }

    /// Appends messages of one topic and queue as one unit. `properties` is one string for
    /// all or one per body; `flags` likewise optional per body.
    #[pyo3(signature = (
        topic, queue_id, bodies, properties=None, flags=None, *, sys_flag=0, born_timestamp=0,
        born_host="127.0.0.1:0", wait=true
    ))]
    fn put_batch(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        bodies: &Bound<'_, PyList>,
        properties: Option<&Bound<'_, PyAny>>,
        flags: Option<Vec<i32>>,
        sys_flag: i32,
        born_timestamp: i64,
        born_host: &str,
        wait: bool,
    ) -> PyResult<PutBatchResult> {
        let n = bodies.len();
        let body_objs: Vec<Bound<'_, PyBytes>> = bodies
            .iter()
            .map(|b| {
                b.cast_into::<PyBytes>()
                    .map_err(|_| PyValueError::new_err("bodies must be bytes"))
            })
            .collect::<PyResult<_>>()?;
        let shared: Option<Bound<'_, PyString>>;
        let per: Option<Vec<Bound<'_, PyString>>>;
        match properties {
            None => {
                shared = None;
                per = None;
            }
            Some(p) if p.is_instance_of::<PyString>() => {
                shared = Some(p.clone().cast_into::<PyString>()?);
                per = None;
            }
            Some(p) => {
                let list: Vec<Bound<'_, PyString>> = p
                    .try_iter()?
                    .map(|x| {
                        x?.cast_into::<PyString>()
                            .map_err(|_| PyValueError::new_err("properties must be str"))
                    })
                    .collect::<PyResult<_>>()?;
                if list.len() != n {
                    return Err(PyValueError::new_err(format!(
                        "{} properties for {n} bodies",
                        list.len()
                    )));
                }
                shared = None;
                per = Some(list);
            }
        }
        if flags.as_ref().is_some_and(|f| f.len() != n) {
            return Err(PyValueError::new_err("flags must have one entry per body"));
        }
        let shared_str = shared
            .as_ref()
            .map(|s| s.to_str())
            .transpose()?
            .unwrap_or("");
        let per_strs: Option<Vec<&str>> = per
            .as_ref()
            .map(|v| v.iter().map(|s| s.to_str()).collect::<PyResult<_>>())
            .transpose()?;
        let items: Vec<BatchItem<'_>> = body_objs
            .iter()
            .enumerate()
            .map(|(i, b)| BatchItem {
                flag: flags.as_ref().map_or(0, |f| f[i]),
                body: b.as_bytes(),
                properties: per_strs.as_ref().map_or(shared_str, |v| v[i]),
            })
            .collect();
        let meta = Self::meta(
            topic,
            queue_id,
            0,
            sys_flag,
            born_timestamp,
            born_host,
            0,
            0,
        )?;
        let (inner, flush_ok) = py
            .detach(|| {
                let r = self.store.put_messages(&meta, &items)?;
                let ok = self.wait_if(wait, r.end_offset());
                Ok((r, ok))
            })
            .py_err(py)?;
        Ok(PutBatchResult::new(inner, flush_ok))
    }

    /// Blocks (without the GIL) until the CommitLog is on disk up to `offset`.
    #[pyo3(signature = (offset, timeout_ms=None))]
    fn wait_flushed(&self, py: Python<'_>, offset: u64, timeout_ms: Option<u64>) -> bool {
        let timeout = timeout_ms.map_or(self.store.sync_flush_timeout(), Duration::from_millis);
        py.detach(|| self.store.wait_flushed(offset, timeout))
    }

    /// Calls `callback(ok: bool)` from the flush thread once the CommitLog is on disk up to
    /// `offset`. Use `loop.call_soon_threadsafe` inside it to reach an event loop.
    #[pyo3(signature = (offset, callback, timeout_ms=None))]
    fn on_flushed(
        &self,
        py: Python<'_>,
        offset: u64,
        callback: Py<PyAny>,
        timeout_ms: Option<u64>,
    ) {
        let timeout = timeout_ms.map_or(self.store.sync_flush_timeout(), Duration::from_millis);
        if self.store.config().flush_disk_type == FlushDiskType::Async {
            // Nothing asks the ASYNC flusher for this offset otherwise.
            py.detach(|| self.store.wait_flushed(0, Duration::ZERO));
        }
        self.store.notify_flushed(
            offset,
            timeout,
            Box::new(move |ok| {
                Python::attach(|py| {
                    if let Err(e) = callback.call1(py, (ok,)) {
                        e.write_unraisable(py, None);
                    }
                })
            }),
        );
    }

    /// Up to `max_count` records of one queue from `offset`; `tag_codes` keeps only units
    /// whose tags code is listed (None keeps all).
    #[pyo3(signature = (topic, queue_id, offset, max_count=32, max_bytes=262144, tag_codes=None))]
    fn get(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        max_bytes: usize,
        tag_codes: Option<Vec<i32>>,
    ) -> PyResult<GetResult> {
        GetResult::read(py, || {
            self.store.get_messages(
                topic,
                queue_id,
                offset,
                max_count,
                max_bytes,
                tag_codes.as_deref(),
            )
        })
    }

    /// A pull's read: up to `max_count` messages under the store's transfer caps.
    #[pyo3(signature = (topic, queue_id, offset, max_count, tag_codes=None))]
    fn pull(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        offset: i64,
        max_count: usize,
        tag_codes: Option<Vec<i32>>,
    ) -> PyResult<GetResult> {
        GetResult::read(py, || {
            self.store
                .pull_messages(topic, queue_id, offset, max_count, tag_codes.as_deref())
        })
    }

    /// Records of one queue in `[from_offset, to_offset)` decoded into Arrow column buffers
    /// (see `columns::to_py`), with "next_offset" and "status" of where the walk stopped.
    #[pyo3(signature = (topic, queue_id, from_offset, to_offset, filter, *, max_rows=65536,
        max_bytes=67108864, tag_codes=None))]
    #[allow(clippy::too_many_arguments)]
    fn read_columns<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        queue_id: i32,
        from_offset: i64,
        to_offset: i64,
        filter: &columns::RowFilter,
        max_rows: usize,
        max_bytes: usize,
        tag_codes: Option<Vec<i32>>,
    ) -> PyResult<Bound<'py, pyo3::types::PyDict>> {
        let include_properties = filter.inner.include_properties;
        let filter = filter.inner.clone();
        let (batch, scan) = py
            .detach(|| {
                self.store.read_columns(
                    topic,
                    queue_id,
                    from_offset,
                    to_offset,
                    max_rows,
                    max_bytes,
                    tag_codes.as_deref(),
                    filter,
                )
            })
            .py_err(py)?;
        let d = columns::to_py(py, batch, include_properties)?;
        d.set_item("next_offset", scan.next_begin_offset)?;
        d.set_item("status", scan.status.name())?;
        Ok(d)
    }

    /// Units of one queue in `[from_offset, to_offset)` whose tags code is one of `tag_codes`
    /// (all when None), counted in the consume queue alone: what a read of the range keeps at most.
    #[pyo3(signature = (topic, queue_id, from_offset, to_offset, tag_codes=None))]
    fn count_units(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        from_offset: i64,
        to_offset: i64,
        tag_codes: Option<Vec<i32>>,
    ) -> PyResult<i64> {
        py.detach(|| {
            self.store.count_units(
                topic,
                queue_id,
                from_offset,
                to_offset,
                tag_codes.as_deref(),
            )
        })
        .py_err(py)
    }

    /// Puts the due messages of delay level `level` into their real topics (reading the schedule
    /// queue from `from_offset`, at most `max_count`): (next offset, deliver time of the next
    /// message not yet due or None, [(topic, queue_id, queue_offset, tags_code)], skipped).
    #[allow(clippy::type_complexity)]
    fn deliver_due_delayed(
        &self,
        py: Python<'_>,
        level: i32,
        from_offset: i64,
        now_ms: i64,
        max_count: usize,
    ) -> PyResult<(i64, Option<i64>, Vec<(String, i32, i64, i64)>, usize)> {
        let r = py
            .detach(|| {
                self.store
                    .deliver_due_delayed(level, from_offset, now_ms, max_count)
            })
            .py_err(py)?;
        Ok((
            r.next_offset,
            r.next_due,
            delivered_tuples(r.delivered),
            r.skipped,
        ))
    }

    /// Takes up to `max_count` new timer-topic messages into the timer wheel: (messages taken,
    /// [(topic, queue_id, queue_offset, tags_code)] of the ones already due, put back at once
    /// when `deliver_due`; a slave's are chained into the wheel instead).
    #[allow(clippy::type_complexity)]
    #[pyo3(signature = (max_count, deliver_due=true))]
    fn timer_enqueue(
        &self,
        py: Python<'_>,
        max_count: usize,
        deliver_due: bool,
    ) -> PyResult<(usize, Vec<(String, i32, i64, i64)>)> {
        let r = py
            .detach(|| self.store.timer_enqueue(max_count, deliver_due))
            .py_err(py)?;
        Ok((r.taken, delivered_tuples(r.delivered)))
    }

    /// A slave takes its master's timer progress: the next slot the master delivers and its
    /// next timer-topic offset.
    fn timer_follow(&self, py: Python<'_>, read_time_ms: i64, queue_offset: i64) -> PyResult<()> {
        self.store
            .timer_follow(read_time_ms, queue_offset)
            .py_err(py)
    }

    /// (next slot to deliver, next timer-topic offset to enqueue, timer log flushed end).
    fn timer_progress(&self, py: Python<'_>) -> PyResult<(i64, i64, i64)> {
        self.store.timer_progress().py_err(py)
    }

    /// Puts back the timer messages whose slot has passed at `now_ms`, at most `max_count`:
    /// ([(topic, queue_id, queue_offset, tags_code)] delivered, messages rolled back into the
    /// timer topic, whether due slots are left).
    #[allow(clippy::type_complexity)]
    fn timer_dequeue(
        &self,
        py: Python<'_>,
        now_ms: i64,
        max_count: usize,
    ) -> PyResult<(Vec<(String, i32, i64, i64)>, usize, bool)> {
        let r = py
            .detach(|| self.store.timer_dequeue(now_ms, max_count))
            .py_err(py)?;
        Ok((delivered_tuples(r.delivered), r.rolled, r.more))
    }

    /// Flushes the timer log and wheel and saves `config/timercheck`.
    fn timer_checkpoint(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.store.timer_checkpoint()).py_err(py)
    }

    /// Deletes timer log files whose messages are gone from the CommitLog; how many.
    fn timer_clean(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.store.timer_clean()).py_err(py)
    }

    /// The timer's counters and backlog, by name.
    fn timer_stats(&self, py: Python<'_>) -> PyResult<HashMap<&'static str, i64>> {
        let s = self.store.timer_stats().py_err(py)?;
        Ok(HashMap::from([
            ("enqueued", s.enqueued as i64),
            ("delivered", s.delivered as i64),
            ("rolled", s.rolled as i64),
            ("recalled", s.recalled as i64),
            ("skipped", s.skipped as i64),
            ("pending", s.pending),
            ("enqueue_behind", s.enqueue_behind),
            ("dequeue_behind_ms", s.dequeue_behind_ms),
            ("read_time_ms", s.read_time_ms),
            ("queue_offset", s.queue_offset),
        ]))
    }

    /// The record at a CommitLog offset, or None.
    fn read(&self, py: Python<'_>, physical_offset: i64) -> PyResult<Option<Py<PyBytes>>> {
        let rec = py
            .detach(|| self.store.read_message(physical_offset))
            .py_err(py)?;
        Ok(rec.map(|r| PyBytes::new(py, &r).unbind()))
    }

    /// Whole records from `physical_offset` up to about `max_bytes`: (bytes, next offset).
    #[pyo3(signature = (physical_offset, max_bytes=1048576))]
    fn read_range(
        &self,
        py: Python<'_>,
        physical_offset: i64,
        max_bytes: usize,
    ) -> PyResult<(Py<PyBytes>, i64)> {
        let (bytes, next) = py
            .detach(|| self.store.read_range(physical_offset, max_bytes))
            .py_err(py)?;
        Ok((PyBytes::new(py, &bytes).unbind(), next))
    }

    /// The record an offsetMsgId names, or None.
    fn look_message_by_id(&self, py: Python<'_>, msg_id: &str) -> PyResult<Option<Py<PyBytes>>> {
        let rec = py
            .detach(|| self.store.look_message_by_id(msg_id))
            .py_err(py)?;
        Ok(rec.map(|r| PyBytes::new(py, &r).unbind()))
    }

    /// Records of `topic` with `key` in KEYS (or as UNIQ_KEY) stored in `[begin, end]` ms.
    #[pyo3(signature = (topic, key, max_num=32, begin=0, end=i64::MAX))]
    fn query(
        &self,
        py: Python<'_>,
        topic: &str,
        key: &str,
        max_num: usize,
        begin: i64,
        end: i64,
    ) -> PyResult<Vec<Py<PyBytes>>> {
        let recs = py
            .detach(|| self.store.query_by_key(topic, key, max_num, begin, end))
            .py_err(py)?;
        Ok(recs.iter().map(|r| PyBytes::new(py, r).unbind()).collect())
    }

    fn min_offset(&self, py: Python<'_>, topic: &str, queue_id: i32) -> PyResult<i64> {
        self.store.min_offset_in_queue(topic, queue_id).py_err(py)
    }

    /// Readers see only what `ha`'s slaves acknowledged (None: no such bound); see
    /// `MessageStore::confirm_reads_by`.
    #[pyo3(signature = (ha=None))]
    fn confirm_reads_by(&self, ha: Option<&HaMaster>) {
        self.store
            .confirm_reads_by(ha.map(|h| h.inner.acked_signal()));
    }

    fn max_offset(&self, py: Python<'_>, topic: &str, queue_id: i32) -> PyResult<i64> {
        py.detach(|| self.store.max_offset_in_queue(topic, queue_id))
            .py_err(py)
    }

    fn offset_by_time(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        timestamp: i64,
    ) -> PyResult<i64> {
        py.detach(|| self.store.offset_by_time(topic, queue_id, timestamp))
            .py_err(py)
    }

    fn store_time(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
        offset: i64,
    ) -> PyResult<Option<i64>> {
        py.detach(|| self.store.store_time(topic, queue_id, offset))
            .py_err(py)
    }

    fn earliest_store_time(
        &self,
        py: Python<'_>,
        topic: &str,
        queue_id: i32,
    ) -> PyResult<Option<i64>> {
        py.detach(|| self.store.earliest_store_time(topic, queue_id))
            .py_err(py)
    }

    /// `[(topic, queue_id, min_offset, max_offset), ...]` for every consume queue.
    fn queues(&self, py: Python<'_>) -> PyResult<Vec<(String, i32, i64, i64)>> {
        let qs = py.detach(|| self.store.queues()).py_err(py)?;
        Ok(qs
            .into_iter()
            .map(|q| (q.topic, q.queue_id, q.min_offset, q.max_offset))
            .collect())
    }

    #[getter]
    fn min_physical_offset(&self) -> i64 {
        self.store.min_physical_offset()
    }

    #[getter]
    fn max_physical_offset(&self) -> i64 {
        self.store.max_physical_offset()
    }

    #[getter]
    fn flushed_physical_offset(&self) -> i64 {
        self.store.flushed_physical_offset()
    }

    #[getter]
    fn read_only(&self) -> bool {
        self.store.is_read_only()
    }

    #[getter]
    fn flush_disk_type(&self) -> &'static str {
        match self.store.config().flush_disk_type {
            FlushDiskType::Async => "ASYNC_FLUSH",
            FlushDiskType::Sync => "SYNC_FLUSH",
        }
    }

    /// What recovery found at open: abnormal_exit, commitlog_end, truncated_bytes, redispatched.
    #[getter]
    fn recovery(&self) -> (bool, u64, u64, u64) {
        let r = self.store.recovery_report();
        (
            r.abnormal_exit,
            r.commitlog_end,
            r.truncated_bytes,
            r.redispatched,
        )
    }

    /// Forgets a topic's consume queues (files included); a topic created again starts at 0.
    fn delete_topic(&self, py: Python<'_>, topic: &str) -> PyResult<()> {
        py.detach(|| self.store.delete_topic(topic)).py_err(py)
    }

    /// Deletes the light message queues named (only those idle until `idle_until_ms` when given,
    /// judged under the put lock); the names deleted.
    #[pyo3(signature = (names, idle_until_ms=None))]
    fn delete_lmqs(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        idle_until_ms: Option<i64>,
    ) -> PyResult<Vec<String>> {
        py.detach(|| self.store.delete_lmqs(&names, idle_until_ms))
            .py_err(py)
    }

    /// The light message queues named `prefix...` with messages, none stored after `cutoff_ms`.
    fn idle_lmqs(&self, py: Python<'_>, prefix: &str, cutoff_ms: i64) -> PyResult<Vec<String>> {
        py.detach(|| self.store.idle_lmqs(prefix, cutoff_ms))
            .py_err(py)
    }

    /// How many light message queues (`%LMQ%...`) the store holds.
    fn lmq_count(&self, py: Python<'_>) -> PyResult<usize> {
        self.store.lmq_count().py_err(py)
    }

    /// (name, min offset, max offset, CommitLog offset of the newest record or -1) of each light
    /// message queue whose name starts with `prefix`, sorted by name.
    fn lmq_infos(&self, py: Python<'_>, prefix: &str) -> PyResult<Vec<(String, i64, i64, i64)>> {
        let infos = py.detach(|| self.store.lmq_infos(prefix)).py_err(py)?;
        Ok(infos
            .into_iter()
            .map(|i| (i.name, i.min_offset, i.max_offset, i.last_physical_offset))
            .collect())
    }

    /// One retention round now. Unset arguments come from the system: the clock, the local hour,
    /// the used fraction of the CommitLog's and the consume queues' partitions. Returns
    /// (time_up, space_full, manual, clean_at_once, commitlog_files_deleted,
    /// consume_queue_files_deleted, index_files_deleted, min_physical_offset).
    #[pyo3(signature = (*, now_ms=None, hour=None, physic_used_ratio=None, logics_used_ratio=None))]
    fn clean_expired_files(
        &self,
        py: Python<'_>,
        now_ms: Option<i64>,
        hour: Option<u32>,
        physic_used_ratio: Option<f64>,
        logics_used_ratio: Option<f64>,
    ) -> PyResult<CleanReportTuple> {
        if hour.is_some_and(|h| h > 23) {
            return Err(PyValueError::new_err("hour must be 0-23"));
        }
        let r = py
            .detach(|| {
                let mut input = self.store.system_clean_input();
                input.now_ms = now_ms.unwrap_or(input.now_ms);
                input.hour = hour.unwrap_or(input.hour);
                input.physic_used_ratio = physic_used_ratio.unwrap_or(input.physic_used_ratio);
                input.logics_used_ratio = logics_used_ratio.unwrap_or(input.logics_used_ratio);
                self.store.clean_expired_files(&input)
            })
            .py_err(py)?;
        Ok((
            r.time_up,
            r.space_full,
            r.manual,
            r.clean_at_once,
            r.commitlog_files_deleted,
            r.consume_queue_files_deleted,
            r.index_files_deleted,
            r.min_physical_offset,
        ))
    }

    /// The next 20 rounds delete expired CommitLog files whatever the hour
    /// (RocketMQ's `executeDeleteFilesManually`).
    fn execute_delete_files_manually(&self, py: Python<'_>) -> PyResult<()> {
        self.store.execute_delete_files_manually().py_err(py)
    }

    /// Tiered storage's floor: retention deletes only CommitLog files that end at or before it
    /// (None: no floor).
    #[getter]
    fn retention_floor(&self) -> Option<u64> {
        self.store.retention_floor()
    }

    #[setter]
    fn set_retention_floor(&self, floor: Option<u64>) {
        self.store.set_retention_floor(floor);
    }

    /// Drops the queues whose messages are all below the CommitLog start; returns how many.
    fn clean_expired_consume_queues(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.store.clean_expired_consume_queues())
            .py_err(py)
    }

    /// Retention totals since the open: (rounds, commitlog_files_deleted,
    /// consume_queue_files_deleted, index_files_deleted, consume_queues_destroyed).
    #[getter]
    fn retention_stats(&self) -> (u64, u64, u64, u64, u64) {
        let s = self.store.retention_stats();
        (
            s.rounds,
            s.commitlog_files_deleted,
            s.consume_queue_files_deleted,
            s.index_files_deleted,
            s.consume_queues_destroyed,
        )
    }

    /// (disk_full, used_ratio, dispatch_behind): writes refused for a full disk, the used
    /// fraction of the fuller store partition (-1 unknown), and the CommitLog offset from which
    /// stored records wait to be dispatched (None when none do). Measures the disks now.
    fn space_status(&self, py: Python<'_>) -> (bool, f64, Option<u64>) {
        let s = py.detach(|| self.store.space_status());
        (s.disk_full, s.used_ratio, s.dispatch_behind)
    }

    /// Read-only views: drops files the writer deleted and maps new ones.
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.store.refresh()).py_err(py)
    }

    /// Flushes CommitLog, consume queues, index and checkpoint now.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.store.flush()).py_err(py)
    }

    /// Flushes, marks a clean shutdown and releases the directory. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.store.close()).py_err(py)
    }
}

/// (topic, queue id, queue offset, tags code) of each delivered message, and of each light message
/// queue (queue 0) one was dispatched to: Python wakes the pulls, pops and lite consumers of both.
fn delivered_tuples(delivered: Vec<Delivered>) -> Vec<(String, i32, i64, i64)> {
    let mut out = Vec::with_capacity(delivered.len());
    for d in delivered {
        for (lmq, next_offset) in d.lmq_arrivals {
            out.push((lmq, 0, next_offset - 1, d.tags_code));
        }
        out.push((d.topic, d.queue_id, d.queue_offset, d.tags_code));
    }
    out
}
