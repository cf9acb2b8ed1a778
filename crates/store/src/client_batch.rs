//! A client's SEND_BATCH_MESSAGE body, built from message fields without a message object per row
//! (the Spark sink's encoder; `send::decode_batch` reads what it writes). The bytes are those the
//! Python client's `Producer.send_batch` sends for the same messages (facts sheet §4.3): per
//! message TOTALSIZE, MAGIC and BODYCRC (both 0, the broker fills them), FLAG (0), the body with
//! its length, and the properties with a 2-byte length.

use crate::error::{Result, StoreError};
use crate::message::append_client_properties;

/// One message of a batch: its body and the fields the client turns into properties.
pub struct BatchRow<'a> {
    pub body: &'a [u8],
    pub tags: Option<&'a str>,
    pub keys: Option<&'a str>,
    /// User properties in order; a later name replaces an earlier one where it stood, a `None`
    /// value leaves the name out.
    pub properties: &'a [(&'a str, Option<&'a str>)],
    pub uniq_key: Option<&'a str>,
}

/// The properties as the client orders them: the user's, then UNIQ_KEY, TAGS and KEYS (each
/// replacing a user property of that name in its place; empty tags or keys are no property).
fn ordered<'a>(row: &BatchRow<'a>, out: &mut Vec<(&'a str, Option<&'a str>)>) {
    let mut set =
        |name: &'a str, value: Option<&'a str>| match out.iter_mut().find(|(k, _)| *k == name) {
            Some(slot) => slot.1 = value,
            None => out.push((name, value)),
        };
    for &(name, value) in row.properties {
        set(name, value);
    }
    if let Some(uniq) = row.uniq_key {
        set("UNIQ_KEY", Some(uniq));
    }
    if let Some(tags) = row.tags.filter(|t| !t.is_empty()) {
        set("TAGS", Some(tags));
    }
    if let Some(keys) = row.keys.filter(|k| !k.is_empty()) {
        set("KEYS", Some(keys));
    }
}

/// Appends one message of a batch body to `out`. Properties with an empty name or no value are
/// left out, as the client's encoder does; a separator character in a name or value is refused.
pub fn append_batch_message(out: &mut Vec<u8>, row: &BatchRow<'_>) -> Result<()> {
    let mut props: Vec<(&str, Option<&str>)> = Vec::with_capacity(row.properties.len() + 3);
    ordered(row, &mut props);
    let head = out.len();
    out.extend_from_slice(&[0u8; 20]); // TOTALSIZE, MAGIC, BODYCRC, FLAG, BODY length: below
    out.extend_from_slice(row.body);
    let props_at = out.len();
    out.extend_from_slice(&[0u8; 2]);
    if let Err(name) = append_client_properties(out, props) {
        out.truncate(head);
        return Err(StoreError::InvalidArgument(format!(
            "property {name:?} contains a RocketMQ separator character"
        )));
    }
    let props_len = out.len() - props_at - 2;
    let Ok(props_len) = i16::try_from(props_len) else {
        out.truncate(head);
        return Err(StoreError::InvalidArgument(format!(
            "properties of {props_len} bytes exceed a batch message's 32767"
        )));
    };
    let total = out.len() - head;
    let (Ok(total), Ok(body_len)) = (i32::try_from(total), i32::try_from(row.body.len())) else {
        out.truncate(head);
        return Err(StoreError::InvalidArgument(
            "message too large for a batch".into(),
        ));
    };
    out[head..head + 4].copy_from_slice(&total.to_be_bytes());
    out[head + 16..head + 20].copy_from_slice(&body_len.to_be_bytes());
    out[props_at..props_at + 2].copy_from_slice(&props_len.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::send::decode_batch;

    fn row<'a>(body: &'a [u8], props: &'a [(&'a str, Option<&'a str>)]) -> BatchRow<'a> {
        BatchRow {
            body,
            tags: Some("TagA"),
            keys: Some("k1 k2"),
            properties: props,
            uniq_key: Some("0123456789ABCDEF0123456789ABCDEF"),
        }
    }

    #[test]
    fn encoded_messages_decode_with_their_properties_in_client_order() {
        let mut out = Vec::new();
        let props = [
            ("a", Some("1")),
            ("TAGS", Some("old")),
            ("skip", None),
            ("", Some("x")),
        ];
        append_batch_message(&mut out, &row(b"hello", &props)).unwrap();
        append_batch_message(&mut out, &row(b"", &[])).unwrap();
        let items = decode_batch(&out).unwrap();
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].body, b"hello");
        assert_eq!(
            items[0].properties,
            "a\u{1}1\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}0123456789ABCDEF0123456789ABCDEF\u{2}KEYS\u{1}k1 k2"
        );
        assert_eq!(items[1].body, b"");
        assert_eq!(items[0].flag, 0);
    }

    #[test]
    fn separators_are_refused_and_leave_the_output_as_it_was() {
        let mut out = Vec::new();
        append_batch_message(&mut out, &row(b"x", &[])).unwrap();
        let before = out.clone();
        let bad = [("a", Some("x\u{2}y"))];
        assert!(matches!(
            append_batch_message(&mut out, &row(b"y", &bad)),
            Err(StoreError::InvalidArgument(_))
        ));
        assert_eq!(out, before);
    }
}
