//! The plain ACL's check of a send or pull served on the data plane: Python decides, Rust
//! verifies.
//!
//! Python stays the only place where ACL policy is decided. It pushes down [`AclRules`] (per
//! account: its secret key and the plane's topics it may publish to, or subscribe to and the
//! groups it may pull as, as Python's `authorize` decided them) and, per connection, a
//! [`PeerAcl`] (what the peer's address decides: globally white, or white for some accounts).
//! Here only the signature is computed, as `Signer.server_signature` in
//! `python/ferromq/acl/signing.py` does. Anything in doubt (no peer info yet or from an older
//! ACL, no or unknown AccessKey, a topic or group not allowed, a missing or wrong signature) is
//! not served here: Python answers it, with Java's refusals.

use std::collections::{HashMap, HashSet};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;

pub const ACCESS_KEY: &str = "AccessKey";
pub const SIGNATURE: &str = "Signature";
/// MixAll.UNIQUE_MSG_QUERY_FLAG: left out of the content the broker checks.
pub const UNIQUE_MSG_QUERY_FLAG: &str = "_UNIQUE_KEY_QUERY";

type HmacSha1 = Hmac<Sha1>;

struct Account {
    /// Keyed once; cloned per request (the key's inner and outer states are kept).
    mac: HmacSha1,
    /// Topics a signed request of this account may name without asking Python (PUB for the
    /// send rules, SUB for the pull rules).
    topics: HashSet<String>,
    /// Groups a signed pull of this account may name (SUB on the group).
    groups: HashSet<String>,
}

/// (access key, secret key, topics, groups) of one account.
pub type AccountRules = (String, String, Vec<String>, Vec<String>);

/// The accounts of one ACL load.
pub struct AclRules {
    /// Which ACL load these are (a [`PeerAcl`] of another load is not trusted).
    pub generation: u64,
    accounts: HashMap<String, Account>,
}

impl AclRules {
    /// `accounts`: (access key, secret key, the plane's topics it may publish to or subscribe
    /// to, the groups it may pull as).
    pub fn new(generation: u64, accounts: Vec<AccountRules>) -> AclRules {
        let accounts = accounts
            .into_iter()
            .map(|(access_key, secret_key, topics, groups)| {
                let account = Account {
                    mac: keyed(&secret_key),
                    topics: topics.into_iter().collect(),
                    groups: groups.into_iter().collect(),
                };
                (access_key, account)
            })
            .collect();
        AclRules {
            generation,
            accounts,
        }
    }

    /// Whether a send to `topic` with these ext fields and body may be served here (false:
    /// Python decides, and refuses or serves it).
    pub fn allows(
        &self,
        peer: Option<&PeerAcl>,
        ext: &HashMap<&str, String>,
        topic: &str,
        body: &[u8],
    ) -> bool {
        self.allows_if(peer, ext, body, |a| a.topics.contains(topic))
    }

    /// Whether a pull of `topic` by `group` with these ext fields may be served here.
    pub fn allows_pull(
        &self,
        peer: Option<&PeerAcl>,
        ext: &HashMap<&str, String>,
        topic: &str,
        group: &str,
    ) -> bool {
        self.allows_if(peer, ext, &[], |a| {
            a.topics.contains(topic) && a.groups.contains(group)
        })
    }

    /// Whether a 5.x client's gRPC call may be served here: signed (the `authorization` header
    /// `MQv2-HMAC-SHA1 Credential=<user>, SignedHeaders=x-mq-date-time, Signature=<hex>`, the
    /// hex of HmacSHA1 of `date`, the call's `x-mq-date-time`, keyed with the account's secret)
    /// by an account that may use `topic` (and `group`, when given). No address is white here:
    /// an unsigned call, as every call in doubt, is Python's to answer.
    pub fn allows_grpc(
        &self,
        authorization: Option<&str>,
        date: Option<&str>,
        topic: &str,
        group: Option<&str>,
    ) -> bool {
        let (Some(header), Some(date)) = (authorization, date) else {
            return false;
        };
        let Some((user, signature)) = grpc_credentials(header) else {
            return false;
        };
        let Some(account) = self.accounts.get(user) else {
            return false;
        };
        if !account.topics.contains(topic) || group.is_some_and(|g| !account.groups.contains(g)) {
            return false;
        }
        let mut mac = account.mac.clone();
        mac.update(date.as_bytes());
        mac.verify_slice(&signature).is_ok()
    }

    fn allows_if(
        &self,
        peer: Option<&PeerAcl>,
        ext: &HashMap<&str, String>,
        body: &[u8],
        permitted: impl Fn(&Account) -> bool,
    ) -> bool {
        let Some(peer) = peer.filter(|p| p.generation == self.generation) else {
            return false;
        };
        if peer.globally_white {
            return true;
        }
        let Some(access_key) = ext.get(ACCESS_KEY) else {
            return false;
        };
        let Some(account) = self.accounts.get(access_key.as_str()) else {
            return false;
        };
        // A peer in the account's white addresses is not checked further (as Java).
        if peer.white.contains(access_key.as_str()) {
            return true;
        }
        if !permitted(account) {
            return false;
        }
        ext.get(SIGNATURE)
            .is_some_and(|given| signature(&account.mac, ext, body) == *given)
    }
}

