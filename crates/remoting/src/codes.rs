//! The request codes, response codes, pull flags and retry and dead letter topic prefixes the
//! data plane speaks, each defined once here (the binding exports them as
//! `_store.WIRE_CONSTANTS`; a Python unit test checks them against `ferromq.protocol`, so the two
//! languages cannot drift apart).

use ferromq_store::StoreError;

/// The topic transaction half messages are kept in until they are committed or rolled back.
pub const TRANS_HALF_TOPIC: &str = "RMQ_SYS_TRANS_HALF_TOPIC";

/// Retry topics' prefix (`MixAll.RETRY_GROUP_TOPIC_PREFIX`): a group's `%RETRY%<group>`, a
/// popping group's `%RETRY%<group>_<topic>` and `%RETRY%<group>+<topic>`.
pub const RETRY_PREFIX: &str = "%RETRY%";

/// Dead letter topics' prefix (`MixAll.DLQ_GROUP_TOPIC_PREFIX`): `%DLQ%<group>`.
pub const DLQ_PREFIX: &str = "%DLQ%";

/// Request codes.
pub const SEND_MESSAGE: i32 = 10;
pub const PULL_MESSAGE: i32 = 11;
pub const SEND_MESSAGE_V2: i32 = 310;
pub const SEND_BATCH_MESSAGE: i32 = 320;
pub const POP_MESSAGE: i32 = 200050;
pub const ACK_MESSAGE: i32 = 200051;
pub const CHANGE_MESSAGE_INVISIBLETIME: i32 = 200053;

/// Response codes.
pub const SUCCESS: i32 = 0;
pub const SYSTEM_ERROR: i32 = 1;
pub const SYSTEM_BUSY: i32 = 2;
pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
pub const FLUSH_DISK_TIMEOUT: i32 = 10;
pub const SLAVE_NOT_AVAILABLE: i32 = 11;
pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
pub const MESSAGE_ILLEGAL: i32 = 13;
pub const SERVICE_NOT_AVAILABLE: i32 = 14;
pub const TOPIC_NOT_EXIST: i32 = 17;
pub const PULL_NOT_FOUND: i32 = 19;
pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
pub const PULL_OFFSET_MOVED: i32 = 21;
pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
pub const INVALID_PARAMETER: i32 = 29;
pub const POLLING_TIMEOUT: i32 = 210;

/// PullSysFlag bits.
pub const FLAG_COMMIT_OFFSET: i32 = 0x1;
pub const FLAG_SUSPEND: i32 = 0x2;
pub const FLAG_SUBSCRIPTION: i32 = 0x4;

/// The response code a store refusal is answered with (the binding gives it to the exception
/// it raises, so Python answers the same code).
pub fn of_store_error(e: &StoreError) -> i32 {
    match e {
        StoreError::MessageTooLarge { .. }
        | StoreError::PropertiesTooLarge(_)
        | StoreError::MessageIllegal(_)
        | StoreError::InvalidTopic { .. } => MESSAGE_ILLEGAL,
        StoreError::FlushTimeout { .. } => FLUSH_DISK_TIMEOUT,
        StoreError::Locked(_)
        | StoreError::DiskFull { .. }
        | StoreError::DispatchBehind { .. }
        | StoreError::ReadOnly
        | StoreError::Closed => SERVICE_NOT_AVAILABLE,
        StoreError::Io { .. }
        | StoreError::InvalidArgument(_)
        | StoreError::TimerDisabled
        | StoreError::TimerFlowControl { .. }
        | StoreError::Corrupt { .. }
        | StoreError::NotAStore(_) => SYSTEM_ERROR,
    }
}

/// Every constant above by the name Python gives it (`RequestCode.X`, `ResponseCode.X`,
/// `PULL_FLAG_X`, the system topics and the retry and dead letter prefixes), the store's system topic of delayed messages, and the
/// property names the store and the send rules read or set.
pub fn table() -> Vec<(&'static str, String)> {
    let ints = [
        ("RequestCode.SEND_MESSAGE", SEND_MESSAGE),
        ("RequestCode.PULL_MESSAGE", PULL_MESSAGE),
        ("RequestCode.SEND_MESSAGE_V2", SEND_MESSAGE_V2),
        ("RequestCode.SEND_BATCH_MESSAGE", SEND_BATCH_MESSAGE),
        ("RequestCode.POP_MESSAGE", POP_MESSAGE),
        ("RequestCode.ACK_MESSAGE", ACK_MESSAGE),
        (
            "RequestCode.CHANGE_MESSAGE_INVISIBLETIME",
            CHANGE_MESSAGE_INVISIBLETIME,
        ),
        ("ResponseCode.SUCCESS", SUCCESS),
        ("ResponseCode.SYSTEM_ERROR", SYSTEM_ERROR),
        ("ResponseCode.SYSTEM_BUSY", SYSTEM_BUSY),
        (
            "ResponseCode.REQUEST_CODE_NOT_SUPPORTED",
            REQUEST_CODE_NOT_SUPPORTED,
        ),
        ("ResponseCode.TOPIC_NOT_EXIST", TOPIC_NOT_EXIST),
        (
            "ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST",
            SUBSCRIPTION_GROUP_NOT_EXIST,
        ),
        ("ResponseCode.INVALID_PARAMETER", INVALID_PARAMETER),
        ("ResponseCode.MESSAGE_ILLEGAL", MESSAGE_ILLEGAL),
        ("ResponseCode.SERVICE_NOT_AVAILABLE", SERVICE_NOT_AVAILABLE),
        ("ResponseCode.FLUSH_DISK_TIMEOUT", FLUSH_DISK_TIMEOUT),
        ("ResponseCode.SLAVE_NOT_AVAILABLE", SLAVE_NOT_AVAILABLE),
        ("ResponseCode.FLUSH_SLAVE_TIMEOUT", FLUSH_SLAVE_TIMEOUT),
        ("ResponseCode.PULL_NOT_FOUND", PULL_NOT_FOUND),
        (
            "ResponseCode.PULL_RETRY_IMMEDIATELY",
            PULL_RETRY_IMMEDIATELY,
        ),
        ("ResponseCode.PULL_OFFSET_MOVED", PULL_OFFSET_MOVED),
        ("ResponseCode.POLLING_TIMEOUT", POLLING_TIMEOUT),
        ("PULL_FLAG_COMMIT_OFFSET", FLAG_COMMIT_OFFSET),
        ("PULL_FLAG_SUSPEND", FLAG_SUSPEND),
        ("PULL_FLAG_SUBSCRIPTION", FLAG_SUBSCRIPTION),
    ];
    let mut out: Vec<(&'static str, String)> =
        ints.iter().map(|(n, v)| (*n, v.to_string())).collect();
    out.push((
        "SCHEDULE_TOPIC",
        ferromq_store::send::SCHEDULE_TOPIC.to_string(),
    ));
    out.push(("TRANS_HALF_TOPIC", TRANS_HALF_TOPIC.to_string()));
    out.push(("RETRY_PREFIX", RETRY_PREFIX.to_string()));
    out.push(("DLQ_PREFIX", DLQ_PREFIX.to_string()));
    out.push(("TIMER_TOPIC", ferromq_store::timer::TIMER_TOPIC.to_string()));
    for (name, value) in ferromq_store::message::property::ALL {
        out.push((name, value.to_string()));
    }
    out
}
