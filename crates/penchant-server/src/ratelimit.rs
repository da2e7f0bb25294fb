//! Algolia's per-key rate limit, `maxQueriesPerIPPerHour`: a key with a limit answers at most
//! that many requests per client per clock hour, then `429` until the hour ends.
//!
//! The client is the request's peer IP address (an IPv6 address counts by its /64, the block a
//! single host is usually given). Headers a caller chooses never make a new client — rotating
//! `X-Algolia-UserToken` would lift the limit — except from a **trusted proxy**
//! ([`RateLimitConfig::trusted_proxies`]): a backend that calls on behalf of its users sets
//! `X-Algolia-UserToken` (as Algolia counts for such backends) or `X-Forwarded-For`, and the
//! client is that user token, else the last address in `X-Forwarded-For` that is not itself a
//! trusted proxy.
//!
//! Counts are kept per node, in memory: with several nodes behind a load balancer, a client can
//! reach the limit on each. The table holds at most [`RateLimitConfig::max_clients`] (key,
//! client) counts: when full, counts of past hours go first, then the least recently seen tenth.
//! A user token is kept as a 64-bit hash, whatever its length. Responses to a limited key carry
//! `x-ratelimit-limit`, `x-ratelimit-remaining` and `x-ratelimit-reset` (Unix seconds), and a
//! `429` carries `Retry-After` — the headers the clients read when present
//! ([`crate::context`] sets them).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;

use axum::extract::ConnectInfo;
use axum::http::request::Parts;

/// The default of [`RateLimitConfig::max_clients`].
pub const MAX_CLIENTS: usize = 100_000;

/// Whom the rate limits trust, and how much they remember.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// Peers whose `X-Algolia-UserToken` or `X-Forwarded-For` names the client (a backend or
    /// reverse proxy of yours); from any other peer, the client is the peer's address.
    pub trusted_proxies: Vec<IpAddr>,
    /// The most (key, client) counts a node keeps.
    pub max_clients: usize,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            trusted_proxies: Vec::new(),
            max_clients: MAX_CLIENTS,
        }
    }
}

/// Who a request counts against: fixed-size, whatever the request sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    /// A user token (hashed) given by a trusted proxy.
    UserToken(u64),
    Ip(IpAddr),
    Unknown,
}

/// What a request left of its key's hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub limit: u32,
    pub remaining: u32,
    /// Unix seconds when the hour ends.
    pub reset: u64,
    pub allowed: bool,
}

/// One (key, client)'s count.
#[derive(Debug, Clone, Copy)]
struct Count {
    hour: u64,
    count: u32,
    /// When it was last hit (for eviction): a sequence number.
    seen: u64,
}

#[derive(Debug, Default)]
struct Table {
    counts: HashMap<(u64, Client), Count>,
    /// Hits so far: the clock of `Count::seen`.
    hits: u64,
}

/// Per-(key, client) counts of the current hour.
#[derive(Debug, Default)]
pub struct RateLimiter {
    config: RateLimitConfig,
    table: Mutex<Table>,
}

impl RateLimiter {
    pub fn new(config: RateLimitConfig) -> Self {
        Self {
            config,
            table: Mutex::default(),
        }
    }

    /// Count a request of `key` (an id of the key) from `parts`' client against `limit` per
    /// hour, at `now` (Unix seconds).
    pub fn hit(&self, key: u64, limit: u32, parts: &Parts, now: u64) -> Verdict {
        let client = self.client(parts);
        let hour = now / 3600;
        let reset = (hour + 1) * 3600;
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.hits += 1;
        let seen = table.hits;
        if !table.counts.contains_key(&(key, client)) {
            self.make_room(&mut table, hour);
        }
        let entry = table.counts.entry((key, client)).or_insert(Count {
            hour,
            count: 0,
            seen,
        });
        if entry.hour != hour {
            *entry = Count {
                hour,
                count: 0,
                seen,
            };
        }
        entry.seen = seen;
        let allowed = entry.count < limit;
        if allowed {
            entry.count += 1;
        }
        Verdict {
            limit,
            remaining: limit - entry.count,
            reset,
            allowed,
        }
    }