/// (user, signature bytes) of a gRPC `authorization` header, read as Java's proxy reads it: the
/// scheme, a space, then `key=value` items separated by commas; None when it is malformed.
fn grpc_credentials(header: &str) -> Option<(&str, Vec<u8>)> {
    let (_, items) = header.split_once(' ')?;
    let (mut user, mut signature) = (None, None);
    for item in items.split(',') {
        let (key, value) = item.trim().split_once('=')?;
        match key {
            "Credential" => user = value.split('/').next(),
            "Signature" => signature = Some(hex_bytes(value)?),
            _ => {}
        }
    }
    Some((user.filter(|u| !u.is_empty())?, signature?))
}

fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What one peer's address decides, for the ACL load `generation`.
pub struct PeerAcl {
    pub generation: u64,
    pub globally_white: bool,
    /// Access keys of the accounts whose white addresses hold the peer.
    pub white: HashSet<String>,
}

fn keyed(secret_key: &str) -> HmacSha1 {
    // HMAC takes a key of any length (a long one is hashed first, as RFC 2104 says).
    HmacSha1::new_from_slice(secret_key.as_bytes()).expect("HMAC accepts any key length")
}

/// The signature a broker expects: HmacSHA1 over the ext values in key order (Signature and the
/// unique-key query flag left out) then the body, in base64.
fn signature(mac: &HmacSha1, ext: &HashMap<&str, String>, body: &[u8]) -> String {
    let mut keys: Vec<&str> = ext
        .keys()
        .copied()
        .filter(|k| *k != SIGNATURE && *k != UNIQUE_MSG_QUERY_FLAG)
        .collect();
    // Byte order of UTF-8 is code point order, as Python's `sorted` of the keys.
    keys.sort_unstable();
    let mut mac = mac.clone();
    for k in keys {
        mac.update(ext[k].as_bytes());
    }
    mac.update(body);
    STANDARD.encode(mac.finalize().into_bytes())
}

