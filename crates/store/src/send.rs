//! The send pipeline: how a message's raw properties string becomes the stored one.
//!
//! Every kind of put goes through [`rewrite`] once: a producer's send, a batch's shared
//! properties, a retry or dead letter, a transaction half message and its committed copy, a
//! delayed message and its delivery. The broker decides the target topic and queue and a short
//! list of [`Edit`]s; this module applies them to the properties as Java's decoder reads them,
//! then the two rules Apache RocketMQ 4.9.7's store adds on its own:
//!
//! * `WAIT` (the producer's wish to wait for the disk) is dropped from a plain send's stored
//!   properties ([`Rewrite::drop_wait`]), but stays where 4.9.7 re-encodes the properties from its
//!   map, as it does for a delayed message;
//! * a message with `DELAY` > 0 (not a prepared or rolled-back transaction) goes to
//!   `SCHEDULE_TOPIC_XXXX`, queue `level - 1` (the level clamped to the highest), with `DELAY`,
//!   `REAL_TOPIC` and `REAL_QID` set last ([`Rewrite::schedule`]).
//!
//! Re-encoding follows Java's map: entries without a name or a value are dropped, a repeated name
//! keeps its first position and its last value, a name an edit adds goes last, and there is no
//! trailing separator. A put with nothing to change stores the string as it came.

use std::borrow::Cow;

use crate::error::{Result, StoreError};
use crate::message::{self, parse_properties, property, sysflag};
use crate::store::BatchItem;

/// Where delayed messages wait for their time.
pub const SCHEDULE_TOPIC: &str = "SCHEDULE_TOPIC_XXXX";

/// One change the broker makes to a message's properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// Sets a property: in its place when present, else last.
    Set(String, String),
    /// Sets a property that is absent (last); keeps one that is present.
    Default(String, String),
    /// Removes a property.
    Remove(String),
}

impl Edit {
    /// An edit from its name: `set`, `default` or `remove` (whose value is ignored). Names and
    /// values are non-empty and hold no separator, or the stored string would not decode back.
    pub fn new(op: &str, name: &str, value: &str) -> Result<Edit> {
        let bad = |why: &str| {
            Err(StoreError::InvalidArgument(format!(
                "property edit {op} {name:?}={value:?}: {why}"
            )))
        };
        if !message::is_property_token(name) {
            return bad("a name must be non-empty and hold no separator");
        }
        if op != "remove" && !message::is_property_token(value) {
            return bad("a value must be non-empty and hold no separator");
        }
        match op {
            "set" => Ok(Edit::Set(name.into(), value.into())),
            "default" => Ok(Edit::Default(name.into(), value.into())),
            "remove" => Ok(Edit::Remove(name.into())),
            _ => bad("the operation is not set, default or remove"),
        }
    }
}

/// What a put does to the properties it is given.
#[derive(Debug, Clone, Copy)]
pub struct Rewrite<'a> {
    /// Applied in order.
    pub edits: &'a [Edit],
    /// Drop `WAIT`, unless the message goes to the schedule topic.
    pub drop_wait: bool,
    /// Send a delayed message to the schedule topic (false when delivering one from there).
    pub schedule: bool,
}

impl Rewrite<'static> {
    /// The store's own rule only: a delayed message goes to the schedule topic.
    pub const STORE: Rewrite<'static> = Rewrite {
        edits: &[],
        drop_wait: false,
        schedule: true,
    };
    /// Nothing changes: the properties are stored as given.
    pub const VERBATIM: Rewrite<'static> = Rewrite {
        edits: &[],
        drop_wait: false,
        schedule: false,
    };
}

/// The properties to store and what the put needs to know about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten<'a> {
    pub properties: Cow<'a, str>,
    /// False when `WAIT` is `false` (any case): the producer does not wait for the disk.
    pub wait: bool,
    /// The (clamped) delay level when the message goes to the schedule topic's queue `level - 1`.
    pub schedule_level: Option<i32>,
}

