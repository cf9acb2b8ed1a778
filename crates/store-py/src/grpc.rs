//! `GrpcFront`: the gRPC port served by `ferromq-grpc` on Rust threads (TLS and plain clients,
//! HTTP/2), SendMessage served there on the broker's data plane, every other call handed on to
//! grpcio on a Unix socket; and the front's rules of a 5.x send (`ferromq_grpc::convert`) for
//! the sends Python serves.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use ferromq_grpc::convert::{self, Refusal};
use ferromq_grpc::proto::Message;
use ferromq_grpc::{FrontConfig, GrpcFront as Front};
use ferromq_remoting::tls::TlsServer;
use prost::Message as _;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::plane::{DataPlane, PlaneTls};

#[pyclass(frozen, module = "ferromq._store")]
pub struct GrpcFront {
    inner: Front,
}

#[pymethods]
impl GrpcFront {
    /// Binds `host:port` (0: any free port) and serves it on `threads` threads, handing every
    /// call on to grpcio at the Unix socket `upstream` but the sends `plane` serves.
    #[new]
    #[pyo3(signature = (host, port, upstream, *, threads=2, tls=None, plane=None))]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        upstream: PathBuf,
        threads: usize,
        tls: Option<PlaneTls>,
        plane: Option<PyRef<'_, DataPlane>>,
    ) -> PyResult<Self> {
        let sends = plane.map(|p| p.inner.send_port());
        let tls = tls
            .map(|t| TlsServer::new(&t.settings()?))
            .transpose()
            .map_err(|e| PyValueError::new_err(format!("TLS: {e}")))?;
        let inner = py
            .detach(|| {
                let bind: SocketAddr = (host, port).to_socket_addrs()?.next().ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::NotFound, "no address")
                })?;
                Front::start(FrontConfig {
                    bind,
                    upstream,
                    tls,
                    threads,
                    sends,
                })
            })
            .map_err(|e| match e.raw_os_error() {
                // OSError(errno, text): callers tell "address in use" by its errno.
                Some(errno) => PyOSError::new_err((errno, e.to_string())),
                None => PyOSError::new_err(format!("cannot listen on {host}:{port}: {e}")),
            })?;
        Ok(GrpcFront { inner })
    }

    #[getter]
    fn port(&self) -> u16 {
        self.inner.local_addr().port()
    }

    /// SendMessage calls the front answered itself (on the data plane) so far.
    #[getter]
    fn sends_answered(&self) -> u64 {
        self.inner.sends_answered()
    }

    /// Stops accepting and tells every client to go; connections still busy after `grace_ms`
    /// are closed. Idempotent.
    #[pyo3(signature = (grace_ms=1000))]
    fn stop(&self, py: Python<'_>, grace_ms: u64) {
        py.detach(|| self.inner.stop(Duration::from_millis(grace_ms)));
    }
}

fn refusal(r: Refusal) -> PyErr {
    PyValueError::new_err((r.code, r.message))
}

/// ValueError(code, message) when a 5.x client may not name topic `name`.
#[pyfunction]
pub(crate) fn grpc_check_topic(name: &str) -> PyResult<()> {
    convert::check_topic(name).map_err(refusal)
}

/// A 5.x client's message (`apache.rocketmq.v2.Message`, serialized) checked and made the
/// RocketMQ message the proxy makes of it, from `peer` at `now_ms`: its properties, system
/// flag, born timestamp (0: none given), type and FIFO message group. ValueError(code, message)
/// when it is refused.
#[pyfunction]
pub(crate) fn grpc_outgoing(
    message: &[u8],
    peer: &str,
    now_ms: i64,
) -> PyResult<(String, i32, i64, &'static str, Option<String>)> {
    let m = Message::decode(message).map_err(|e| PyValueError::new_err(e.to_string()))?;
    convert::validate(&m, now_ms).map_err(refusal)?;
    let out = convert::to_store(&m, peer).map_err(refusal)?;
    Ok((
        out.properties,
        out.sys_flag,
        out.born_timestamp,
        out.message_type.name(),
        out.message_group,
    ))
}

/// The write queue of FIFO message group `group` among `queues` (the proxy's consistent hash).
#[pyfunction]
pub(crate) fn fifo_queue(group: &str, queues: usize) -> usize {
    convert::fifo_queue(group, queues)
}

/// The type of a stored message by its properties (what a 5.x client is shown): NORMAL, FIFO,
/// DELAY or TRANSACTION.
#[pyfunction]
pub(crate) fn grpc_message_type(properties: &Bound<'_, PyDict>) -> &'static str {
    convert::message_type_of(|name| {
        properties
            .get_item(name)
            .ok()
            .flatten()
            .and_then(|v| v.extract::<String>().ok())
    })
    .name()
}
