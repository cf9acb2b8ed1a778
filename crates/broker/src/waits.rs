//! Sends waiting for an offset (on disk in SYNC_FLUSH, on a slave in SYNC_MASTER) are answered
//! in groups: one request to the flush (or HA) thread covers every send at or below the highest
//! offset asked for, and the replies it releases leave in one write per connection. (A request
//! per send costs the waiting thread a wake-up of the I/O threads per send.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ferromq_store::flush::FlushCallback;

use crate::conn::Conn;

/// Replies released together, by connection.
pub(crate) type Replies = HashMap<u64, (Arc<Conn>, Vec<u8>)>;
/// What a waiting send does once its offset is reached (true) or the wait failed (false).
pub(crate) type Then = Box<dyn FnOnce(bool, &mut Replies) + Send>;
/// Asks for `callback(reached)` once the offset is reached or the wait times out.
pub(crate) type Ask = Box<dyn Fn(u64, FlushCallback) + Send + Sync>;

pub(crate) struct GroupWait {
    ask: Ask,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    waiting: Vec<(u64, Then)>,
    /// The highest offset asked for: a send at or below it is covered by that request.
    asked: u64,
}

impl GroupWait {
    pub(crate) fn new(ask: Ask) -> Arc<GroupWait> {
        Arc::new(GroupWait {
            ask,
            state: Mutex::new(State::default()),
        })
    }

    pub(crate) fn wait(self: &Arc<Self>, end: u64, then: Then) {
        let ask = {
            let mut st = self.state.lock().unwrap();
            st.waiting.push((end, then));
            let ask = end > st.asked;
            if ask {
                st.asked = end;
            }
            ask
        };
        // Outside the lock: the answer may come at once, on this thread.
        if ask {
            let me = self.clone();
            (self.ask)(end, Box::new(move |ok| me.answered(end, ok)));
        }
    }

    /// Releases every send at or below `target` (those above wait for a later request's answer).
    fn answered(&self, target: u64, ok: bool) {
        let ready: Vec<(u64, Then)> = {
            let mut st = self.state.lock().unwrap();
            let (ready, waiting) = std::mem::take(&mut st.waiting)
                .into_iter()
                .partition(|(end, _)| *end <= target);
            st.waiting = waiting;
            ready
        };
        let mut replies = Replies::new();
        for (_, then) in ready {
            then(ok, &mut replies);
        }
        for (conn, bytes) in replies.into_values() {
            if !bytes.is_empty() {
                conn.write(bytes);
            }
        }
    }
}