    /// How many (key, client) counts the node holds.
    pub fn len(&self) -> usize {
        let table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        table.counts.len()
    }

    /// Whether the node holds no count.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Before a new count: at the cap, forget past hours, then the least recently seen tenth.
    fn make_room(&self, table: &mut Table, hour: u64) {
        let cap = self.config.max_clients.max(1);
        if table.counts.len() < cap {
            return;
        }
        table.counts.retain(|_, c| c.hour == hour);
        if table.counts.len() < cap {
            return;
        }
        let mut seen: Vec<u64> = table.counts.values().map(|c| c.seen).collect();
        let cut = (cap / 10).max(1).min(seen.len() - 1);
        let (_, threshold, _) = seen.select_nth_unstable(cut);
        let threshold = *threshold;
        table.counts.retain(|_, c| c.seen > threshold);
    }

    /// Who a request counts against (see the module documentation).
    fn client(&self, parts: &Parts) -> Client {
        let Some(ConnectInfo(peer)) = parts.extensions.get::<ConnectInfo<SocketAddr>>() else {
            return Client::Unknown;
        };
        let peer = peer.ip().to_canonical();
        if !self.config.trusted_proxies.contains(&peer) {
            return Client::Ip(block(peer));
        }
        let header = |name: &str| {
            parts
                .headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect::<Vec<_>>()
        };
        if let Some(token) = header("x-algolia-usertoken")
            .first()
            .map(|t| t.trim())
            .filter(|t| !t.is_empty())
        {
            return Client::UserToken(xxhash_rust::xxh3::xxh3_64(token.as_bytes()));
        }
        // The last hop that is not one of ours: what our nearest proxy saw.
        let forwarded = header("x-forwarded-for")
            .iter()
            .flat_map(|v| v.split(','))
            .rev()
            .map_while(|a| a.trim().parse::<IpAddr>().ok())
            .map(|a| a.to_canonical())
            .find(|a| !self.config.trusted_proxies.contains(a));
        Client::Ip(block(forwarded.unwrap_or(peer)))
    }
}

