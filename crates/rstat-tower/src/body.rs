//! The response body: polled inside the request's group, counting the
//! bytes it yields and an error it ends with.

use core::pin::Pin;
use core::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use rstat::Group;

use crate::stats::{HttpStats, ERRORS, RESPONSE_BYTES};

pin_project! {
    /// A response body whose every poll runs inside the request's group,
    /// so the CPU time a streaming body spends producing its frames, and
    /// what it allocates, are charged to the group like the handler's.
    /// Each data frame's size is added to the group's `response_bytes` as
    /// it is yielded; an error frame counts the request in `errors`
    /// (unless its status already did).
    pub struct GroupBody<B> {
        #[pin]
        inner: B,
        track: Option<Track>,
    }
}

struct Track {
    group: Group,
    stats: HttpStats,
    /// The request was already counted in `errors`.
    failed: bool,
}

impl<B> GroupBody<B> {
    pub(crate) fn tracked(inner: B, group: Group, stats: HttpStats, failed: bool) -> Self {
        GroupBody {
            inner,
            track: Some(Track {
                group,
                stats,
                failed,
            }),
        }
    }

    pub(crate) fn untracked(inner: B) -> Self {
        GroupBody { inner, track: None }
    }

    /// The group the body's polls run in and its counts go to; `None` for
    /// an untracked request.
    pub fn group(&self) -> Option<&Group> {
        self.track.as_ref().map(|t| &t.group)
    }

    /// The wrapped body.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B> std::fmt::Debug for GroupBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupBody")
            .field("group", &self.group())
            .finish_non_exhaustive()
    }
}

impl<B: Body> Body for GroupBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    /// Cost over the inner poll, for a tracked request:
    /// [`Group::enter`] and its guard's drop (a group reference taken and
    /// put, two changes of the current group), and one counter add per
    /// data frame (none for an empty one) or error.
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let Some(track) = this.track.as_mut() else {
            return this.inner.poll_frame(cx);
        };
        let polled = {
            let _in = track.group.enter();
            this.inner.poll_frame(cx)
        };
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.remaining();
                    if n > 0 {
                        let n = i64::try_from(n).unwrap_or(i64::MAX);
                        let _ = track.stats.add(&track.group, RESPONSE_BYTES, n);
                    }
                }
            }
            Poll::Ready(Some(Err(_))) if !track.failed => {
                track.failed = true;
                let _ = track.stats.add(&track.group, ERRORS, 1);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