/// The signature of `ext` and `body` with `secret_key` (tests and tools).
pub fn server_signature(secret_key: &str, ext: &HashMap<&str, String>, body: &[u8]) -> String {
    signature(&keyed(secret_key), ext, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(pairs: &[(&'static str, &str)]) -> HashMap<&'static str, String> {
        pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
    }

    #[test]
    fn hmac_sha1_matches_rfc_2202() {
        // RFC 2202 test case 2: key "Jefe", data "what do ya want for nothing?".
        let mac = keyed("Jefe");
        let mut m = mac.clone();
        m.update(b"what do ya want for nothing?");
        let hex: String = m
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
    }

    #[test]
    fn the_signature_is_pythons() {
        // Computed with ferromq.acl.signing.Signer("benchSecret1").server_signature(ext, body).
        let e = ext(&[
            ("b", "TopicA"),
            ("a", "PID_x"),
            ("AccessKey", "benchProducer"),
            ("Signature", "ignored"),
            ("_UNIQUE_KEY_QUERY", "true"),
            ("i", "TAGS\u{1}é\u{2}"),
        ]);
        assert_eq!(
            server_signature("benchSecret1", &e, b"hello"),
            "7JDqVrL/Kp0EbF4qayNBEXByptk="
        );
        // A long key is hashed first.
        let long = "k".repeat(100);
        assert_eq!(
            server_signature(&long, &ext(&[("a", "1")]), b""),
            "wb5D1xsmrDOLon6GtFk6CHZt6dM="
        );
    }

    fn rules() -> AclRules {
        AclRules::new(
            3,
            vec![(
                "producer1".into(),
                "secret123".into(),
                vec!["TopicA".into()],
                vec!["GroupA".into()],
            )],
        )
    }

    fn signed(topic: &str, secret: &str) -> HashMap<&'static str, String> {
        let mut e = ext(&[("b", "x"), ("AccessKey", "producer1")]);
        e.insert("b", topic.to_string());
        let sig = server_signature(secret, &e, b"body");
        e.insert("Signature", sig);
        e
    }

    fn peer(generation: u64, globally_white: bool, white: &[&str]) -> PeerAcl {
        PeerAcl {
            generation,
            globally_white,
            white: white.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn only_what_python_allowed_is_served() {
        let r = rules();
        let p = peer(3, false, &[]);
        assert!(r.allows(Some(&p), &signed("TopicA", "secret123"), "TopicA", b"body"));
        // No peer info, or info of an older load.
        assert!(!r.allows(None, &signed("TopicA", "secret123"), "TopicA", b"body"));
        let old = peer(2, true, &[]);
        assert!(!r.allows(
            Some(&old),
            &signed("TopicA", "secret123"),
            "TopicA",
            b"body"
        ));
        // Wrong secret, other body, topic not allowed, unknown or missing key.
        assert!(!r.allows(Some(&p), &signed("TopicA", "secret999"), "TopicA", b"body"));
        assert!(!r.allows(Some(&p), &signed("TopicA", "secret123"), "TopicA", b"other"));
        assert!(!r.allows(Some(&p), &signed("TopicB", "secret123"), "TopicB", b"body"));
        let mut unknown = signed("TopicA", "secret123");
        unknown.insert("AccessKey", "nobody1".into());
        assert!(!r.allows(Some(&p), &unknown, "TopicA", b"body"));
        let mut unsigned = signed("TopicA", "secret123");
        unsigned.remove("Signature");
        assert!(!r.allows(Some(&p), &unsigned, "TopicA", b"body"));
        // White for the account: no signature needed, any plane topic; globally white: no key.
        let white = peer(3, false, &["producer1"]);
        assert!(r.allows(Some(&white), &unsigned, "TopicB", b"body"));
        let mut no_key = unsigned.clone();
        no_key.remove("AccessKey");
        assert!(!r.allows(Some(&white), &no_key, "TopicA", b"body"));
        assert!(r.allows(Some(&peer(3, true, &[])), &no_key, "TopicA", b"body"));
    }

    fn grpc_header(user: &str, secret: &str, date: &str) -> String {
        let mut mac = keyed(secret);
        mac.update(date.as_bytes());
        let hex: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!(
            "MQv2-HMAC-SHA1 Credential={user}/cn-hangzhou/RocketMQ, SignedHeaders=x-mq-date-time, Signature={hex}"
        )
    }

    #[test]
    fn a_grpc_call_needs_its_users_signature_of_the_date_and_its_topic() {
        let r = rules();
        let date = "20261128T201000Z";
        let good = grpc_header("producer1", "secret123", date);
        assert!(r.allows_grpc(Some(&good), Some(date), "TopicA", None));
        assert!(r.allows_grpc(Some(&good), Some(date), "TopicA", Some("GroupA")));
        // Hex in capitals, as Java's decoder takes it; the credential without its region part.
        let (head, hex) = good.rsplit_once('=').unwrap();
        let capitals =
            format!("{head}={}", hex.to_uppercase()).replace("/cn-hangzhou/RocketMQ", "");
        assert!(r.allows_grpc(Some(&capitals), Some(date), "TopicA", None));
        // Another date, another secret, another topic or group, an unknown user, no header.
        assert!(!r.allows_grpc(Some(&good), Some("20261128T201001Z"), "TopicA", None));
        let wrong = grpc_header("producer1", "secret999", date);
        assert!(!r.allows_grpc(Some(&wrong), Some(date), "TopicA", None));
        assert!(!r.allows_grpc(Some(&good), Some(date), "TopicB", None));
        assert!(!r.allows_grpc(Some(&good), Some(date), "TopicA", Some("GroupB")));
        let stranger = grpc_header("nobody1", "secret123", date);
        assert!(!r.allows_grpc(Some(&stranger), Some(date), "TopicA", None));
        assert!(!r.allows_grpc(None, Some(date), "TopicA", None));
        assert!(!r.allows_grpc(Some(&good), None, "TopicA", None));
        // Malformed headers.
        for bad in [
            "MQv2-HMAC-SHA1",
            "MQv2-HMAC-SHA1 Credential=producer1, Signature=zz",
            "MQv2-HMAC-SHA1 Credential=producer1, Signature=abc",
            "MQv2-HMAC-SHA1 Credential=producer1 Signature",
            "MQv2-HMAC-SHA1 Credential=, Signature=00",
        ] {
            assert!(
                !r.allows_grpc(Some(bad), Some(date), "TopicA", None),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_pull_needs_its_topic_and_its_group() {
        let r = rules();
        let p = peer(3, false, &[]);
        let pull = |topic: &str, group: &str| {
            let mut e = ext(&[
                ("topic", topic),
                ("consumerGroup", group),
                ("AccessKey", "producer1"),
            ]);
            let sig = server_signature("secret123", &e, b"");
            e.insert("Signature", sig);
            e
        };
        assert!(r.allows_pull(Some(&p), &pull("TopicA", "GroupA"), "TopicA", "GroupA"));
        assert!(!r.allows_pull(Some(&p), &pull("TopicA", "GroupB"), "TopicA", "GroupB"));
        assert!(!r.allows_pull(Some(&p), &pull("TopicB", "GroupA"), "TopicB", "GroupA"));
        let mut tampered = pull("TopicA", "GroupA");
        tampered.insert("queueOffset", "5".into());
        assert!(!r.allows_pull(Some(&p), &tampered, "TopicA", "GroupA"));
    }
}
