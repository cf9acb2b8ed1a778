//! The requests the data plane answers itself, as one enum: a frame's request code names the
//! command, which reads its header and applies it (or hands the frame to Python whole).

use std::sync::Arc;
use std::time::Instant;

use crate::conn::Conn;
use crate::hub::{Hub, Outcome};
use crate::pop::{self, LiveConfig};
use crate::pull::{self, PullConfig};
use crate::send::{self, SendConfig};
use ferromq_remoting::codes::{
    ACK_MESSAGE, CHANGE_MESSAGE_INVISIBLETIME, POP_MESSAGE, PULL_MESSAGE, SEND_BATCH_MESSAGE,
    SEND_MESSAGE, SEND_MESSAGE_V2,
};
use ferromq_remoting::frame::{Frame, Header};

/// What the plane may serve, as Python last said (one snapshot serves one read's frames).
pub(crate) struct Configs<'a> {
    pub(crate) send: Option<Arc<SendConfig>>,
    pub(crate) pull: Option<Arc<PullConfig>>,
    /// Where Python replaces the pull snapshot: a pop that waits reads the one in force.
    pub(crate) live_pull: &'a LiveConfig,
}

impl Configs<'_> {
    pub(crate) fn any(&self) -> bool {
        self.send.is_some() || self.pull.is_some()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    /// SEND_MESSAGE, SEND_MESSAGE_V2, SEND_BATCH_MESSAGE.
    Send,
    /// PULL_MESSAGE (held here when it may wait).
    Pull,
    /// POP_MESSAGE (held here when it may wait).
    Pop,
    /// ACK_MESSAGE.
    Ack,
    /// CHANGE_MESSAGE_INVISIBLETIME.
    ChangeInvisible,
}

impl Command {
    pub(crate) fn of(code: i32) -> Option<Command> {
        match code {
            SEND_MESSAGE | SEND_MESSAGE_V2 | SEND_BATCH_MESSAGE => Some(Command::Send),
            PULL_MESSAGE => Some(Command::Pull),
            POP_MESSAGE => Some(Command::Pop),
            ACK_MESSAGE => Some(Command::Ack),
            CHANGE_MESSAGE_INVISIBLETIME => Some(Command::ChangeInvisible),
            _ => None,
        }
    }

    /// Serves the request when the snapshot lets the plane; `replies` gets what is answered at
    /// once.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn apply(
        self,
        hub: &Arc<Hub>,
        configs: &Configs<'_>,
        conn: &Arc<Conn>,
        frame: &Frame<'_>,
        h: &Header<'_>,
        arrived: Instant,
        replies: &mut Vec<u8>,
    ) -> Outcome {
        match (self, &configs.send, &configs.pull) {
            (Command::Send, Some(cfg), _) => {
                send::serve(hub, cfg, conn, frame, h, arrived, replies)
            }
            (Command::Pull, _, Some(cfg)) => {
                pull::serve(hub, cfg, conn, frame, h, arrived, replies)
            }
            (Command::Pop, _, Some(cfg)) => {
                let live = configs.live_pull;
                pop::serve_pop(hub, cfg, live, conn, frame, h, arrived, replies)
            }
            (Command::Ack, _, Some(cfg)) => pop::serve_ack(hub, cfg, conn, h, arrived, replies),
            (Command::ChangeInvisible, _, Some(cfg)) => {
                pop::serve_change_invisible(hub, cfg, conn, h, arrived, replies)
            }
            _ => Outcome::Forward,
        }
    }
}
