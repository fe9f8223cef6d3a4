//! A router built from a list of routes, so that the list is also what
//! says which routes the router serves.
//!
//! axum cannot tell which routes a [`Router`] holds. The library's routers
//! are built from a list of [`Route`]s instead of `.route(...)` calls, and
//! the same list answers [`router_routes`](crate::axum::router_routes) and
//! [`operations_routes`](crate::axum::operations_routes): the OpenAPI tests
//! compare it with the document, so a route added to a router and not to
//! the document fails them.

use ::axum::Router;
use ::axum::handler::Handler;
use ::axum::routing::{MethodFilter, MethodRouter, on};
use http::Method;

/// One method on one path, and the handler that serves it.
pub(crate) struct Route<S> {
    method: Method,
    path: &'static str,
    endpoint: MethodRouter<S>,
}

impl<S: Clone + Send + Sync + 'static> Route<S> {
    /// `method` on `path`, served by `handler`. A `GET` route also answers
    /// `HEAD` (axum's, as RFC 9110 section 9.3.2 asks).
    ///
    /// # Panics
    /// If `method` is one axum cannot route (`CONNECT` and extension
    /// methods): a mistake in the library's own table, seen at its first
    /// test.
    pub(crate) fn new<H, T>(method: Method, path: &'static str, handler: H) -> Self
    where
        H: Handler<T, S>,
        T: 'static,
    {
        let filter = MethodFilter::try_from(method.clone())
            .unwrap_or_else(|_| panic!("axum cannot route {method} {path}"));
        Self {
            method,
            path,
            endpoint: on(filter, handler),
        }
    }
}

/// The router serving `routes`. Routes on one path share its method
/// router (axum merges them), so a wrong method there is answered 405 with
/// an `Allow` header listing them in table order.
pub(crate) fn build<S: Clone + Send + Sync + 'static>(routes: Vec<Route<S>>) -> Router<S> {
    routes.into_iter().fold(Router::new(), |router, route| {
        router.route(route.path, route.endpoint)
    })
}

/// The method and path of each of `routes`, in table order.
pub(crate) fn listing<S>(routes: &[Route<S>]) -> Vec<(Method, &'static str)> {
    routes
        .iter()
        .map(|route| (route.method.clone(), route.path))
        .collect()
}
