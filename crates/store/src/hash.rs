//! Java `String.hashCode`, as RocketMQ uses it for tags codes and index keys.

/// Java `String.hashCode`: 31-polynomial over UTF-16 code units with wrapping 32-bit arithmetic.
pub fn java_string_hash(s: &str) -> i32 {
    if s.is_ascii() {
        // Same result as the UTF-16 walk (ASCII bytes are their own code units), but faster.
        return s
            .bytes()
            .fold(0i32, |h, b| h.wrapping_mul(31).wrapping_add(b as i32));
    }
    s.encode_utf16()
        .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
}

/// ConsumeQueue tags code of a `TAGS` value: the hash sign-extended to 64 bits; no tag is 0.
pub fn tags_code(tags: Option<&str>) -> i64 {
    match tags {
        Some(t) if !t.is_empty() => java_string_hash(t) as i64,
        _ => 0,
    }
}

/// IndexFile key hash: `abs(hashCode)`, where Java's `abs(i32::MIN)` (still negative) counts as 0.
pub fn index_key_hash(key: &str) -> i32 {
    let h = java_string_hash(key);
    if h == i32::MIN {
        0
    } else {
        h.abs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_hash_codes() {
        let cases: &[(&str, i32)] = &[
            ("", 0),
            ("*", 42),
            ("d", 100),
            ("TagA", 2598919),
            ("TagB", 2598920),
            ("Aa", 2112),
            ("BB", 2112),
            ("hello world", 1794106052),
            ("Order_Created", -982890825),
            ("TopicTest#KEY1", -1656969516),
            ("polygenelubricants", i32::MIN),
            ("中文", 646394),
            ("\u{1F600}", 1772899),
        ];
        for (s, want) in cases {
            assert_eq!(java_string_hash(s), *want, "hash of {s:?}");
        }
    }

    #[test]
    fn tags_code_is_sign_extended() {
        assert_eq!(
            tags_code(Some("Order_Created")) as u64,
            0xFFFF_FFFF_C56A_46B7
        );
        assert_eq!(tags_code(Some("TagA")), 0x0027_A807);
        assert_eq!(tags_code(None), 0);
        assert_eq!(tags_code(Some("")), 0);
    }

    #[test]
    fn index_key_hash_folds_min_to_zero() {
        assert_eq!(index_key_hash("TopicTest#KEY1"), 1656969516);
        assert_eq!(index_key_hash("TopicTest#KEY1") % 5_000_000, 1969516);
        assert_eq!(index_key_hash("polygenelubricants"), 0);
    }
}
