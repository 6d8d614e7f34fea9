//! The connections being served and who gives way when the server is
//! full: each connection's state (`Idle`, `Busy`, `Writing`), the
//! non-blocking peek that tells a silent client from one whose request
//! has arrived, and the choice of the connection to evict. Used by the
//! accept loop ([`server`](super::server)) and by each connection's thread
//! ([`connection`](super::connection)), which claims its slot before it
//! writes.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection waiting for its request head that has received no byte
/// for this long (and has none unread) may be replaced by a new one when
/// the server is full. Far longer than a real client takes between
/// connecting and sending its request (Prometheus, curl and `rstat top`
/// send it at once), far shorter than the head's timeout.
pub const IDLE_BEFORE_EVICTION: Duration = Duration::from_millis(250);

/// The connections being served. When the server is full, a new
/// connection takes the place of one that is really idle (`Idle` or
/// `KeptAlive` for [`IDLE_BEFORE_EVICTION`] with nothing unread in its
/// socket, oldest first; an `Idle` one is answered `503`, a `KeptAlive`
/// one, which asked nothing, is closed without a word, as HTTP lets a
/// server close an idle persistent connection), or else of the one whose answer has been
/// stalled longest (`Writing`, no progress for [`STALLED`]), or else of
/// the one whose head has been arriving longest (`Reading` for
/// [`SLOW_HEAD_BEFORE_EVICTION`], answered `503`): clients that connect
/// and send nothing, trickle a head, or ask and never read cannot keep a
/// scraper out. (Prometheus sends its request at once and reads the
/// answer as it comes.) A connection whose whole request has arrived is
/// never evicted: its bytes are unread in the socket (seen by a peek), or
/// its thread has parsed them and holds the slot `Busy`.
///
/// # Synchronization
///
/// One mutex over the slots. A connection's thread writes to its socket
/// only after [`claim`](Conns::claim)ing its slot under the lock, and the
/// accept thread peeks at an `Idle` connection's socket, answers it and
/// removes its slot under the same lock: so exactly one of them answers,
/// and a thread whose slot is gone closes without writing. The thread
/// claims its slot again each time bytes of the head arrive, so a client
/// that is still sending is never taken for idle. Answering an evicted
/// connection makes its socket non-blocking, for its thread as well (the
/// flag belongs to the socket, not the handle); that thread's next read
/// may then fail at once, but it finds its slot gone and writes nothing.
#[derive(Default)]
pub(super) struct Conns {
    pub(super) next_id: u64,
    pub(super) slots: Vec<Slot>,
}

pub(super) struct Slot {
    pub(super) id: u64,
    /// A handle to answer and shut the connection down when evicted.
    pub(super) stream: TcpStream,
    pub(super) state: ConnState,
    /// When `state` was set: for `Idle`, when the connection was accepted
    /// or last received bytes; for `Writing`, when the answer last made
    /// progress.
    pub(super) since: Instant,
}

/// What a connection is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ConnState {
    /// Waiting for the first byte of a request head.
    Idle,
    /// Part of a request head has arrived, the rest not yet; `since` is
    /// when that part began to arrive (later bytes do not move it).
    Reading,
    /// Rendering the answer.
    Busy,
    /// Writing the answer.
    Writing,
    /// Kept alive after an answer, no byte of the next request yet.
    KeptAlive,
}

/// An answer that made no progress for this long may be evicted when the
/// server is full.
const STALLED: Duration = Duration::from_secs(2);

/// A request head that has been arriving for this long may be evicted
/// when the server is full, however steadily its bytes come: real clients
/// send a head in one go, and a client trickling bytes (slowloris) would
/// otherwise keep its slot until the head's timeout, and reconnect.
pub const SLOW_HEAD_BEFORE_EVICTION: Duration = Duration::from_secs(1);

/// What a socket holds that its reader has not read yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unread {
    /// Nothing yet: the client is silent.
    Nothing,
    /// Bytes: a request (or part of one) has arrived.
    Bytes,
    /// The end of the stream, or an error: the client is gone.
    Gone,
}

/// Look at `stream`'s receive queue without waiting and without taking
/// anything from it.
fn unread(stream: &TcpStream) -> Unread {
    let mut byte = 0u8;
    // SAFETY: `byte` is a live, writable buffer of the 1 byte passed as
    // the length, for the whole call; the descriptor is owned by `stream`,
    // borrowed for the call, so it stays open. `MSG_PEEK` leaves the byte
    // queued for the connection's thread; `MSG_DONTWAIT` makes this call
    // alone non-blocking (the descriptor's flags, shared with that thread's
    // blocking reads, are left alone).
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            std::ptr::from_mut(&mut byte).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        1.. => Unread::Bytes,
        0 => Unread::Gone,
        _ => match io::Error::last_os_error().kind() {
            io::ErrorKind::WouldBlock => Unread::Nothing,
            // Not seen with MSG_DONTWAIT; if it were, keep the connection.
            io::ErrorKind::Interrupted => Unread::Bytes,
            _ => Unread::Gone,
        },
    }
}

impl Conns {
    /// The slot to evict for a new connection, if any: a really idle one
    /// (or one whose client is gone), else a stalled answer. Looks at
    /// the sockets of the `Idle` slots (a non-blocking peek each).
    pub(super) fn victim(&self, now: Instant) -> Option<usize> {
        let idle = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| matches!(s.state, ConnState::Idle | ConnState::KeptAlive))
            .filter(|(_, s)| match unread(&s.stream) {
                Unread::Bytes => false,
                Unread::Gone => true,
                Unread::Nothing => now.saturating_duration_since(s.since) >= IDLE_BEFORE_EVICTION,
            })
            .min_by_key(|(_, s)| s.since)
            .map(|(i, _)| i);
        let oldest = |state: ConnState, age: Duration| {
            self.slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.state == state)
                .filter(|(_, s)| now.saturating_duration_since(s.since) >= age)
                .min_by_key(|(_, s)| s.since)
                .map(|(i, _)| i)
        };
        idle.or_else(|| oldest(ConnState::Writing, STALLED))
            .or_else(|| oldest(ConnState::Reading, SLOW_HEAD_BEFORE_EVICTION))
    }

    /// Set connection `id`'s state (and its `since` to now); false if it
    /// was evicted, and then its thread must close without writing.
    pub(super) fn claim(&mut self, id: u64, state: ConnState) -> bool {
        match self.slots.iter_mut().find(|s| s.id == id) {
            Some(s) => {
                // A head still arriving keeps the time it began.
                if !(state == ConnState::Reading && s.state == ConnState::Reading) {
                    s.since = Instant::now();
                }
                s.state = state;
                true
            }
            None => false,
        }
    }
}

pub(super) type SharedConns = Arc<std::sync::Mutex<Conns>>;

pub(super) fn lock(c: &SharedConns) -> std::sync::MutexGuard<'_, Conns> {
    c.lock().unwrap_or_else(|p| p.into_inner())
}
