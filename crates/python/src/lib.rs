//! `ferromq._store`: binds ferromq's Rust crates to Python.
//!
//! The store (`ferromq-store`: `Store`, `HaMaster`, `HaSlave`, the codecs), the broker's rules
//! and data plane (`ferromq-broker`: `Sender`, `Popper`, `ConsumerOffsets`, `DataPlane`), the
//! wire constants (`ferromq-remoting`) and the gRPC front (`ferromq-grpc`: `GrpcFront`), one
//! module per area. It converts arguments and results and maps `StoreError` to the classes of
//! `ferromq.errors`; every call that touches files or waits runs with the GIL released.

mod client_batch;
mod codec;
mod columns;
mod errors;
mod grpc;
mod ha;
mod offsets;
mod plane;
mod pop;
mod results;
mod send;
mod store;

use pyo3::prelude::*;

#[pymodule]
fn _store(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let _ = pyo3_log::try_init();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add(
        "build_profile",
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    )?;
    m.add("STORE_ERROR_CLASSES", errors::classes_and_codes())?;
    m.add("WIRE_CONSTANTS", ferromq_remoting::codes::table())?;
    m.add(
        "SYSTEM_TOPICS",
        ferromq_broker::topics::SYSTEM_TOPICS.to_vec(),
    )?;
    m.add(
        "SYSTEM_TOPIC_PREFIX",
        ferromq_broker::topics::SYSTEM_TOPIC_PREFIX,
    )?;
    m.add("SEND_V2_LETTERS", ferromq_broker::send::v2_letters())?;
    m.add("STORE_DEFAULTS", store::store_defaults(m.py())?)?;
    m.add("MAX_HELD_PULLS", ferromq_broker::pull::MAX_HELD_PULLS)?;
    m.add("MAX_WAITING_POPS", ferromq_broker::pop::MAX_WAITING_POPS)?;
    m.add(
        "MAX_LITE_TOPIC_BYTES",
        ferromq_broker::sender::MAX_LITE_TOPIC_BYTES,
    )?;
    m.add_class::<store::Store>()?;
    m.add_class::<results::PutResult>()?;
    m.add_class::<results::PutBatchResult>()?;
    m.add_class::<codec::PropertyEdits>()?;
    m.add_class::<results::GetResult>()?;
    m.add_class::<store::HaMaster>()?;
    m.add_class::<ha::HaSlave>()?;
    m.add_class::<plane::DataPlane>()?;
    m.add_class::<grpc::GrpcFront>()?;
    m.add_class::<send::Sender>()?;
    m.add_class::<send::SendOutcome>()?;
    m.add_class::<send::TopicRoute>()?;
    m.add_class::<offsets::ConsumerOffsets>()?;
    m.add_class::<pop::Popper>()?;
    m.add_class::<pop::Popped>()?;
    m.add_function(wrap_pyfunction!(ha::truncate_commitlog, m)?)?;
    m.add_function(wrap_pyfunction!(codec::java_hash, m)?)?;
    m.add_function(wrap_pyfunction!(codec::tags_code, m)?)?;
    m.add_function(wrap_pyfunction!(codec::parse_tag_expression, m)?)?;
    m.add_function(wrap_pyfunction!(codec::get_property, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decode_properties, m)?)?;
    m.add_function(wrap_pyfunction!(codec::encode_properties, m)?)?;
    m.add_function(wrap_pyfunction!(codec::frame_length, m)?)?;
    m.add_function(wrap_pyfunction!(codec::read_frame, m)?)?;
    m.add_function(wrap_pyfunction!(codec::json_reply, m)?)?;
    m.add_function(wrap_pyfunction!(codec::offset_msg_id, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decode_offset_msg_id, m)?)?;
    m.add_function(wrap_pyfunction!(codec::decode_records, m)?)?;
    m.add_function(wrap_pyfunction!(columns::decode_columns, m)?)?;
    m.add_function(wrap_pyfunction!(columns::index_segment, m)?)?;
    m.add_function(wrap_pyfunction!(columns::records_examined, m)?)?;
    m.add_function(wrap_pyfunction!(client_batch::encode_batch_messages, m)?)?;
    m.add_class::<columns::RowFilter>()?;
    m.add_function(wrap_pyfunction!(grpc::grpc_check_topic, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_check_lite_topic, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_check_group, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_check_invisible, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_polling_time, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_send_failure, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_outgoing, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::fifo_queue, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_message, m)?)?;
    m.add_function(wrap_pyfunction!(grpc::grpc_popped, m)?)?;
    m.add_function(wrap_pyfunction!(pop::pop_retry_topic, m)?)?;
    m.add_function(wrap_pyfunction!(pop::pop_retry_mark, m)?)?;
    m.add_function(wrap_pyfunction!(pop::pop_real_topic, m)?)?;
    m.add_function(wrap_pyfunction!(pop::pop_receipt, m)?)?;
    m.add_function(wrap_pyfunction!(pop::pop_checkpoint, m)?)?;
    m.add_function(wrap_pyfunction!(pop::pop_ack, m)?)?;
    Ok(())
}