/// Applies `rw` to `raw`, the properties of a message for `topic` and `queue_id` with
/// `sys_flag`, on a store with `max_level` delay levels.
pub fn rewrite<'a>(
    raw: &'a str,
    rw: &Rewrite<'a>,
    topic: &str,
    queue_id: i32,
    sys_flag: i32,
    max_level: usize,
) -> Rewritten<'a> {
    let mut entries = parse_properties(raw);
    for edit in rw.edits {
        match edit {
            Edit::Set(name, value) => match entries.iter_mut().find(|(n, _)| n == name) {
                Some(e) => e.1 = value,
                None => entries.push((name, value)),
            },
            Edit::Default(name, value) => {
                if !entries.iter().any(|(n, _)| n == name) {
                    entries.push((name, value));
                }
            }
            Edit::Remove(name) => entries.retain(|(n, _)| n != name),
        }
    }
    let find = |name: &str| entries.iter().find(|(n, _)| *n == name).map(|e| e.1);
    let wait = find(property::WAIT).is_none_or(|v| !v.eq_ignore_ascii_case("false"));
    let tx = sysflag::transaction_value(sys_flag);
    let schedule_level = find(property::DELAY)
        .filter(|_| {
            rw.schedule
                && max_level > 0
                && (tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE)
        })
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|level| *level > 0)
        .map(|level| level.min(max_level as i32));
    if rw.edits.is_empty() && !rw.drop_wait && schedule_level.is_none() {
        return Rewritten {
            properties: Cow::Borrowed(raw),
            wait,
            schedule_level,
        };
    }
    let scheduled = schedule_level.is_some();
    // A scheduled message gets these three anew (last); a plain one may lose WAIT.
    let dropped = |name: &str| {
        if scheduled {
            [property::DELAY, property::REAL_TOPIC, property::REAL_QID].contains(&name)
        } else {
            rw.drop_wait && name == property::WAIT
        }
    };
    let kept = entries.iter().filter(|(n, _)| !dropped(n));
    let level_str;
    let qid_str;
    let mut properties = message::encode_properties(kept.copied());
    if let Some(level) = schedule_level {
        level_str = level.to_string();
        qid_str = queue_id.to_string();
        let moved = [
            (property::DELAY, level_str.as_str()),
            (property::REAL_TOPIC, topic),
            (property::REAL_QID, qid_str.as_str()),
        ];
        message::append_properties(&mut properties, moved);
    }
    Rewritten {
        properties: Cow::Owned(properties),
        wait,
        schedule_level,
    }
}