/// The address a client counts as: an IPv4 address, or an IPv6 address' /64.
fn block(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(ip: IpAddr, headers: &[(&str, &str)]) -> Parts {
        let mut request = axum::http::Request::builder();
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let (mut parts, _) = request.body(()).unwrap().into_parts();
        parts
            .extensions
            .insert(ConnectInfo(SocketAddr::new(ip, 4000)));
        parts
    }

    fn v4(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    const NOW: u64 = 7200 * 1000 + 10;

    #[test]
    fn each_client_gets_its_hour() {
        let limiter = RateLimiter::default();
        let a = parts(v4(1), &[]);
        let b = parts(v4(2), &[]);
        let v = limiter.hit(1, 2, &a, NOW);
        assert_eq!(
            (v.allowed, v.remaining, v.reset),
            (true, 1, 7200 * 1000 + 3600)
        );
        assert!(limiter.hit(1, 2, &a, NOW).allowed);
        let v = limiter.hit(1, 2, &a, NOW);
        assert_eq!((v.allowed, v.remaining), (false, 0));
        // Another IP, another key: their own counts.
        assert!(limiter.hit(1, 2, &b, NOW).allowed);
        assert!(limiter.hit(2, 2, &a, NOW).allowed);
        // The next hour starts again.
        assert!(limiter.hit(1, 2, &a, NOW + 3600).allowed);
    }

    /// Issue 29, item 7: a user token of the caller's choosing lifted the limit.
    #[test]
    fn headers_name_the_client_only_from_trusted_proxies() {
        let limiter = RateLimiter::default();
        for i in 0..6 {
            let (name, value) = match i % 2 {
                0 => ("X-Algolia-UserToken", format!("token-{i}")),
                _ => ("X-Forwarded-For", format!("192.0.2.{i}")),
            };
            let p = parts(v4(1), &[(name, &value)]);
            assert_eq!(limiter.hit(1, 2, &p, NOW).allowed, i < 2, "{i}");
        }
        // One IPv6 host: one /64, whatever address it picks in it.
        for i in 0..3u16 {
            let ip = IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, i]);
            assert_eq!(limiter.hit(1, 2, &parts(ip, &[]), NOW).allowed, i < 2);
        }

        let proxy = v4(100);
        let limiter = RateLimiter::new(RateLimitConfig {
            trusted_proxies: vec![proxy, v4(101)],
            ..RateLimitConfig::default()
        });
        let via = |headers: &[(&str, &str)]| parts(proxy, headers);
        assert!(
            limiter
                .hit(1, 1, &via(&[("X-Algolia-UserToken", "alice")]), NOW)
                .allowed
        );
        assert!(
            !limiter
                .hit(1, 1, &via(&[("X-Algolia-UserToken", "alice")]), NOW)
                .allowed
        );
        assert!(
            limiter
                .hit(1, 1, &via(&[("X-Algolia-UserToken", "bob")]), NOW)
                .allowed
        );
        // X-Forwarded-For: the last address that is not a trusted proxy; forged ones before it
        // do not count.
        let xff = |v: &str| via(&[("X-Forwarded-For", v)]);
        assert!(
            limiter
                .hit(1, 1, &xff("192.0.2.1, 10.0.0.101"), NOW)
                .allowed
        );
        assert!(
            !limiter
                .hit(1, 1, &xff("198.51.100.7, 192.0.2.1"), NOW)
                .allowed
        );
        assert!(limiter.hit(1, 1, &xff("192.0.2.2"), NOW).allowed);
        // Nothing forwarded: the proxy itself.
        assert!(limiter.hit(1, 1, &via(&[]), NOW).allowed);
        assert!(!limiter.hit(1, 1, &via(&[]), NOW).allowed);
    }

    /// Issue 29, item 7: the table grew with every client (40,000 tokens of 8 KB: +319 MB).
    #[test]
    fn the_table_stays_under_its_cap() {
        let cap = 1_000;
        let limiter = RateLimiter::new(RateLimitConfig {
            max_clients: cap,
            ..RateLimitConfig::default()
        });
        let long = "x".repeat(8 << 10);
        let proxy = v4(1);
        let trusting = RateLimiter::new(RateLimitConfig {
            trusted_proxies: vec![proxy],
            max_clients: cap,
        });
        let recent = IpAddr::from([192, 0, 2, 1]);
        for i in 0..2 * cap as u32 {
            let ip = IpAddr::from((0xc600_0000u32 + i).to_be_bytes());
            assert!(limiter.hit(1, 10, &parts(ip, &[]), NOW).allowed);
            assert!(limiter.len() <= cap, "{} after {i}", limiter.len());
            let token = format!("{long}{i}");
            let p = parts(proxy, &[("X-Algolia-UserToken", &token)]);
            assert!(trusting.hit(1, 10, &p, NOW).allowed);
            assert!(trusting.len() <= cap, "{} after {i}", trusting.len());
            // A client seen all along keeps its count.
            limiter.hit(2, 1_000_000, &parts(recent, &[]), NOW);
        }
        let v = limiter.hit(2, 1_000_000, &parts(recent, &[]), NOW);
        assert_eq!(v.remaining, 1_000_000 - 2 * cap as u32 - 1);
    }

    #[test]
    fn counts_of_past_hours_go_first() {
        let limiter = RateLimiter::new(RateLimitConfig {
            max_clients: 10,
            ..RateLimitConfig::default()
        });
        for i in 0..10 {
            limiter.hit(1, 10, &parts(v4(i), &[]), NOW);
        }
        assert_eq!(limiter.len(), 10);
        limiter.hit(1, 10, &parts(v4(9), &[]), NOW + 3600);
        assert_eq!(limiter.len(), 10, "a known client takes no room");
        limiter.hit(1, 10, &parts(v4(10), &[]), NOW + 3600);
        assert_eq!(limiter.len(), 2, "only this hour's counts are left");
    }
}
