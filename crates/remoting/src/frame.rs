//! The remoting frame (docs/reference/rocketmq-4x-wire-and-store.md, §1.1 "Frame layout"):
//! `int length | int (serialize type << 24 | header length) | header | body`. The data plane
//! reads a JSON header only as far as it needs to decide where the frame goes; a frame it does
//! not serve itself goes to Python whole.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::value::RawValue;

pub const FLAG_RESPONSE: i32 = 0x1;
pub const FLAG_ONEWAY: i32 = 0x2;
pub const SERIALIZE_JSON: u8 = 0;
/// What ferromq's broker answers with as `version` (RocketMQ 4.9.7's V4_9_7 ordinal).
pub const SERVER_VERSION: i32 = 407;

/// A JSON header, with `extFields` left unparsed until a handler wants it.
#[derive(Debug, Deserialize)]
pub struct Header<'a> {
    pub code: i32,
    #[serde(default)]
    pub opaque: i32,
    #[serde(default)]
    pub flag: i32,
    #[serde(default)]
    pub version: i32,
    #[serde(rename = "extFields", borrow, default)]
    pub ext_fields: Option<&'a RawValue>,
}

impl Header<'_> {
    pub fn is_request(&self) -> bool {
        self.flag & FLAG_RESPONSE == 0
    }

    pub fn is_oneway(&self) -> bool {
        self.flag & FLAG_ONEWAY != 0
    }

    /// The ext fields as text (clients send numbers and booleans too; nulls are dropped).
    /// None when they are not an object of scalars.
    pub fn ext(&self) -> Option<HashMap<&str, String>> {
        self.ext_fields(false)
    }

    /// The ext fields; with `strings_only`, None unless every value is a JSON string (a signed
    /// request's fields are then exactly the text the client signed).
    pub fn ext_fields(&self, strings_only: bool) -> Option<HashMap<&str, String>> {
        let Some(raw) = self.ext_fields else {
            return Some(HashMap::new());
        };
        let map: HashMap<&str, serde_json::Value> = serde_json::from_str(raw.get()).ok()?;
        let mut out = HashMap::with_capacity(map.len());
        for (k, v) in map {
            let text = match v {
                serde_json::Value::String(s) => s,
                _ if strings_only => return None,
                serde_json::Value::Null => continue,
                serde_json::Value::Bool(b) => b.to_string(),
                serde_json::Value::Number(n) => n.to_string(),
                _ => return None,
            };
            out.insert(k, text);
        }
        Some(out)
    }
}

/// What the bytes at the head of a buffer are, by the frame's length prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameLength {
    /// A whole frame of this many bytes, length prefix included.
    Whole(usize),
    /// Not yet a whole frame (or not yet its length): more bytes are needed.
    Incomplete,
    /// A length outside `4..=max_frame`: no frame, the connection is closed.
    Bad(i32),
}

/// The frame at the head of `buf` by its length prefix (an `int` counting everything after
/// it): the one rule both the data plane's reader and Python's `decode_frame` apply.
/// "Incomplete" and "bad" are different outcomes; a length is judged as soon as it is read.
pub fn frame_length(buf: &[u8], max_frame: usize) -> FrameLength {
    let Some(prefix) = buf.first_chunk::<4>() else {
        return FrameLength::Incomplete;
    };
    let len = i32::from_be_bytes(*prefix);
    if len < 4 || len as usize > max_frame {
        return FrameLength::Bad(len);
    }
    let whole = 4 + len as usize;
    if buf.len() < whole {
        FrameLength::Incomplete
    } else {
        FrameLength::Whole(whole)
    }
}

/// One whole frame (length prefix included) and where its parts are.
pub struct Frame<'a> {
    pub bytes: &'a [u8],
    pub serialize_type: u8,
    header_end: usize,
}

impl<'a> Frame<'a> {
    /// `bytes` is a whole frame as read; None when its header length overruns it.
    pub fn new(bytes: &'a [u8]) -> Option<Frame<'a>> {
        if bytes.len() < 8 {
            return None;
        }
        let type_and_len = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        let header_end = 8 + (type_and_len & 0x00FF_FFFF) as usize;
        if header_end > bytes.len() {
            return None;
        }
        Some(Frame {
            serialize_type: (type_and_len >> 24) as u8,
            bytes,
            header_end,
        })
    }

    pub fn header_bytes(&self) -> &'a [u8] {
        &self.bytes[8..self.header_end]
    }

    pub fn body(&self) -> &'a [u8] {
        &self.bytes[self.header_end..]
    }

    /// The JSON header, when it is one and parses: an object (serde would also fill the
    /// fields from an array, `[code, opaque, ...]`, which Java and Python refuse).
    pub fn json_header(&self) -> Option<Header<'a>> {
        if self.serialize_type != SERIALIZE_JSON {
            return None;
        }
        let bytes = self.header_bytes();
        let first = bytes
            .iter()
            .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
        if first != Some(&b'{') {
            return None;
        }
        serde_json::from_slice(bytes).ok()
    }
}

