//! The routers' per-request deadline: a request still unanswered
//! [`REQUEST_TIMEOUT`](crate::axum::REQUEST_TIMEOUT) after its handler
//! first waited is answered 503 (which the JSON rewrite of error answers
//! turns into the service's error body, with `Retry-After`).
//!
//! It does what `tower_http`'s `TimeoutLayer` does, but starts the clock
//! only when the handler first returns `Pending`. That layer's future polls
//! its `Sleep` before the handler, so every request registers a timer in
//! tokio's timer wheel and removes it when answered, under the wheel's lock:
//! with hyper's header timer, the two came to about 5% of the memory
//! store's CPU under a flood (server/benches/intake_load/NOTES.md, "the
//! per-request timers"). A request answered in its first poll, as an event
//! on the memory store is, never touches the wheel here. No timer can cut
//! short a first poll that does not return (the timer is only polled
//! between the handler's polls), so counting from the first wait instead
//! of the call takes nothing from the bound.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use ::axum::response::Response;
use http::StatusCode;
use tokio::time::Sleep;
use tower::{Layer, Service};

/// Wraps a service so that each of its requests is answered with
/// `status` once `timeout` has passed since the request first waited.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RequestTimeoutLayer {
    timeout: Duration,
    status: StatusCode,
}

impl RequestTimeoutLayer {
    /// Requests answered `status` (with an empty body) after `timeout`.
    pub(crate) fn new(status: StatusCode, timeout: Duration) -> Self {
        Self { timeout, status }
    }
}

impl<S> Layer<S> for RequestTimeoutLayer {
    type Service = RequestTimeout<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RequestTimeout {
            inner,
            timeout: self.timeout,
            status: self.status,
        }
    }
}

/// The service [`RequestTimeoutLayer`] makes.
#[derive(Clone, Debug)]
pub(crate) struct RequestTimeout<S> {
    inner: S,
    timeout: Duration,
    status: StatusCode,
}

impl<S, R> Service<R> for RequestTimeout<S>
where
    S: Service<R, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Deadline<S::Future>;

    fn poll_ready(&mut self, context: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(context)
    }

    fn call(&mut self, request: R) -> Self::Future {
        Deadline {
            answer: self.inner.call(request),
            timer: None,
            timeout: self.timeout,
            status: self.status,
        }
    }
}

pin_project_lite::pin_project! {
    /// A request's answer, or `status` once its deadline has passed.
    pub(crate) struct Deadline<F> {
        #[pin]
        answer: F,
        // Set at the first `Pending`; boxed, since few requests need one.
        timer: Option<Pin<Box<Sleep>>>,
        timeout: Duration,
        status: StatusCode,
    }
}

impl<F, E> Future for Deadline<F>
where
    F: Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(answer) = this.answer.poll(context) {
            return Poll::Ready(answer);
        }
        let timeout = *this.timeout;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        ready!(timer.as_mut().poll(context));
        let mut answer = Response::default();
        *answer.status_mut() = *this.status;
        Poll::Ready(Ok(answer))
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::future::{pending, ready};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::time::Instant;
    use tower::ServiceExt as _;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(30);

    fn layer() -> RequestTimeoutLayer {
        RequestTimeoutLayer::new(StatusCode::SERVICE_UNAVAILABLE, TIMEOUT)
    }

    fn answer(status: StatusCode) -> Result<Response, Infallible> {
        let mut answer = Response::default();
        *answer.status_mut() = status;
        Ok(answer)
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_ready_at_once_sets_no_timer() {
        let mut deadline = Box::pin(Deadline {
            answer: ready(answer(StatusCode::CREATED)),
            timer: None,
            timeout: TIMEOUT,
            status: StatusCode::SERVICE_UNAVAILABLE,
        });
        let polled = std::future::poll_fn(|context| Poll::Ready(deadline.as_mut().poll(context)))
            .await
            .map(|answer| answer.unwrap().status());
        assert_eq!(polled, Poll::Ready(StatusCode::CREATED));
        assert!(deadline.timer.is_none(), "the wheel was not touched");
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_that_never_answers_gets_the_status_at_the_deadline() {
        let service = layer().layer(tower::service_fn(|(): ()| {
            pending::<Result<Response, Infallible>>()
        }));
        let started = Instant::now();
        let answer = service.oneshot(()).await.unwrap();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(started.elapsed(), TIMEOUT, "not before, and not later");
    }

    #[tokio::test(start_paused = true)]
    async fn a_handler_that_waits_and_answers_in_time_is_answered() {
        let service = layer().layer(tower::service_fn(|(): ()| async {
            tokio::time::sleep(TIMEOUT - Duration::from_millis(1)).await;
            answer(StatusCode::OK)
        }));
        let answer = service.oneshot(()).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK);
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_counts_from_the_first_wait_and_is_not_reset_by_later_ones() {
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        // Wakes itself every second and never answers: each poll after the
        // first must not push the deadline back.
        let service = layer().layer(tower::service_fn(move |(): ()| {
            let polls = counted.clone();
            async move {
                // Never true: the handler outlasts any deadline.
                while polls.fetch_add(1, Ordering::Relaxed) < usize::MAX {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                answer(StatusCode::OK)
            }
        }));
        let started = Instant::now();
        let answer = service.oneshot(()).await.unwrap();
        assert_eq!(answer.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(started.elapsed(), TIMEOUT);
        assert!(polls.load(Ordering::Relaxed) >= 30, "woken along the way");
    }
}
