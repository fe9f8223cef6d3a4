//! Where deliveries may go: the checks that keep the service from being
//! turned against its own network (server-side request forgery).
//!
//! A webhook's URL is chosen by whoever holds an app's token, so by default
//! it must be `https` and name a host whose addresses are all public. The
//! URL is checked at registration, and the addresses again at each delivery
//! by the transport, on the addresses it actually connects to (a name may
//! resolve to a public address when registered and to `127.0.0.1` later).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use url::{Host, Url};

use crate::webhooks::transport::DestinationRefused;

/// The longest URL accepted.
pub const MAX_URL_LEN: usize = 2048;

/// Checks a webhook URL without resolving it: absolute, `https` (or `http`
/// when `allow_private`), no credentials, a host, and, when the host is an
/// address or `localhost`, a public one unless `allow_private`. Returns
/// the parsed URL.
///
/// # Errors
/// Why the URL is refused.
pub fn check_url(text: &str, allow_private: bool) -> Result<Url, DestinationRefused> {
    if text.len() > MAX_URL_LEN {
        return Err(DestinationRefused::Malformed);
    }
    let url = Url::parse(text).map_err(|_| DestinationRefused::Malformed)?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(DestinationRefused::Scheme),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(DestinationRefused::Malformed);
    }
    let public = match url.host() {
        None => return Err(DestinationRefused::Malformed),
        Some(Host::Ipv4(address)) => is_public_address(IpAddr::V4(address)),
        Some(Host::Ipv6(address)) => is_public_address(IpAddr::V6(address)),
        Some(Host::Domain(name)) => {
            let name = name.trim_end_matches('.');
            !(name == "localhost" || name.ends_with(".localhost"))
        }
    };
    if !public && !allow_private {
        return Err(DestinationRefused::PrivateAddress);
    }
    Ok(url)
}

/// Whether deliveries may go to `address` when private destinations are
/// not allowed: a globally routable unicast address. Refused: unspecified,
/// loopback, private (RFC 1918), shared (RFC 6598), link-local (the cloud
/// metadata service, 169.254.169.254, among them), documentation,
/// benchmarking, multicast, broadcast and reserved IPv4 ranges; their IPv6
/// kin (unique local `fc00::/7`, link-local, site-local, multicast,
/// documentation, discard), and IPv6 forms that embed an IPv4 address
/// (mapped, compatible, NAT64, 6to4, Teredo) unless the embedded one is
/// public.
pub fn is_public_address(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(address: Ipv4Addr) -> bool {
    let [a, b, c, _] = address.octets();
    let refused = a == 0 // "this network" (RFC 791)
        || a == 10 // private (RFC 1918)
        || a == 127 // loopback
        || (a == 100 && (64..128).contains(&b)) // shared address space (RFC 6598)
        || (a == 169 && b == 254) // link-local, the metadata service (RFC 3927)
        || (a == 172 && (16..32).contains(&b)) // private (RFC 1918)
        || (a == 192 && b == 0 && c == 0) // IETF protocol assignments (RFC 6890)
        || (a == 192 && b == 0 && c == 2) // TEST-NET-1 (RFC 5737)
        || (a == 192 && b == 88 && c == 99) // 6to4 relay anycast (RFC 7526)
        || (a == 192 && b == 168) // private (RFC 1918)
        || (a == 198 && (18..20).contains(&b)) // benchmarking (RFC 2544)
        || (a == 198 && b == 51 && c == 100) // TEST-NET-2
        || (a == 203 && b == 0 && c == 113) // TEST-NET-3
        || a >= 224; // multicast, reserved (240/4), broadcast
    !refused
}

fn is_public_v6(address: Ipv6Addr) -> bool {
    let segments = address.segments();
    if let Some(v4) = address.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96)
    // reach the embedded IPv4 address. `::` and `::1` land in 0.0.0.0/8,
    // which is refused.
    if segments[..6] == [0; 6] || segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let [.., high, low] = segments;
        return is_public_v4(embedded_v4(high, low));
    }
    // 6to4 (2002::/16) embeds the IPv4 address in segments 1 and 2.
    if segments[0] == 0x2002 {
        return is_public_v4(embedded_v4(segments[1], segments[2]));
    }
    let refused = (segments[0] & 0xfe00) == 0xfc00 // unique local (RFC 4193)
        || (segments[0] & 0xffc0) == 0xfe80 // link-local
        || (segments[0] & 0xffc0) == 0xfec0 // site-local (deprecated)
        || (segments[0] & 0xff00) == 0xff00 // multicast
        || (segments[0] == 0x2001 && segments[1] == 0x0db8) // documentation (RFC 3849)
        || (segments[0] == 0x2001 && segments[1] == 0) // Teredo (RFC 4380)
        || segments[..4] == [0x100, 0, 0, 0]; // discard (RFC 6666)
    !refused
}

