//! The send pipeline: how a message's raw properties string becomes the stored one.
//!
//! Every kind of put goes through [`rewrite`] once: a producer's send, a batch's shared
//! properties, a retry or dead letter, a transaction half message and its committed copy, a
//! delayed message and its delivery. The broker decides the target topic and queue and a short
//! list of [`Edit`]s; this module applies them to the properties as Java's decoder reads them,
//! then the rules Apache RocketMQ's store adds on its own:
//!
//! * `WAIT` (the producer's wish to wait for the disk) is dropped from a plain send's stored
//!   properties ([`Rewrite::drop_wait`]), but stays where Java re-encodes the properties from its
//!   map, as it does for a delayed or timed message;
//! * a message with `DELAY` > 0 (not a prepared or rolled-back transaction) goes to
//!   `SCHEDULE_TOPIC_XXXX`, queue `level - 1` (the level clamped to the highest), with `DELAY`,
//!   `REAL_TOPIC` and `REAL_QID` set last ([`Rewrite::schedule`]);
//! * otherwise, a message with a timer request (`TIMER_DELAY_SEC`, `TIMER_DELAY_MS` or
//!   `TIMER_DELIVER_MS`, RocketMQ 5.x) due ahead goes to `rmq_sys_wheel_timer` queue 0 with
//!   `TIMER_OUT_MS`, `REAL_TOPIC` and `REAL_QID` set last; the timer service puts it back when due.
//!
//! Re-encoding follows Java's map: entries without a name or a value are dropped, a repeated name
//! keeps its first position and its last value, a name an edit adds goes last, and there is no
//! trailing separator. A put with nothing to change stores the string as it came.

use std::borrow::Cow;

use crate::error::{Result, StoreError};
use crate::message::{self, parse_properties, property, sysflag};

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
    /// Drop `WAIT`, unless the message goes to the schedule or the timer topic.
    pub drop_wait: bool,
    /// Send a delayed or timed message to the schedule or timer topic (false when the store
    /// delivers one from there).
    pub schedule: bool,
}

impl Rewrite<'static> {
    /// The store's own rules only: a delayed or timed message goes to its waiting topic.
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

/// What the store does on its own with a message that asks to wait: its delay levels and its
/// timer wheel, and the time a timer's delay counts from.
#[derive(Debug, Clone, Copy)]
pub struct Schedules {
    /// How many delay levels there are (`messageDelayLevel`); 0 leaves `DELAY` alone.
    pub delay_levels: usize,
    /// The timer wheel's rule; None when it is off (`timerWheelEnable=false`).
    pub timer: Option<TimerRule>,
    /// Now, in ms since the epoch.
    pub now_ms: i64,
}

impl Schedules {
    /// Neither delay levels nor timers: the properties only take the edits.
    pub const NONE: Schedules = Schedules {
        delay_levels: 0,
        timer: None,
        now_ms: 0,
    };
}

/// How the timer wheel takes a message (`timerPrecisionMs`, `timerMaxDelaySec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerRule {
    pub precision_ms: i64,
    pub max_delay_ms: i64,
}

/// The properties to store and what the put needs to know about them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewritten<'a> {
    pub properties: Cow<'a, str>,
    /// False when `WAIT` is `false` (any case): the producer does not wait for the disk.
    pub wait: bool,
    /// The (clamped) delay level when the message goes to the schedule topic's queue `level - 1`.
    pub schedule_level: Option<i32>,
    /// The (rounded) deliver time when the message goes to the timer topic's queue 0.
    pub timer_out_ms: Option<i64>,
}

/// The properties a sender sets to make a timer message, in the order Java reads them when
/// more than one is set.
const TIMER_REQUESTS: [&str; 3] = [
    property::TIMER_DELAY_SEC,
    property::TIMER_DELAY_MS,
    property::TIMER_DELIVER_MS,
];

/// Java's remark for a timer message it refuses (WHEEL_TIMER_MSG_ILLEGAL).
fn timer_illegal(rule: &TimerRule) -> StoreError {
    StoreError::MessageIllegal(format!(
        "timer message illegal, the delay time should not be bigger than the max delay {}ms; \
         or if set del msg, the delay time should be bigger than the current time",
        rule.max_delay_ms
    ))
}