/// The messages of a client-encoded batch body (facts sheet §4.3): per message TOTALSIZE,
/// MAGIC and CRC (ignored), FLAG, body length and body, properties length and properties.
pub fn decode_batch(body: &[u8]) -> Result<Vec<BatchItem<'_>>> {
    let illegal = |at: usize, why: &str| {
        StoreError::MessageIllegal(format!("malformed batch message at byte {at}: {why}"))
    };
    let int = |at: usize| i32::from_be_bytes(body[at..at + 4].try_into().unwrap());
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < body.len() {
        if body.len() - at < 22 {
            return Err(illegal(at, "truncated header"));
        }
        let total = int(at);
        let (flag, body_len) = (int(at + 12), int(at + 16));
        let start = at + 20;
        if total < 22
            || body_len < 0
            || at + total as usize > body.len()
            || start + body_len as usize + 2 > at + total as usize
        {
            return Err(illegal(at, "lengths do not add up"));
        }
        let end = at + total as usize;
        let props_at = start + body_len as usize;
        let props_len = i16::from_be_bytes([body[props_at], body[props_at + 1]]);
        if props_len < 0 {
            return Err(illegal(
                at,
                &format!("negative properties length {props_len}"),
            ));
        }
        if props_at + 2 + props_len as usize > end {
            return Err(illegal(
                at,
                &format!("properties length {props_len} overruns it"),
            ));
        }
        let properties =
            std::str::from_utf8(&body[props_at + 2..props_at + 2 + props_len as usize])
                .map_err(|_| illegal(at, "properties are not UTF-8"))?;
        out.push(BatchItem {
            flag,
            body: &body[start..props_at],
            properties,
        });
        at = end;
    }
    if out.is_empty() {
        return Err(StoreError::MessageIllegal("empty batch".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send<'a>(edits: &'a [Edit]) -> Rewrite<'a> {
        Rewrite {
            edits,
            drop_wait: true,
            schedule: true,
        }
    }

    fn cluster(c: &str) -> Vec<Edit> {
        vec![Edit::new("set", "CLUSTER", c).unwrap()]
    }

    fn props(raw: &str, rw: &Rewrite) -> String {
        rewrite(raw, rw, "T", 3, 0, 18).properties.into_owned()
    }

    #[test]
    fn a_plain_send_drops_wait_and_gains_cluster() {
        let edits = cluster("DefaultCluster");
        let r = rewrite(
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}AB\u{2}",
            &send(&edits),
            "T",
            0,
            0,
            18,
        );
        assert_eq!(
            r.properties,
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}AB\u{2}CLUSTER\u{1}DefaultCluster"
        );
        assert!(r.wait);
        assert_eq!(r.schedule_level, None);
        let r = rewrite("WAIT\u{1}FALSE", &send(&edits), "T", 0, 0, 18);
        assert!(!r.wait);
        assert_eq!(r.properties, "CLUSTER\u{1}DefaultCluster");
    }

    #[test]
    fn a_delayed_send_keeps_wait_and_goes_to_the_schedule_topic() {
        let edits = cluster("C");
        let r = rewrite(
            "DELAY\u{1}3\u{2}WAIT\u{1}true\u{2}REAL_QID\u{1}9",
            &send(&edits),
            "T",
            3,
            0,
            18,
        );
        assert_eq!(
            r.properties,
            "WAIT\u{1}true\u{2}CLUSTER\u{1}C\u{2}DELAY\u{1}3\u{2}REAL_TOPIC\u{1}T\u{2}REAL_QID\u{1}3"
        );
        assert_eq!(r.schedule_level, Some(3));
        assert_eq!(
            rewrite("DELAY\u{1}99", &Rewrite::STORE, "T", 0, 0, 18).schedule_level,
            Some(18)
        );
        assert_eq!(
            props("DELAY\u{1}0\u{2}WAIT\u{1}true", &send(&edits)),
            "DELAY\u{1}0\u{2}CLUSTER\u{1}C"
        );
        // Prepared and rolled-back transactions are not scheduled; a delivery is not again.
        let prepared = rewrite("DELAY\u{1}2", &Rewrite::STORE, "T", 0, 0x4, 18);
        assert_eq!(prepared.schedule_level, None);
        assert_eq!(prepared.properties, "DELAY\u{1}2");
        let delivered = rewrite("DELAY\u{1}2", &Rewrite::VERBATIM, "T", 0, 0, 18);
        assert_eq!(delivered.schedule_level, None);
    }

    #[test]
    fn repeated_names_keep_first_position_and_last_value() {
        let edits = cluster("C");
        assert_eq!(
            props(
                "A\u{1}1\u{2}CLUSTER\u{1}x\u{2}B\u{1}2\u{2}A\u{1}3\u{2}\u{1}v\u{2}n\u{1}\u{2}junk",
                &send(&edits)
            ),
            "A\u{1}3\u{2}CLUSTER\u{1}C\u{2}B\u{1}2"
        );
    }

    #[test]
    fn edits_apply_in_order() {
        let edits = vec![
            Edit::new("default", "PGROUP", "G").unwrap(),
            Edit::new("default", "A", "new").unwrap(),
            Edit::new("remove", "B", "").unwrap(),
            Edit::new("set", "A", "last").unwrap(),
        ];
        let rw = Rewrite {
            edits: &edits,
            drop_wait: false,
            schedule: false,
        };
        assert_eq!(
            props("A\u{1}1\u{2}B\u{1}2\u{2}WAIT\u{1}false", &rw),
            "A\u{1}last\u{2}WAIT\u{1}false\u{2}PGROUP\u{1}G"
        );
    }

    #[test]
    fn nothing_to_change_keeps_the_string() {
        let raw = "A\u{1}1\u{2}\u{2}B\u{1}x\u{1}y\u{2}";
        let r = rewrite(raw, &Rewrite::STORE, "T", 0, 0, 18);
        assert!(matches!(r.properties, Cow::Borrowed(s) if s == raw));
        // A value holding a name-value separator is kept whole, as Java reads it.
        assert_eq!(props(raw, &send(&[])), "A\u{1}1\u{2}B\u{1}x\u{1}y");
    }

    #[test]
    fn bad_edits_are_refused() {
        assert!(Edit::new("set", "", "v").is_err());
        assert!(Edit::new("set", "A", "").is_err());
        assert!(Edit::new("set", "A", "x\u{2}y").is_err());
        assert!(Edit::new("default", "A\u{1}", "v").is_err());
        assert!(Edit::new("rename", "A", "v").is_err());
        assert_eq!(
            Edit::new("remove", "A", "").unwrap(),
            Edit::Remove("A".into())
        );
    }

    fn batch_record(body: &[u8], props: &[u8], props_len: i16) -> Vec<u8> {
        let total = 20 + body.len() + 2 + props.len();
        let mut out = Vec::new();
        out.extend((total as i32).to_be_bytes());
        out.extend([0u8; 8]);
        out.extend(7i32.to_be_bytes());
        out.extend((body.len() as i32).to_be_bytes());
        out.extend(body);
        out.extend(props_len.to_be_bytes());
        out.extend(props);
        out
    }

    #[test]
    fn batch_bodies_decode_or_are_refused() {
        let mut two = batch_record(b"hello", b"A\x01b", 3);
        two.extend(batch_record(b"", b"", 0));
        let items = decode_batch(&two).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(
            (items[0].flag, items[0].body, items[0].properties),
            (7, &b"hello"[..], "A\u{1}b")
        );
        assert_eq!(items[1].body, b"");
        let illegal = |b: &[u8]| matches!(decode_batch(b), Err(StoreError::MessageIllegal(_)));
        assert!(illegal(b""));
        assert!(illegal(&batch_record(b"x", b"A\x01b", -3)));
        assert!(illegal(&batch_record(b"x", b"A\x01b", 9)));
        assert!(illegal(&batch_record(b"x", b"\xff\xfe", 2)));
        assert!(illegal(&two[..two.len() - 1]));
    }
}
