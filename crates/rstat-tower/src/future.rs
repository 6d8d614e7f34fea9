//! The response future: the inner service's future, polled inside the
//! request's group, counting a failed call or a 5xx response and wrapping
//! the response body.

use core::future::Future;
use core::pin::Pin;
use core::task::{ready, Context, Poll};

use http::Response;
use pin_project_lite::pin_project;
use rstat::attach::Scoped;

use crate::body::GroupBody;
use crate::stats::{HttpStats, ERRORS};

pin_project! {
    /// The future of a [`GroupService`](crate::GroupService) call: each of
    /// its polls runs the inner future inside the request's group
    /// ([`rstat::Group::scope`]); it resolves to the inner response with
    /// its body wrapped in a [`GroupBody`].
    #[must_use = "futures do nothing unless polled"]
    pub struct ResponseFuture<F> {
        #[pin]
        kind: Kind<F>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F> {
        /// In a group, counted.
        Tracked {
            #[pin]
            fut: Scoped<F>,
            stats: HttpStats,
        },
        /// An unmatched request under `Unmatched::Untracked`.
        Untracked {
            #[pin]
            fut: F,
        },
    }
}

impl<F> ResponseFuture<F> {
    pub(crate) fn tracked(fut: Scoped<F>, stats: HttpStats) -> Self {
        ResponseFuture {
            kind: Kind::Tracked { fut, stats },
        }
    }

    pub(crate) fn untracked(fut: F) -> Self {
        ResponseFuture {
            kind: Kind::Untracked { fut },
        }
    }

    /// The group each poll runs in; `None` for an untracked request.
    pub fn group(&self) -> Option<&rstat::Group> {
        match &self.kind {
            Kind::Tracked { fut, .. } => fut.group(),
            Kind::Untracked { .. } => None,
        }
    }
}

impl<F> std::fmt::Debug for ResponseFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("group", &self.group())
            .finish_non_exhaustive()
    }
}

impl<F, B, E> Future for ResponseFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<GroupBody<B>>, E>;

    /// Cost over the inner poll, for a tracked request: two changes of the
    /// thread's current group (see [`rstat::attach`]'s cost table); when
    /// the inner future completes, one counter add for an error, and one
    /// group reference taken for the body.
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Untracked { fut } => {
                Poll::Ready(ready!(fut.poll(cx)).map(|r| r.map(GroupBody::untracked)))
            }
            KindProj::Tracked { mut fut, stats } => {
                let out = ready!(fut.as_mut().poll(cx));
                let Some(group) = fut.as_ref().get_ref().group() else {
                    // `Group::scope` always gives a group; a wrapper
                    // without one has nothing to count.
                    return Poll::Ready(out.map(|r| r.map(GroupBody::untracked)));
                };
                Poll::Ready(match out {
                    Ok(resp) => {
                        let failed = resp.status().is_server_error();
                        if failed {
                            // The group was checked at the call.
                            let _ = stats.add(group, ERRORS, 1);
                        }
                        let (group, stats) = (group.clone(), stats.clone());
                        Ok(resp.map(|b| GroupBody::tracked(b, group, stats, failed)))
                    }
                    Err(e) => {
                        let _ = stats.add(group, ERRORS, 1);
                        Err(e)
                    }
                })
            }
        }
    }
}