/// The deliver time a timer message asks for, as RocketMQ 5.x's broker reads it (HookUtils):
/// `TIMER_DELAY_SEC`, else `TIMER_DELAY_MS` (both from now), else `TIMER_DELIVER_MS`. Then, when
/// it lies ahead: refused beyond `max_delay_ms`, rounded down to the precision (an exact
/// multiple one precision lower, since a slot is delivered once its time has passed). None for
/// a time already passed: the message is stored as it is and delivered at once, unless it is a
/// recall (`TIMER_DEL_UNIQKEY`).
fn timer_out_ms(entries: &[(&str, &str)], rule: &TimerRule, now: i64) -> Result<Option<i64>> {
    let find = |name: &str| entries.iter().find(|(n, _)| *n == name).map(|e| e.1);
    let parse = |name: &str| find(name).map(|v| v.parse::<i64>().map_err(|_| timer_illegal(rule)));
    let deliver = if let Some(sec) = parse(property::TIMER_DELAY_SEC) {
        sec?.checked_mul(1000).and_then(|ms| now.checked_add(ms))
    } else if let Some(ms) = parse(property::TIMER_DELAY_MS) {
        now.checked_add(ms?)
    } else {
        parse(property::TIMER_DELIVER_MS).transpose()?
    }
    .ok_or_else(|| timer_illegal(rule))?;
    if deliver <= now {
        if find(property::TIMER_DEL_UNIQKEY).is_some() {
            return Err(timer_illegal(rule));
        }
        return Ok(None);
    }
    if deliver - now > rule.max_delay_ms {
        return Err(timer_illegal(rule));
    }
    let p = rule.precision_ms;
    Ok(Some(if deliver % p == 0 {
        deliver - p
    } else {
        deliver / p * p
    }))
}

/// Applies `rw` to `raw`, the properties of a message for `topic` and `queue_id` with
/// `sys_flag`, then the store's own schedules: a delay level sends it to the schedule topic (and
/// drops any timer request, as Java does), else a timer request to the timer topic. Refused:
/// a timer request the wheel cannot take (off, unreadable, too far, a recall of the past).
pub fn rewrite<'a>(
    raw: &'a str,
    rw: &Rewrite<'a>,
    topic: &str,
    queue_id: i32,
    sys_flag: i32,
    schedules: &Schedules,
) -> Result<Rewritten<'a>> {
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
    // Prepared and rolled-back transaction messages wait for nothing; a put the store makes of
    // its own (a delivery) is not scheduled again.
    let schedulable = rw.schedule
        && (tx == sysflag::TRANSACTION_NOT_TYPE || tx == sysflag::TRANSACTION_COMMIT_TYPE);
    let schedule_level = find(property::DELAY)
        .filter(|_| schedulable && schedules.delay_levels > 0)
        .and_then(|v| v.trim().parse::<i32>().ok())
        .filter(|level| *level > 0)
        .map(|level| level.min(schedules.delay_levels as i32));
    let timer_requested = schedulable
        && topic != crate::timer::TIMER_TOPIC
        && find(property::TIMER_OUT_MS).is_none()
        && TIMER_REQUESTS.iter().any(|name| find(name).is_some());
    // A delay level wins over a timer request, which is dropped.
    let drop_timer_request = timer_requested && schedule_level.is_some();
    let timer_out_ms = if timer_requested && schedule_level.is_none() {
        let rule = schedules.timer.ok_or(StoreError::TimerDisabled)?;
        timer_out_ms(&entries, &rule, schedules.now_ms)?
    } else {
        None
    };
    if rw.edits.is_empty() && !rw.drop_wait && schedule_level.is_none() && timer_out_ms.is_none() {
        return Ok(Rewritten {
            properties: Cow::Borrowed(raw),
            wait,
            schedule_level,
            timer_out_ms,
        });
    }
    // A scheduled or timed message gets its moved-to properties anew (last); a plain one may
    // lose WAIT.
    let dropped = |name: &str| {
        if schedule_level.is_some() {
            [property::DELAY, property::REAL_TOPIC, property::REAL_QID].contains(&name)
                || (drop_timer_request && TIMER_REQUESTS.contains(&name))
        } else if timer_out_ms.is_some() {
            [property::REAL_TOPIC, property::REAL_QID].contains(&name)
        } else {
            rw.drop_wait && name == property::WAIT
        }
    };
    let kept = entries.iter().filter(|(n, _)| !dropped(n));
    let mut properties = message::encode_properties(kept.copied());
    let qid_str = queue_id.to_string();
    if let Some(level) = schedule_level {
        let level_str = level.to_string();
        let moved = [
            (property::DELAY, level_str.as_str()),
            (property::REAL_TOPIC, topic),
            (property::REAL_QID, qid_str.as_str()),
        ];
        message::append_properties(&mut properties, moved);
    } else if let Some(out) = timer_out_ms {
        let out_str = out.to_string();
        let moved = [
            (property::TIMER_OUT_MS, out_str.as_str()),
            (property::REAL_TOPIC, topic),
            (property::REAL_QID, qid_str.as_str()),
        ];
        message::append_properties(&mut properties, moved);
    }
    Ok(Rewritten {
        properties: Cow::Owned(properties),
        wait,
        schedule_level,
        timer_out_ms,
    })
}

