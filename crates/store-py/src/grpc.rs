//! `GrpcFront`: the gRPC port served by `ferromq-grpc` on Rust threads (TLS and plain clients,
//! HTTP/2), every call handed on to grpcio on a Unix socket.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use ferromq_grpc::{FrontConfig, GrpcFront as Front};
use ferromq_remoting::tls::TlsServer;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

use crate::plane::PlaneTls;

#[pyclass(frozen, module = "ferromq._store")]
pub struct GrpcFront {
    inner: Front,
}

#[pymethods]
impl GrpcFront {
    /// Binds `host:port` (0: any free port) and serves it on `threads` threads, handing every
    /// call on to grpcio at the Unix socket `upstream`.
    #[new]
    #[pyo3(signature = (host, port, upstream, *, threads=2, tls=None))]
    fn new(
        py: Python<'_>,
        host: &str,
        port: u16,
        upstream: PathBuf,
        threads: usize,
        tls: Option<PlaneTls>,
    ) -> PyResult<Self> {
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

    /// Stops accepting and tells every client to go; connections still busy after `grace_ms`
    /// are closed. Idempotent.
    #[pyo3(signature = (grace_ms=1000))]
    fn stop(&self, py: Python<'_>, grace_ms: u64) {
        py.detach(|| self.inner.stop(Duration::from_millis(grace_ms)));
    }
}
