//! What the data plane counts for the broker's statistics; Python takes and adds it to its own.

use std::collections::HashMap;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TopicPuts {
    pub messages: u64,
    pub bytes: u64,
    /// Store calls (a batch is one).
    pub sends: u64,
}

#[derive(Debug, Default, Clone, PartialEq)]
pub struct RpcLatency {
    /// One count per bucket bound, and one past the last.
    pub counts: Vec<u64>,
    pub sum_ms: f64,
}

#[derive(Debug, Default)]
pub struct PlaneStats {
    pub puts: HashMap<String, TopicPuts>,
    /// How many store calls took each whole number of milliseconds.
    pub put_took_ms: HashMap<u64, u64>,
    /// Per (request code, response code).
    pub rpc: HashMap<(i32, i32), RpcLatency>,
    /// Pulls answered, per (group, topic, queue id).
    pub got: HashMap<(String, String, i32), QueueGets>,
}

/// What pulls of one group from one queue found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct QueueGets {
    /// The next offset the last pull answered.
    pub next_offset: i64,
    /// Pulls that found messages, and those that found none.
    pub found: u64,
    pub missed: u64,
    pub messages: u64,
    pub bytes: u64,
}

impl PlaneStats {
    pub fn put(&mut self, topic: &str, messages: u64, bytes: u64, took_ms: u64) {
        let p = match self.puts.get_mut(topic) {
            Some(p) => p,
            None => self.puts.entry(topic.to_string()).or_default(),
        };
        p.messages += messages;
        p.bytes += bytes;
        p.sends += 1;
        *self.put_took_ms.entry(took_ms).or_default() += 1;
    }

    pub fn got(
        &mut self,
        group: &str,
        topic: &str,
        queue_id: i32,
        next_offset: i64,
        messages: u64,
        bytes: u64,
    ) {
        let g = self
            .got
            .entry((group.to_string(), topic.to_string(), queue_id))
            .or_default();
        g.next_offset = next_offset;
        if messages == 0 {
            g.missed += 1;
        } else {
            g.found += 1;
            g.messages += messages;
            g.bytes += bytes;
        }
    }

    /// Counts a request answered after `ms` in the first bucket whose bound is not below it.
    pub fn rpc(&mut self, request: i32, response: i32, ms: f64, bounds: &[f64]) {
        let h = self.rpc.entry((request, response)).or_default();
        if h.counts.is_empty() {
            h.counts = vec![0; bounds.len() + 1];
        }
        let bucket = bounds.partition_point(|b| *b < ms);
        h.counts[bucket] += 1;
        h.sum_ms += ms;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_fall_in_the_first_bucket_not_below_them() {
        let mut s = PlaneStats::default();
        let bounds = [1.0, 3.0, 5.0];
        for ms in [0.2, 1.0, 2.0, 5.0, 9.0] {
            s.rpc(310, 0, ms, &bounds);
        }
        assert_eq!(s.rpc[&(310, 0)].counts, vec![2, 1, 1, 1]);
        s.put("T", 3, 300, 0);
        s.put("T", 1, 100, 2);
        assert_eq!(
            s.puts["T"],
            TopicPuts {
                messages: 4,
                bytes: 400,
                sends: 2
            }
        );
        assert_eq!(s.put_took_ms[&0], 1);
    }
}
