//! What analytics readers plan with before they read: how many units of a queue range a tag
//! filter keeps, from the consume queue alone (no CommitLog record is touched).

use super::{accepts_tags, MessageStore};
use crate::error::Result;

impl MessageStore {
    /// Units of one queue in `[from, to)` whose tags code (low 32 bits) is in `tag_codes` (all
    /// units when `None`), clipped to what the queue holds. Pre-blank units do not count.
    pub fn count_units(
        &self,
        topic: &str,
        queue_id: i32,
        from: i64,
        to: i64,
        tag_codes: Option<&[i32]>,
    ) -> Result<i64> {
        let inner = self.check_open()?;
        let Some(cq) = inner.queue(topic, queue_id) else {
            return Ok(0);
        };
        let accept = accepts_tags(tag_codes);
        let (lo, hi) = (from.max(cq.min_offset()), to.min(inner.visible_max(&cq)));
        Ok((lo..hi)
            .filter_map(|i| cq.unit(i))
            .filter(|u| !u.is_pre_blank() && accept(u.tags_code))
            .count() as i64)
    }
}
