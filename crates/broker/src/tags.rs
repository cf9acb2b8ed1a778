//! The one reading of a TAG subscription expression (`*`, `TagA || TagB`): the plane's pulls
//! filter by it, and Python's subscriptions call it through the binding.

use ferromq_store::hash::java_string_hash;

/// Which tags a pull takes: any, or those whose tags code (low 32 bits) is listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TagFilter {
    Any,
    Codes(Vec<i32>),
}

/// A TAG subscription expression that names no tag (`||`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoTags;

/// The tags of a TAG subscription expression (`*`, `TagA || TagB`): `Ok(None)` takes every
/// message, `Ok(Some(tags))` (sorted, each once) the messages with one of them. The one reading
/// of the expression: Python's subscriptions call it too.
pub fn parse_tags(expression: &str) -> Result<Option<Vec<String>>, NoTags> {
    let text = expression.trim();
    if text.is_empty() || text == "*" {
        return Ok(None);
    }
    let mut tags: Vec<String> = text
        .split("||")
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    if tags.is_empty() {
        return Err(NoTags);
    }
    if tags.iter().any(|t| t == "*") {
        return Ok(None);
    }
    tags.sort_unstable();
    tags.dedup();
    Ok(Some(tags))
}

impl TagFilter {
    /// A TAG expression (see [`parse_tags`]); None when it names no tag (Python refuses it).
    pub fn parse(expression: &str) -> Option<TagFilter> {
        match parse_tags(expression).ok()? {
            None => Some(TagFilter::Any),
            Some(tags) => {
                let mut codes: Vec<i32> = tags.iter().map(|t| java_string_hash(t)).collect();
                codes.sort_unstable();
                codes.dedup();
                Some(TagFilter::Codes(codes))
            }
        }
    }

    pub(crate) fn codes(&self) -> Option<&[i32]> {
        match self {
            TagFilter::Any => None,
            TagFilter::Codes(c) => Some(c),
        }
    }

    /// Whether a message stored with `tags_code` (None: unknown, as after a batch) may match.
    pub(crate) fn may_take(&self, tags_code: Option<i64>) -> bool {
        match (self, tags_code) {
            (TagFilter::Codes(codes), Some(code)) => codes.contains(&(code as i32)),
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_expressions_read_as_python_reads_them() {
        assert_eq!(TagFilter::parse(" * "), Some(TagFilter::Any));
        assert_eq!(TagFilter::parse(""), Some(TagFilter::Any));
        assert_eq!(TagFilter::parse("a || *"), Some(TagFilter::Any));
        assert_eq!(TagFilter::parse(" || "), None);
        let a = java_string_hash("TagA");
        let b = java_string_hash("TagB");
        let mut both = vec![a, b];
        both.sort_unstable();
        assert_eq!(
            TagFilter::parse("TagB || TagA ||TagA"),
            Some(TagFilter::Codes(both))
        );
        let f = TagFilter::parse("TagA").unwrap();
        assert!(f.may_take(Some(a as i64)));
        assert!(!f.may_take(Some(b as i64)));
        assert!(f.may_take(None));
    }
}