/// A JSON reply frame as ferromq's Python broker writes it (flag 1, ext values as strings:
/// the C++ client reads nothing else).
pub fn json_reply(code: i32, opaque: i32, remark: Option<&str>, ext: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    json_reply_with_body(&mut out, code, opaque, remark, ext, &[]);
    out
}

/// Appends a JSON reply frame with a body to `out`.
pub fn json_reply_with_body(
    out: &mut Vec<u8>,
    code: i32,
    opaque: i32,
    remark: Option<&str>,
    ext: &[(&str, &str)],
    body: &[u8],
) {
    let mut header = String::with_capacity(256);
    header.push_str("{\"code\":");
    header.push_str(&code.to_string());
    header.push_str(",\"extFields\":{");
    for (i, (k, v)) in ext.iter().enumerate() {
        if i > 0 {
            header.push(',');
        }
        push_json_str(&mut header, k);
        header.push(':');
        push_json_str(&mut header, v);
    }
    header.push_str("},\"flag\":1,\"language\":\"JAVA\",\"opaque\":");
    header.push_str(&opaque.to_string());
    if let Some(r) = remark {
        header.push_str(",\"remark\":");
        push_json_str(&mut header, r);
    }
    header.push_str(",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":");
    header.push_str(&SERVER_VERSION.to_string());
    header.push('}');
    let h = header.as_bytes();
    out.reserve(8 + h.len() + body.len());
    out.extend_from_slice(&((4 + h.len() + body.len()) as i32).to_be_bytes());
    out.extend_from_slice(&(h.len() as i32).to_be_bytes());
    out.extend_from_slice(h);
    out.extend_from_slice(body);
}

fn push_json_str(out: &mut String, s: &str) {
    // serde_json escapes exactly as JSON requires; writing into a String cannot fail.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(header: &str, body: &[u8]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&((4 + header.len() + body.len()) as i32).to_be_bytes());
        b.extend_from_slice(&(header.len() as i32).to_be_bytes());
        b.extend_from_slice(header.as_bytes());
        b.extend_from_slice(body);
        b
    }

    #[test]
    fn a_json_header_is_read_with_mixed_ext_values() {
        let b = frame(
            r#"{"code":310,"opaque":7,"flag":0,"language":"CPP","version":401,"extFields":{"a":"g","e":3,"k":false,"z":null}}"#,
            b"body",
        );
        let f = Frame::new(&b).unwrap();
        let h = f.json_header().unwrap();
        assert_eq!(
            (h.code, h.opaque, h.is_request(), h.is_oneway()),
            (310, 7, true, false)
        );
        let ext = h.ext().unwrap();
        assert_eq!(ext["a"], "g");
        assert_eq!(ext["e"], "3");
        assert_eq!(ext["k"], "false");
        assert!(!ext.contains_key("z"));
        assert_eq!(f.body(), b"body");
    }

    #[test]
    fn bad_headers_are_not_read() {
        let header = |h: &str| Frame::new(&frame(h, b"")).unwrap().json_header().is_none();
        assert!(header("not json"));
        assert!(header(r#"{"opaque":1}"#));
        // The fields in an array are no header.
        assert!(header(r#"[310,7,0,0,{"b":"T"}]"#));
        assert!(!header(" \r\n\t{\"code\":1}"));
        let nested = frame(r#"{"code":1,"extFields":{"a":{"b":1}}}"#, b"");
        let nested = Frame::new(&nested).unwrap();
        assert!(nested.json_header().unwrap().ext().is_none());
        // A header length past the frame.
        let mut b = vec![0, 0, 0, 8, 0, 0, 0, 99];
        b.extend_from_slice(b"abcd");
        assert!(Frame::new(&b).is_none());
    }

    #[test]
    fn a_frame_length_is_whole_incomplete_or_bad() {
        let b = frame("{}", b"xy");
        assert_eq!(frame_length(&b, 1024), FrameLength::Whole(b.len()));
        assert_eq!(
            frame_length(&b[..b.len() - 1], 1024),
            FrameLength::Incomplete
        );
        assert_eq!(frame_length(&b[..3], 1024), FrameLength::Incomplete);
        assert_eq!(frame_length(&[0, 0, 0, 3], 1024), FrameLength::Bad(3));
        assert_eq!(
            frame_length(&[0xff, 0, 0, 0], 1024),
            FrameLength::Bad(-16777216)
        );
        // Judged on the prefix alone: an oversized frame is refused before its bytes come.
        assert_eq!(frame_length(&b[..4], 7), FrameLength::Bad(8));
    }

    #[test]
    fn a_reply_is_a_frame_with_string_ext_fields() {
        let r = json_reply(0, 9, Some("a \"q\""), &[("queueId", "2"), ("msgId", "AB")]);
        let f = Frame::new(&r).unwrap();
        let v: serde_json::Value = serde_json::from_slice(f.header_bytes()).unwrap();
        assert_eq!(v["code"], 0);
        assert_eq!(v["flag"], 1);
        assert_eq!(v["opaque"], 9);
        assert_eq!(v["remark"], "a \"q\"");
        assert_eq!(v["extFields"]["queueId"], "2");
        assert_eq!(v["version"], SERVER_VERSION);
        assert!(f.body().is_empty());
    }
}
