//! The name resolver of [`super::HttpWebhookTransport`]: resolves a
//! receiver's host name at each new connection and, unless private
//! destinations are allowed, refuses the name when any of its addresses is
//! not public.
//!
//! Why at connection time, in the client: a name checked once (at
//! registration) may resolve to `127.0.0.1` later (DNS rebinding), and a
//! check before sending, apart from the connection, would resolve the name
//! twice and could be answered differently each time. Here the addresses
//! checked are the addresses the client connects to. Literal addresses in a
//! URL never reach a resolver (the client connects to them directly); the
//! transport refuses them with [`check_url`](crate::webhooks::destination::check_url)
//! before sending.

use std::error::Error;
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::webhooks::destination::is_public_address;
use crate::webhooks::transport::DestinationRefused;

/// A name lookup given to [`HttpWebhookTransport::with_lookup`] instead of
/// the system's resolver: the addresses of a host name, none when it does
/// not resolve.
///
/// [`HttpWebhookTransport::with_lookup`]: crate::HttpWebhookTransport::with_lookup
pub type NameLookup = Arc<dyn Fn(&str) -> Vec<IpAddr> + Send + Sync>;

/// Where the resolver gets a name's addresses.
#[derive(Clone)]
pub(crate) enum Lookup {
    /// The system's resolver, through tokio (`getaddrinfo` on a blocking
    /// thread).
    System,
    /// A function given by the host or a test.
    Given(NameLookup),
}

impl Lookup {
    /// The addresses of `host`; none when it does not resolve (a failed
    /// lookup and an empty answer mean the same to a delivery).
    async fn addresses(&self, host: &str) -> Vec<IpAddr> {
        match self {
            Lookup::System => match tokio::net::lookup_host((host, 0)).await {
                Ok(addresses) => addresses.map(|address| address.ip()).collect(),
                Err(_) => Vec::new(),
            },
            Lookup::Given(lookup) => lookup(host),
        }
    }
}

/// The resolver the transport's client connects through.
pub(crate) struct CheckedResolver {
    lookup: Lookup,
    allow_private: bool,
}

impl CheckedResolver {
    /// A resolver looking names up with `lookup`, refusing non-public
    /// addresses unless `allow_private`.
    pub(crate) fn new(lookup: Lookup, allow_private: bool) -> Self {
        CheckedResolver {
            lookup,
            allow_private,
        }
    }
}

impl Resolve for CheckedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let lookup = self.lookup.clone();
        let allow_private = self.allow_private;
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addresses = checked(lookup.addresses(&host).await, allow_private)?;
            // Port 0: the client puts the URL's port (or the scheme's) in.
            let addresses: Addrs = Box::new(addresses.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addresses)
        })
    }
}

/// The addresses a name may be connected to: all of them, or none when any
/// one is not public (unless `allow_private`). One private address refuses
/// the whole name: the client may try the addresses in any order, and a
/// receiver that lists an internal address beside a public one is asking
/// for the internal one to be tried.
fn checked(addresses: Vec<IpAddr>, allow_private: bool) -> Result<Vec<IpAddr>, ResolveRefused> {
    if addresses.is_empty() {
        return Err(ResolveRefused(DestinationRefused::Unresolvable));
    }
    if !allow_private && !addresses.iter().all(|address| is_public_address(*address)) {
        return Err(ResolveRefused(DestinationRefused::PrivateAddress));
    }
    Ok(addresses)
}

/// The resolver's refusal, carried through the client's error to
/// [`refusal_in`].
#[derive(Debug)]
pub(crate) struct ResolveRefused(DestinationRefused);

impl fmt::Display for ResolveRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl Error for ResolveRefused {}

/// The resolver's refusal, if `error` (a failed request's error) comes
/// from one.
pub(crate) fn refusal_in(error: &(dyn Error + 'static)) -> Option<DestinationRefused> {
    chain(error).find_map(|cause| {
        cause
            .downcast_ref::<ResolveRefused>()
            .map(|refused| refused.0.clone())
    })
}

/// `error` and its causes, outermost first. An `io::Error` that wraps
/// another error is followed into it: its own `source()` skips the error
/// it wraps and answers that error's source.
pub(crate) fn chain<'a>(
    error: &'a (dyn Error + 'static),
) -> impl Iterator<Item = &'a (dyn Error + 'static)> {
    std::iter::successors(Some(error), |&current| {
        match current
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
        {
            Some(inner) => Some(inner as &(dyn Error + 'static)),
            None => current.source(),
        }
    })
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn resolver(addresses: &'static [&'static str], allow_private: bool) -> CheckedResolver {
        let lookup: NameLookup = Arc::new(move |_: &str| {
            addresses
                .iter()
                .filter_map(|address| address.parse().ok())
                .collect()
        });
        CheckedResolver::new(Lookup::Given(lookup), allow_private)
    }

    async fn resolve(resolver: &CheckedResolver) -> Result<Vec<SocketAddr>, String> {
        let name = Name::from_str("hooks.test").map_err(|_| "name".to_owned())?;
        match resolver.resolve(name).await {
            Ok(addresses) => Ok(addresses.collect()),
            Err(error) => Err(match refusal_in(error.as_ref()) {
                Some(refused) => format!("refused: {refused:?}"),
                None => format!("other: {error}"),
            }),
        }
    }

    #[tokio::test]
    async fn public_addresses_pass_with_port_zero() {
        let addresses = resolve(&resolver(&["93.184.215.14", "2606:4700::1111"], false)).await;
        assert_eq!(
            addresses,
            Ok(vec![
                "93.184.215.14:0".parse().unwrap(),
                "[2606:4700::1111]:0".parse().unwrap(),
            ])
        );
    }

    #[tokio::test]
    async fn one_private_address_refuses_the_whole_name() {
        for addresses in [
            &["127.0.0.1"][..],
            &["93.184.215.14", "10.0.0.1"][..],
            &["::ffff:169.254.169.254"][..],
        ] {
            assert_eq!(
                resolve(&resolver(addresses, false)).await,
                Err("refused: PrivateAddress".to_owned()),
                "{addresses:?}"
            );
        }
    }

    #[tokio::test]
    async fn private_addresses_pass_when_allowed() {
        assert_eq!(
            resolve(&resolver(&["127.0.0.1"], true)).await,
            Ok(vec!["127.0.0.1:0".parse().unwrap()])
        );
    }

    #[tokio::test]
    async fn no_address_is_unresolvable_even_when_private_is_allowed() {
        for allow_private in [false, true] {
            assert_eq!(
                resolve(&resolver(&[], allow_private)).await,
                Err("refused: Unresolvable".to_owned())
            );
        }
    }

    #[test]
    fn a_refusal_is_found_inside_an_io_error() {
        // An io::Error's own `source()` would skip the refusal it wraps.
        let wrapped = io::Error::other(ResolveRefused(DestinationRefused::PrivateAddress));
        let outer: Box<dyn Error + Send + Sync> = Box::new(Outer(wrapped));
        assert_eq!(
            refusal_in(outer.as_ref()),
            Some(DestinationRefused::PrivateAddress)
        );
        assert_eq!(refusal_in(&io::Error::other("reset")), None);
    }

    #[derive(Debug)]
    struct Outer(io::Error);

    impl fmt::Display for Outer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("outer")
        }
    }

    impl Error for Outer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }
}
