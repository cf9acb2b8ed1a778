//! The broker's per-send rewrite of a producer's properties string, done in one pass.
//!
//! A producer sends properties as `name\x01value` entries joined by `\x02`. Before storing a
//! plain message the broker reads them the way Java's decoder does (entries without a name or a
//! value are dropped, a repeated name keeps its first position and its last value), takes `WAIT`
//! out (it only says whether the producer waits for the disk; a delayed message keeps it, as in
//! Apache RocketMQ 4.9.7), sets `CLUSTER`, and joins them
//! again without a trailing separator. The result is byte for byte what the Python path
//! (`decode_properties` + `encode_properties`) produces.

use crate::hash;

const NAME_VALUE: char = '\u{1}';
const SEPARATOR: char = '\u{2}';

/// A rewritten properties string and what the send needs from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendProperties {
    /// The properties to store.
    pub properties: String,
    /// False when the producer sent `WAIT=false` (any case): do not wait for the disk.
    pub wait: bool,
    /// ConsumeQueue tags code of the `TAGS` value (0 without tags).
    pub tags_code: i64,
}

/// Why a send's properties cannot take the plain path (the caller's general path decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unusual {
    /// `TRAN_MSG` is set: a transaction half message.
    Transaction,
    /// A value holds a `\x01` (the general path refuses such properties).
    Separator,
}

/// Rewrites `raw` for storing a plain message of a broker in `cluster`.
pub fn rewrite_send_properties(raw: &str, cluster: &str) -> Result<SendProperties, Unusual> {
    if cluster.contains([NAME_VALUE, SEPARATOR]) {
        return Err(Unusual::Separator);
    }
    // Entries in first-seen order; a repeated name overwrites the value in place.
    let mut entries: Vec<(&str, &str)> = Vec::with_capacity(8);
    for entry in raw.split(SEPARATOR) {
        let Some((name, value)) = entry.split_once(NAME_VALUE) else {
            continue;
        };
        if name.is_empty() || value.is_empty() {
            continue;
        }
        match entries.iter_mut().find(|(n, _)| *n == name) {
            Some(e) => e.1 = value,
            None => entries.push((name, value)),
        }
    }
    // Apache RocketMQ 4.9.7 re-encodes a delayed message's properties with WAIT still in them.
    let delayed = entries
        .iter()
        .any(|(n, v)| *n == "DELAY" && v.trim().parse::<i32>().is_ok_and(|l| l > 0));
    let mut wait = true;
    let mut tags = None;
    let mut out = String::with_capacity(raw.len() + 16 + cluster.len());
    let mut cluster_seen = false;
    for &(name, value) in &entries {
        let value = match name {
            "WAIT" => {
                wait = !value.eq_ignore_ascii_case("false");
                if !delayed {
                    continue;
                }
                value
            }
            "TRAN_MSG" if value.eq_ignore_ascii_case("true") => return Err(Unusual::Transaction),
            "CLUSTER" => {
                cluster_seen = true;
                cluster
            }
            "TAGS" => {
                tags = Some(value);
                value
            }
            _ => value,
        };
        if value.contains(NAME_VALUE) {
            return Err(Unusual::Separator);
        }
        push_entry(&mut out, name, value);
    }
    if !cluster_seen {
        push_entry(&mut out, "CLUSTER", cluster);
    }
    Ok(SendProperties {
        properties: out,
        wait,
        tags_code: hash::tags_code(tags),
    })
}

fn push_entry(out: &mut String, name: &str, value: &str) {
    if !out.is_empty() {
        out.push(SEPARATOR);
    }
    out.push_str(name);
    out.push(NAME_VALUE);
    out.push_str(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_wait_and_appends_cluster() {
        let r = rewrite_send_properties(
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}WAIT\u{1}true\u{2}UNIQ_KEY\u{1}AB\u{2}",
            "DefaultCluster",
        )
        .unwrap();
        assert_eq!(
            r.properties,
            "KEYS\u{1}k1 k2\u{2}TAGS\u{1}TagA\u{2}UNIQ_KEY\u{1}AB\u{2}CLUSTER\u{1}DefaultCluster"
        );
        assert!(r.wait);
        assert_eq!(r.tags_code, hash::tags_code(Some("TagA")));
    }

    #[test]
    fn delayed_messages_keep_wait() {
        let r = rewrite_send_properties("DELAY\u{1}3\u{2}WAIT\u{1}true", "C").unwrap();
        assert_eq!(
            r.properties,
            "DELAY\u{1}3\u{2}WAIT\u{1}true\u{2}CLUSTER\u{1}C"
        );
        assert!(r.wait);
        let r = rewrite_send_properties("DELAY\u{1}0\u{2}WAIT\u{1}true", "C").unwrap();
        assert_eq!(r.properties, "DELAY\u{1}0\u{2}CLUSTER\u{1}C");
    }

    #[test]
    fn wait_false_in_any_case() {
        let r = rewrite_send_properties("WAIT\u{1}FALSE", "C").unwrap();
        assert!(!r.wait);
        assert_eq!(r.properties, "CLUSTER\u{1}C");
        assert_eq!(r.tags_code, 0);
    }

    #[test]
    fn repeated_names_keep_first_position_and_last_value() {
        let r = rewrite_send_properties(
            "A\u{1}1\u{2}CLUSTER\u{1}x\u{2}B\u{1}2\u{2}A\u{1}3\u{2}\u{1}v\u{2}n\u{1}\u{2}junk",
            "C",
        )
        .unwrap();
        assert_eq!(r.properties, "A\u{1}3\u{2}CLUSTER\u{1}C\u{2}B\u{1}2");
    }

    #[test]
    fn unusual_properties_take_the_general_path() {
        assert_eq!(
            rewrite_send_properties("TRAN_MSG\u{1}True", "C"),
            Err(Unusual::Transaction)
        );
        assert_eq!(
            rewrite_send_properties("K\u{1}a\u{1}b", "C"),
            Err(Unusual::Separator)
        );
        assert!(rewrite_send_properties("TRAN_MSG\u{1}false", "C").is_ok());
    }
}
