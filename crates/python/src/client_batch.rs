//! `encode_batch_messages`: a SEND_BATCH_MESSAGE body straight from Arrow columns (the Spark
//! sink), so that no Python message object or properties string is built per row.

use ferromq_store::client_batch::{append_batch_message, BatchRow};
use ferromq_store::StoreError;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::PyBytes;

type Properties = Vec<(PyBackedStr, Option<PyBackedStr>)>;

/// A contiguous buffer's bytes, valid while `buf` lives.
fn bytes_of<'a>(buf: &'a PyUntypedBuffer, what: &str) -> PyResult<&'a [u8]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{what} is not a contiguous buffer"
        )));
    }
    // SAFETY: the buffer stays exported (so its memory stays put) while `buf` lives, and the
    // GIL is held throughout the call: Arrow buffers are immutable besides.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) })
}

fn column<T>(col: &Option<Vec<T>>, count: usize, name: &str) -> PyResult<()> {
    match col {
        Some(v) if v.len() != count => Err(PyValueError::new_err(format!(
            "{name} has {} entries for {count} messages",
            v.len()
        ))),
        _ => Ok(()),
    }
}

/// The batch body of `count` messages. Bodies come as an Arrow binary array's buffers: its
/// little-endian int32 offsets (read from entry `first`, the array's offset) and its data.
/// `tags`, `keys`, `properties` (name, value pairs) and `uniq_keys` are lists of `count`
/// entries or None. The bytes equal the Python client's `send_batch` encoding.
#[pyfunction]
#[pyo3(signature = (body_offsets, body_data, first, count, *, tags=None, keys=None,
    properties=None, uniq_keys=None))]
#[allow(clippy::too_many_arguments)]
pub fn encode_batch_messages<'py>(
    py: Python<'py>,
    body_offsets: &Bound<'py, PyAny>,
    body_data: &Bound<'py, PyAny>,
    first: usize,
    count: usize,
    tags: Option<Vec<Option<PyBackedStr>>>,
    keys: Option<Vec<Option<PyBackedStr>>>,
    properties: Option<Vec<Option<Properties>>>,
    uniq_keys: Option<Vec<PyBackedStr>>,
) -> PyResult<Bound<'py, PyBytes>> {
    column(&tags, count, "tags")?;
    column(&keys, count, "keys")?;
    column(&properties, count, "properties")?;
    column(&uniq_keys, count, "uniq_keys")?;
    let offsets_buf = PyUntypedBuffer::get(body_offsets)?;
    let data_buf = PyUntypedBuffer::get(body_data)?;
    let offsets = bytes_of(&offsets_buf, "body_offsets")?;
    let data = bytes_of(&data_buf, "body_data")?;
    if offsets.len() < (first + count + 1) * 4 {
        return Err(PyValueError::new_err(
            "body_offsets is shorter than first + count + 1 int32",
        ));
    }
    let offset = |i: usize| {
        let at = (first + i) * 4;
        i32::from_le_bytes(offsets[at..at + 4].try_into().unwrap())
    };
    let mut out = Vec::new();
    let mut pairs: Vec<(&str, Option<&str>)> = Vec::new();
    for i in 0..count {
        let (lo, hi) = (offset(i), offset(i + 1));
        if lo < 0 || hi < lo || hi as usize > data.len() {
            return Err(PyValueError::new_err(format!(
                "body {i}: offsets {lo}..{hi} are out of the data"
            )));
        }
        pairs.clear();
        if let Some(Some(props)) = properties.as_ref().map(|p| &p[i]) {
            pairs.extend(props.iter().map(|(k, v)| (&**k, v.as_deref())));
        }
        let row = BatchRow {
            body: &data[lo as usize..hi as usize],
            tags: tags.as_ref().and_then(|t| t[i].as_deref()),
            keys: keys.as_ref().and_then(|k| k[i].as_deref()),
            properties: &pairs,
            uniq_key: uniq_keys.as_ref().map(|u| &*u[i]),
        };
        append_batch_message(&mut out, &row).map_err(|e| match e {
            StoreError::InvalidArgument(why) => {
                PyValueError::new_err(format!("message {i}: {why}"))
            }
            other => PyValueError::new_err(format!("message {i}: {other}")),
        })?;
    }
    Ok(PyBytes::new(py, &out))
}
