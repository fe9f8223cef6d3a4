//! The signals that end a server: Ctrl-C (SIGINT) and SIGTERM, the one a
//! service manager or a container runtime sends to stop it.

use std::future::Future;

/// Resolves on Ctrl-C or SIGTERM: the `shutdown` future to pass to
/// [`serve`](crate::axum::serve), which then drains the connections.
///
/// The handlers are installed when this is called, not when the future is
/// first polled: a host logs that it listens before it polls this, and a
/// SIGTERM sent right after that line must start a graceful shutdown, not
/// kill the process (the default action of a signal without a handler).
/// Where a handler cannot be installed, that signal is never awaited. Logs
/// (at info) that the shutdown starts. Needs a tokio runtime whose I/O
/// driver is on.
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    async move {
        #[cfg(unix)]
        {
            let (mut interrupt, mut terminate) = signals;
            tokio::select! {
                () = received(interrupt.as_mut()) => {}
                () = received(terminate.as_mut()) => {}
            }
        }
        #[cfg(not(unix))]
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
        tracing::info!("shutting down: finishing the requests in flight");
    }
}

/// Resolves when `signal` arrives; never without a handler.
#[cfg(unix)]
async fn received(signal: Option<&mut tokio::signal::unix::Signal>) {
    match signal {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn a_sigterm_sent_before_the_first_poll_starts_the_shutdown() {
        let shutdown = shutdown_signal();
        // The handler is in place already: the signal does not end the
        // test process, and the future sees it once polled.
        rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::TERM)
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), shutdown)
            .await
            .expect("the shutdown future resolves on SIGTERM");
    }
}
