//! Delivery of due delayed messages from `SCHEDULE_TOPIC_XXXX` to their real topic, in one call
//! per batch: a burst of messages due at the same moment goes out at put speed.

use super::{Inner, SCHEDULE_TOPIC};
use crate::error::Result;
use crate::message::{parse_properties, property, MessageMeta, RecordView};
use crate::send::Rewrite;

/// A message put back into its real topic.
#[derive(Debug, Clone)]
pub struct Delivered {
    pub topic: String,
    pub queue_id: i32,
    pub queue_offset: i64,
    pub tags_code: i64,
    /// The light message queues it was dispatched to, each with its next offset (a lite
    /// message's lite topic: its consumers are told as a send's are).
    pub lmq_arrivals: Vec<(String, i64)>,
}

#[derive(Debug, Clone, Default)]
pub struct DeliverResult {
    pub delivered: Vec<Delivered>,
    /// The schedule queue offset to continue from.
    pub next_offset: i64,
    /// Deliver time (ms) of the first message not yet due, if any.
    pub next_due: Option<i64>,
    /// Messages dropped because they name no real topic or queue.
    pub skipped: usize,
}

impl Inner {
    pub(super) fn deliver_due(
        &self,
        level: i32,
        from: i64,
        now: i64,
        max_count: usize,
    ) -> Result<DeliverResult> {
        let mut out = DeliverResult {
            next_offset: from,
            ..Default::default()
        };
        let Some(cq) = self.queue(SCHEDULE_TOPIC, level - 1) else {
            return Ok(out);
        };
        let delay = self.config.message_delay_level[(level - 1) as usize];
        let max = self.visible_max(&cq);
        let mut offset = from.max(cq.min_offset());
        while offset < max && out.delivered.len() + out.skipped < max_count {
            let Some(unit) = cq.unit(offset) else { break };
            // The tags code is the deliver time. One further ahead than the level's delay means
            // the clock went back: deliver now rather than wait that long.
            if unit.tags_code > now && unit.tags_code <= now + delay {
                out.next_due = Some(unit.tags_code);
                break;
            }
            if unit.offset < self.commitlog.min_offset() as i64 {
                // Its CommitLog file was deleted by retention: the message is gone for good.
                log::warn!(
                    "delayed message at {} was deleted by retention before its time; skipped",
                    unit.offset
                );
                out.skipped += 1;
                offset += 1;
                continue;
            }
            let Some(record) = self.read_record(unit.offset) else {
                break; // not readable yet (SYNC_FLUSH: not on disk): try again later
            };
            let view = RecordView::parse(&record, false)?;
            match self.deliver_one(&view)? {
                Some(d) => out.delivered.push(d),
                None => {
                    log::error!(
                        "delayed message at {} names no real topic/queue; dropped",
                        unit.offset
                    );
                    out.skipped += 1;
                }
            }
            offset += 1;
        }
        out.next_offset = offset;
        Ok(out)
    }

    fn deliver_one(&self, v: &RecordView) -> Result<Option<Delivered>> {
        let props = parse_properties(v.properties);
        let real_topic = props
            .iter()
            .find(|(k, _)| *k == property::REAL_TOPIC)
            .map(|p| p.1);
        let real_qid = props
            .iter()
            .find(|(k, _)| *k == property::REAL_QID)
            .and_then(|p| p.1.parse::<i32>().ok());
        let (Some(topic), Some(queue_id)) = (real_topic, real_qid) else {
            return Ok(None);
        };
        // Apache RocketMQ 4.9.7 re-stores the schedule record's properties string unchanged: its
        // delivered messages still carry DELAY (and whatever WAIT the schedule record had), which
        // consumers see. Keep them too, and do not let DELAY schedule the message again.
        let meta = MessageMeta {
            topic,
            queue_id,
            flag: v.flag,
            sys_flag: v.sys_flag,
            born_timestamp: v.born_timestamp,
            born_host: v.born_host,
            reconsume_times: v.reconsume_times,
            prepared_transaction_offset: v.prepared_transaction_offset,
        };
        let r = self.put_record(&meta, v.body, v.properties, &Rewrite::VERBATIM)?;
        Ok(Some(Delivered {
            topic: r.topic,
            queue_id: r.queue_id,
            queue_offset: r.queue_offset,
            tags_code: r.tags_code,
            lmq_arrivals: r.lmq_arrivals,
        }))
    }
}