/// One message of a batch: everything but what the batch shares.
#[derive(Debug, Clone, Copy)]
pub struct BatchItem<'a> {
    pub flag: i32,
    pub body: &'a [u8],
    pub properties: &'a str,
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

    const LEVELS: Schedules = Schedules {
        delay_levels: 18,
        timer: Some(TimerRule {
            precision_ms: 1000,
            max_delay_ms: 259_200_000,
        }),
        now_ms: 1_700_000_000_300,
    };

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
        rewrite(raw, rw, "T", 3, 0, &LEVELS)
            .unwrap()
            .properties
            .into_owned()
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
            &LEVELS,
        )
        .unwrap();
        assert_eq!(
            r.properties,
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}AB\u{2}CLUSTER\u{1}DefaultCluster"
        );
        assert!(r.wait);
        assert_eq!(r.schedule_level, None);
        let r = rewrite("WAIT\u{1}FALSE", &send(&edits), "T", 0, 0, &LEVELS).unwrap();
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
            &LEVELS,
        )
        .unwrap();
        assert_eq!(
            r.properties,
            "WAIT\u{1}true\u{2}CLUSTER\u{1}C\u{2}DELAY\u{1}3\u{2}REAL_TOPIC\u{1}T\u{2}REAL_QID\u{1}3"
        );
        assert_eq!(r.schedule_level, Some(3));
        assert_eq!(
            rewrite("DELAY\u{1}99", &Rewrite::STORE, "T", 0, 0, &LEVELS)
                .unwrap()
                .schedule_level,
            Some(18)
        );
        assert_eq!(
            props("DELAY\u{1}0\u{2}WAIT\u{1}true", &send(&edits)),
            "DELAY\u{1}0\u{2}CLUSTER\u{1}C"
        );
        // Prepared and rolled-back transactions are not scheduled; a delivery is not again.
        let prepared = rewrite("DELAY\u{1}2", &Rewrite::STORE, "T", 0, 0x4, &LEVELS).unwrap();
        assert_eq!(prepared.schedule_level, None);
        assert_eq!(prepared.properties, "DELAY\u{1}2");
        let delivered = rewrite("DELAY\u{1}2", &Rewrite::VERBATIM, "T", 0, 0, &LEVELS).unwrap();
        assert_eq!(delivered.schedule_level, None);
    }

    fn timed(raw: &str) -> Result<Rewritten<'_>> {
        rewrite(raw, &Rewrite::STORE, "T", 2, 0, &LEVELS)
    }

    #[test]
    fn a_timer_request_goes_to_the_timer_topic_rounded_down() {
        // now is ...000_300: 5 s from now is ...005_300, rounded down to the second.
        let r = timed("TIMER_DELAY_SEC\u{1}5\u{2}WAIT\u{1}true\u{2}REAL_QID\u{1}9").unwrap();
        assert_eq!(r.timer_out_ms, Some(1_700_000_005_000));
        assert_eq!(
            r.properties,
            "TIMER_DELAY_SEC\u{1}5\u{2}WAIT\u{1}true\u{2}TIMER_OUT_MS\u{1}1700000005000\u{2}REAL_TOPIC\u{1}T\u{2}REAL_QID\u{1}2"
        );
        // An exact second is one precision earlier: its slot is delivered once it has passed.
        let r = timed("TIMER_DELIVER_MS\u{1}1700000009000").unwrap();
        assert_eq!(r.timer_out_ms, Some(1_700_000_008_000));
        // DELAY_SEC wins over DELAY_MS, which wins over DELIVER_MS.
        let r = timed("TIMER_DELIVER_MS\u{1}1700000100000\u{2}TIMER_DELAY_MS\u{1}2500").unwrap();
        assert_eq!(r.timer_out_ms, Some(1_700_000_002_000));
        let r = timed("TIMER_DELAY_MS\u{1}2500\u{2}TIMER_DELAY_SEC\u{1}1").unwrap();
        assert_eq!(r.timer_out_ms, Some(1_700_000_001_000));
    }

    #[test]
    fn a_delay_level_wins_and_drops_the_timer_request() {
        let r = timed("TIMER_DELAY_SEC\u{1}5\u{2}DELAY\u{1}2\u{2}TIMER_DELIVER_MS\u{1}x").unwrap();
        assert_eq!((r.schedule_level, r.timer_out_ms), (Some(2), None));
        assert_eq!(
            r.properties,
            "DELAY\u{1}2\u{2}REAL_TOPIC\u{1}T\u{2}REAL_QID\u{1}2"
        );
    }

    #[test]
    fn a_past_time_is_stored_as_sent_and_delivered_at_once() {
        let raw = "TIMER_DELIVER_MS\u{1}1600000000000";
        let r = timed(raw).unwrap();
        assert_eq!((r.timer_out_ms, &*r.properties), (None, raw));
        // ... but a recall of the past is refused.
        assert!(matches!(
            timed("TIMER_DELIVER_MS\u{1}1600000000000\u{2}TIMER_DEL_UNIQKEY\u{1}T+AB"),
            Err(StoreError::MessageIllegal(_))
        ));
    }

    #[test]
    fn timer_requests_the_wheel_cannot_take_are_refused() {
        for raw in [
            "TIMER_DELAY_SEC\u{1}259201",
            "TIMER_DELAY_SEC\u{1}soon",
            "TIMER_DELAY_SEC\u{1}9223372036854775807",
            "TIMER_DELAY_MS\u{1}1.5",
        ] {
            match timed(raw) {
                Err(StoreError::MessageIllegal(remark)) => assert!(
                    remark.starts_with("timer message illegal, the delay time should not be bigger than the max delay 259200000ms"),
                    "{remark}"
                ),
                other => panic!("{raw:?}: {other:?}"),
            }
        }
        assert_eq!(
            timed("TIMER_DELAY_SEC\u{1}259200").unwrap().timer_out_ms,
            Some(1_700_259_200_000)
        );
        let off = Schedules {
            timer: None,
            ..LEVELS
        };
        assert!(matches!(
            rewrite("TIMER_DELAY_SEC\u{1}5", &Rewrite::STORE, "T", 0, 0, &off),
            Err(StoreError::TimerDisabled)
        ));
        // Only a send is timed: not a delivery, a message already timed, the timer topic itself,
        // or a prepared transaction half.
        let untouched = |raw: &str, rw: &Rewrite, topic: &str, sys_flag: i32| {
            let r = rewrite(raw, rw, topic, 0, sys_flag, &off).unwrap();
            assert_eq!((r.timer_out_ms, &*r.properties), (None, raw));
        };
        untouched("TIMER_DELAY_SEC\u{1}5", &Rewrite::VERBATIM, "T", 0);
        untouched(
            "TIMER_DELAY_SEC\u{1}5\u{2}TIMER_OUT_MS\u{1}1",
            &Rewrite::STORE,
            "T",
            0,
        );
        untouched(
            "TIMER_DELAY_SEC\u{1}5",
            &Rewrite::STORE,
            "rmq_sys_wheel_timer",
            0,
        );
        untouched("TIMER_DELAY_SEC\u{1}5", &Rewrite::STORE, "T", 0x4);
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
        let r = rewrite(raw, &Rewrite::STORE, "T", 0, 0, &LEVELS).unwrap();
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
