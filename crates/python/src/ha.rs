//! Replication classes: `HaMaster` (the HA port of a master) and `HaSlave` (a slave's link to
//! its master). The byte path runs on Rust threads; Python decides roles and addresses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ferromq_store::ha::{self, HaConfig};
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::errors::IntoPy;
use crate::store::{HaMaster, Store};

fn ha_config(
    heartbeat_interval_ms: u64,
    housekeeping_interval_ms: u64,
    transfer_batch_size: usize,
    slave_fallbehind_max: u64,
) -> PyResult<HaConfig> {
    if heartbeat_interval_ms == 0 || housekeeping_interval_ms == 0 || transfer_batch_size == 0 {
        return Err(PyValueError::new_err(
            "haSendHeartbeatInterval, haHousekeepingInterval and haTransferBatchSize must be > 0",
        ));
    }
    Ok(HaConfig {
        heartbeat_interval: Duration::from_millis(heartbeat_interval_ms),
        housekeeping_interval: Duration::from_millis(housekeeping_interval_ms),
        transfer_batch_size,
        slave_fallbehind_max,
    })
}

#[pymethods]
impl HaMaster {
    #[new]
    #[pyo3(signature = (
        store, bind, *, heartbeat_interval_ms=5000, housekeeping_interval_ms=20000,
        transfer_batch_size=32768, slave_fallbehind_max=268435456
    ))]
    fn new(
        py: Python<'_>,
        store: &Store,
        bind: &str,
        heartbeat_interval_ms: u64,
        housekeeping_interval_ms: u64,
        transfer_batch_size: usize,
        slave_fallbehind_max: u64,
    ) -> PyResult<Self> {
        let cfg = ha_config(
            heartbeat_interval_ms,
            housekeeping_interval_ms,
            transfer_batch_size,
            slave_fallbehind_max,
        )?;
        let bind: SocketAddr = bind
            .parse()
            .map_err(|e| PyValueError::new_err(format!("bad HA listen address {bind:?}: {e}")))?;
        let log = store.store.replica_log().py_err(py)?;
        let inner = py
            .detach(|| ha::HaMaster::start(log, bind, cfg))
            .map_err(|e| PyOSError::new_err(format!("cannot listen for slaves on {bind}: {e}")))?;
        Ok(HaMaster {
            inner: Arc::new(inner),
        })
    }

    /// The port slaves connect to.
    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    /// Slaves connected now.
    #[getter]
    fn connections(&self) -> usize {
        self.inner.connections()
    }

    /// The highest CommitLog offset a slave reported.
    #[getter]
    fn acked_offset(&self) -> u64 {
        self.inner.acked_offset()
    }

    /// A slave is connected and less than haSlaveFallbehindMax behind `end_offset`.
    fn is_slave_ok(&self, end_offset: u64) -> bool {
        self.inner.is_slave_ok(end_offset)
    }

    /// Each connected slave: (its address as seen here, offset reported, seconds since it last
    /// caught up with this master's end or None).
    fn slaves(&self) -> Vec<(String, u64, Option<f64>)> {
        self.inner
            .slaves()
            .into_iter()
            .map(|(peer, offset, since)| (peer, offset, since.map(|d| d.as_secs_f64())))
            .collect()
    }

    /// Acknowledge sends once every slave in `peers` reported them (controller mode's
    /// allAckInSyncStateSet); None: once any slave did.
    #[pyo3(signature = (peers))]
    fn set_ack_peers(&self, peers: Option<Vec<String>>) {
        self.inner.set_ack_peers(peers);
    }

    /// Wakes the streams waiting for data (call after appends).
    fn notify_appended(&self) {
        self.inner.notify_appended();
    }

    /// Calls `callback(ok: bool)` once a slave reported `offset` (ok) or after `timeout_ms`
    /// (not ok), from a replication thread. Use `loop.call_soon_threadsafe` inside it.
    fn on_replicated(&self, offset: u64, callback: Py<PyAny>, timeout_ms: u64) {
        self.inner.notify_replicated(
            offset,
            Duration::from_millis(timeout_ms),
            Box::new(move |ok| {
                Python::attach(|py| {
                    if let Err(e) = callback.call1(py, (ok,)) {
                        e.write_unraisable(py, None);
                    }
                })
            }),
        );
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }
}

/// A slave's replication from its master's HA address.
#[pyclass(frozen, module = "ferromq._store")]
pub struct HaSlave {
    inner: ha::HaSlave,
}

#[pymethods]
impl HaSlave {
    #[new]
    #[pyo3(signature = (
        store, master_addr=None, *, heartbeat_interval_ms=5000, housekeeping_interval_ms=20000
    ))]
    fn new(
        py: Python<'_>,
        store: &Store,
        master_addr: Option<String>,
        heartbeat_interval_ms: u64,
        housekeeping_interval_ms: u64,
    ) -> PyResult<Self> {
        let cfg = ha_config(heartbeat_interval_ms, housekeeping_interval_ms, 1, 0)?;
        let log = store.store.replica_log().py_err(py)?;
        Ok(HaSlave {
            inner: ha::HaSlave::start(log, master_addr, cfg),
        })
    }

    /// A new master HA address ("host:port"), used from the next connection on.
    fn update_master_address(&self, addr: &str) {
        self.inner.update_master_address(addr);
    }

    /// (master address, connected, offset last reported, error that stopped replication).
    fn status(&self) -> (Option<String>, bool, u64, Option<String>) {
        let st = self.inner.status();
        (st.master_addr, st.connected, st.reported_offset, st.error)
    }

    /// This end of the connection to the master ("host:port"), while connected.
    #[getter]
    fn local_addr(&self) -> Option<String> {
        self.inner.status().local_addr
    }

    fn close(&self, py: Python<'_>) {
        py.detach(|| self.inner.close());
    }
}

/// Cuts the store's CommitLog (and the consume-queue units past it) at `end`, a record
/// boundary: a former master drops what the new master never had before it follows it.
#[pyfunction]
pub fn truncate_commitlog(py: Python<'_>, store: &Store, end: u64) -> PyResult<()> {
    let log = store.store.replica_log().py_err(py)?;
    py.detach(|| log.truncate_to(end)).py_err(py)
}