/// The IPv4 address an IPv6 address carries in two of its segments, the
/// `high` one first (RFC 4291 section 2.5.5, RFC 6052, RFC 3056).
fn embedded_v4(high: u16, low: u16) -> Ipv4Addr {
    let [a, b] = high.to_be_bytes();
    let [c, d] = low.to_be_bytes();
    Ipv4Addr::new(a, b, c, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn public(text: &str) -> bool {
        is_public_address(text.parse().unwrap())
    }

    #[test]
    fn public_addresses_pass() {
        for address in [
            "93.184.215.14",
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "2606:4700::1111",
            "2001:4860:4860::8888",
            "2a01::1",
            "2a02:db8::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(public(address), "{address}");
        }
    }

    /// Each refused IPv4 range is matched on every octet it names, and on
    /// nothing else: an address just outside it, or sharing only one of its
    /// octets, is public. (`cargo mutants` found `169.254/16` refusing any
    /// `x.254.*.*`, and `172.16/12` any `x.16-31.*.*`, unnoticed.)
    #[test]
    fn the_neighbours_of_every_refused_ipv4_range_are_public() {
        for address in [
            "1.0.0.1",         // past 0/8
            "9.255.255.255",   // around 10/8
            "11.0.0.1",        //
            "126.255.255.255", // around 127/8
            "128.0.0.1",       //
            "100.63.255.255",  // around 100.64/10
            "8.64.0.1",        // its second octet only
            "169.253.255.255", // around 169.254/16
            "169.255.0.1",     //
            "8.254.0.1",       // its second octet only
            "172.15.255.255",  // around 172.16/12
            "8.16.0.1",        // its second octet only
            "192.0.1.1",       // around 192.0.0/24 and 192.0.2/24
            "192.0.3.1",       //
            "192.1.0.1",       //
            "8.0.0.1",         // their second and third octets only
            "8.8.0.8",         // a third octet of 0 only
            "8.0.2.1",         // 192.0.2/24's second and third octets only
            "8.8.2.8",         // a third octet of 2 only
            "192.88.98.1",     // around 192.88.99/24
            "192.89.99.1",     //
            "8.88.99.1",       // its second and third octets only
            "8.8.99.8",        // its third octet only
            "192.167.255.255", // around 192.168/16
            "192.169.0.1",     //
            "8.168.0.1",       // its second octet only
            "198.17.255.255",  // around 198.18/15
            "8.18.0.1",        // its second octet only
            "198.51.99.1",     // around 198.51.100/24
            "198.51.101.1",    //
            "198.52.100.1",    //
            "8.51.100.1",      // its second and third octets only
            "8.8.100.8",       // its third octet only
            "203.0.112.1",     // around 203.0.113/24
            "203.0.114.1",     //
            "203.1.113.1",     //
            "8.0.113.1",       // its second and third octets only
            "8.8.113.8",       // its third octet only
            "223.255.255.255", // below 224/4
        ] {
            assert!(public(address), "{address}");
        }
    }

    /// An IPv6 address that embeds an IPv4 one is judged by that address,
    /// read in network order: each pair below would swap its answer if the
    /// embedded address were read with its segments or bytes swapped.
    #[test]
    fn embedded_ipv4_addresses_are_read_in_network_order() {
        for (address, is_public) in [
            ("::ffff:1.0.0.10", true),     // 10.0.0.1 backwards
            ("::ffff:192.168.1.1", false), // 1.1.192.168 swapped
            ("::1.0.0.10", true),
            ("::192.168.1.1", false),
            ("64:ff9b::100:a", true),     // NAT64, 1.0.0.10
            ("64:ff9b::c0a8:101", false), // 192.168.1.1
            ("2002:100:a::1", true),      // 6to4, 1.0.0.10
            ("2002:c0a8:101::1", false),
        ] {
            assert_eq!(public(address), is_public, "{address}");
        }
    }

    #[test]
    fn every_non_public_range_is_refused() {
        for address in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "127.0.0.1",
            "127.255.255.254",
            "100.64.0.1",
            "100.127.255.255",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.1",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.19.255.255",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:a00:1::1",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "fec0::1",
            "ff02::1",
            "2001:db8::1",
            "2001:0:4136:e378::1",
            "100::1",
        ] {
            assert!(!public(address), "{address}");
        }
    }

    #[test]
    fn urls_must_be_https_to_a_public_host_unless_private_is_allowed() {
        assert!(check_url("https://hooks.example.com/in?x=1", false).is_ok());
        assert_eq!(
            check_url("http://hooks.example.com/in", false),
            Err(DestinationRefused::Scheme)
        );
        assert!(check_url("http://hooks.example.com/in", true).is_ok());
        assert_eq!(
            check_url("ftp://hooks.example.com/in", true),
            Err(DestinationRefused::Scheme)
        );
        for private in [
            "https://127.0.0.1/in",
            "https://[::1]/in",
            "https://169.254.169.254/latest/meta-data",
            "https://localhost/in",
            "https://api.localhost./in",
            "https://10.1.2.3:8443/in",
            "https://0x7f000001/in",
        ] {
            assert_eq!(
                check_url(private, false),
                Err(DestinationRefused::PrivateAddress),
                "{private}"
            );
            assert!(check_url(private, true).is_ok(), "{private}");
        }
        for malformed in [
            "not a url",
            "/relative",
            "https://user:pass@hooks.example.com/",
            "https://user@hooks.example.com/",
        ] {
            assert_eq!(
                check_url(malformed, true),
                Err(DestinationRefused::Malformed),
                "{malformed}"
            );
        }
        let base = "https://hooks.example.com/";
        let longest = format!("{base}{}", "a".repeat(MAX_URL_LEN - base.len()));
        assert!(
            check_url(&longest, false).is_ok(),
            "the longest URL accepted"
        );
        let long = format!("https://hooks.example.com/{}", "a".repeat(MAX_URL_LEN));
        assert_eq!(check_url(&long, false), Err(DestinationRefused::Malformed));
    }
}
