//! Store errors as the classes of `ferromq.errors`: each `StoreError` becomes its named class,
//! raised with the response code the data plane answers it with.

use ferromq_store::StoreError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// The classes of `ferromq.errors` the store's errors become, each named once (exported with
/// their response codes as `STORE_ERROR_CLASSES`; a unit test checks every name is a
/// `StoreError` there whose own code is the one Rust gives).
pub(crate) const ERROR_CLASSES: [&str; 16] = [
    "StoreIOError",
    "MessageTooLargeError",
    "PropertiesTooLargeError",
    "MessageIllegalError",
    "InvalidTopicError",
    "InvalidArgumentError",
    "CorruptStoreError",
    "NotAStoreError",
    "StoreLockedError",
    "FlushDiskTimeoutError",
    "DiskFullError",
    "DispatchBehindError",
    "ReadOnlyStoreError",
    "StoreClosedError",
    "TimerDisabledError",
    "TimerFlowControlError",
];

/// The class in `ferromq.errors` for each store error (an index into ERROR_CLASSES).
fn error_class(e: &StoreError) -> usize {
    match e {
        StoreError::Io { .. } => 0,
        StoreError::MessageTooLarge { .. } => 1,
        StoreError::PropertiesTooLarge(_) => 2,
        StoreError::MessageIllegal(_) => 3,
        StoreError::InvalidTopic { .. } => 4,
        StoreError::InvalidArgument(_) => 5,
        StoreError::Corrupt { .. } => 6,
        StoreError::NotAStore(_) => 7,
        StoreError::Locked(_) => 8,
        StoreError::FlushTimeout { .. } => 9,
        StoreError::DiskFull { .. } => 10,
        StoreError::DispatchBehind { .. } => 11,
        StoreError::ReadOnly => 12,
        StoreError::Closed => 13,
        StoreError::TimerDisabled => 14,
        StoreError::TimerFlowControl { .. } => 15,
    }
}

/// (class name, response code) of each store error class: the code of one error of the class
/// (every error of a class has the same).
pub(crate) fn classes_and_codes() -> Vec<(&'static str, i32)> {
    let path = std::path::PathBuf::new;
    let examples = [
        StoreError::Io {
            path: path(),
            source: std::io::ErrorKind::Other.into(),
        },
        StoreError::MessageTooLarge { size: 2, max: 1 },
        StoreError::PropertiesTooLarge(32768),
        StoreError::MessageIllegal(String::new()),
        StoreError::InvalidTopic {
            topic: String::new(),
            reason: "",
        },
        StoreError::InvalidArgument(String::new()),
        StoreError::Corrupt {
            path: path(),
            reason: String::new(),
        },
        StoreError::NotAStore(path()),
        StoreError::Locked(path()),
        StoreError::FlushTimeout {
            offset: 0,
            timeout_ms: 0,
        },
        StoreError::DiskFull {
            path: path(),
            detail: String::new(),
        },
        StoreError::DispatchBehind {
            offset: 0,
            reason: String::new(),
        },
        StoreError::ReadOnly,
        StoreError::Closed,
        StoreError::TimerDisabled,
        StoreError::TimerFlowControl { limit: 1 },
    ];
    examples
        .iter()
        .map(|e| {
            (
                ERROR_CLASSES[error_class(e)],
                ferromq_remoting::codes::of_store_error(e),
            )
        })
        .collect()
}

static ERRORS_MODULE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The class `name` of `ferromq.errors`, raised with `message` and the response `code` a broker
/// answers it with.
fn errors_class(py: Python<'_>, name: &str, message: String, code: i32) -> PyErr {
    let class = ERRORS_MODULE
        .get_or_try_init(py, || py.import("ferromq.errors").map(Bound::unbind))
        .and_then(|m| m.bind(py).getattr(name))
        .and_then(|cls| cls.cast_into::<PyType>().map_err(PyErr::from));
    match class {
        Ok(cls) => PyErr::from_type(cls, (message, code)),
        // Not a ValueError the caller might take for a bad argument: the mapping itself is broken.
        Err(_) => PyRuntimeError::new_err(format!(
            "ferromq.errors has no exception class {name} (the store failed: {message})"
        )),
    }
}

/// A store error as its `ferromq.errors` class, with the code the data plane answers it with.
pub(crate) fn to_pyerr(py: Python<'_>, e: StoreError) -> PyErr {
    let code = ferromq_remoting::codes::of_store_error(&e);
    errors_class(py, ERROR_CLASSES[error_class(&e)], e.to_string(), code)
}

/// A refusal of the broker's rules (`ferromq.errors.BrokerError`).
pub(crate) fn broker_error(py: Python<'_>, code: i32, message: String) -> PyErr {
    errors_class(py, "BrokerError", message, code)
}

pub(crate) trait IntoPy<T> {
    fn py_err(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, StoreError> {
    fn py_err(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|e| to_pyerr(py, e))
    }
}
