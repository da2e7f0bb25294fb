//! Algolia's per-key rate limit, `maxQueriesPerIPPerHour`: a key with a limit answers at most
//! that many requests per client per clock hour, then `429` until the hour ends.
//!
//! The client is the request's `X-Algolia-UserToken` when it sends one (as Algolia counts), else
//! its peer IP address. Counts are kept per node, in memory: with several nodes behind a load
//! balancer, a client can reach the limit on each. Responses to a limited key carry
//! `x-ratelimit-limit`, `x-ratelimit-remaining` and `x-ratelimit-reset` (Unix seconds), and a
//! `429` carries `Retry-After` — the headers the clients read when present
//! ([`crate::context`] sets them).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;

use axum::extract::ConnectInfo;
use axum::http::request::Parts;

/// The most clients a node tracks before it forgets those of past hours.
const PRUNE_AT: usize = 100_000;

/// Who a request counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Client {
    UserToken(String),
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

/// Per-(key, client) counts of the current hour.
#[derive(Debug, Default)]
pub struct RateLimiter {
    counts: Mutex<HashMap<(u64, Client), (u64, u32)>>,
}

impl RateLimiter {
    /// Count a request of `key` (an id of the key) from `parts`' client against `limit` per
    /// hour, at `now` (Unix seconds).
    pub fn hit(&self, key: u64, limit: u32, parts: &Parts, now: u64) -> Verdict {
        let hour = now / 3600;
        let reset = (hour + 1) * 3600;
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if counts.len() >= PRUNE_AT {
            counts.retain(|_, (h, _)| *h == hour);
        }
        let entry = counts.entry((key, client(parts))).or_insert((hour, 0));
        if entry.0 != hour {
            *entry = (hour, 0);
        }
        let allowed = entry.1 < limit;
        if allowed {
            entry.1 += 1;
        }
        Verdict {
            limit,
            remaining: limit - entry.1,
            reset,
            allowed,
        }
    }
}

fn client(parts: &Parts) -> Client {
    if let Some(token) = parts
        .headers
        .get("x-algolia-usertoken")
        .and_then(|v| v.to_str().ok())
        .filter(|t| !t.is_empty())
    {
        return Client::UserToken(token.to_owned());
    }
    match parts.extensions.get::<ConnectInfo<SocketAddr>>() {
        Some(ConnectInfo(addr)) => Client::Ip(addr.ip()),
        None => Client::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(ip: [u8; 4], token: Option<&str>) -> Parts {
        let mut request = axum::http::Request::builder();
        if let Some(t) = token {
            request = request.header("X-Algolia-UserToken", t);
        }
        let (mut parts, _) = request.body(()).unwrap().into_parts();
        parts
            .extensions
            .insert(ConnectInfo(SocketAddr::from((ip, 4000))));
        parts
    }

    #[test]
    fn each_client_gets_its_hour() {
        let limiter = RateLimiter::default();
        let now = 7200 * 1000 + 10;
        let a = parts([10, 0, 0, 1], None);
        let b = parts([10, 0, 0, 2], None);
        let v = limiter.hit(1, 2, &a, now);
        assert_eq!(
            (v.allowed, v.remaining, v.reset),
            (true, 1, 7200 * 1000 + 3600)
        );
        assert!(limiter.hit(1, 2, &a, now).allowed);
        let v = limiter.hit(1, 2, &a, now);
        assert_eq!((v.allowed, v.remaining), (false, 0));
        // Another IP, another key, a user token: their own counts.
        assert!(limiter.hit(1, 2, &b, now).allowed);
        assert!(limiter.hit(2, 2, &a, now).allowed);
        let t = parts([10, 0, 0, 1], Some("alice"));
        assert!(limiter.hit(1, 2, &t, now).allowed);
        // The next hour starts again.
        assert!(limiter.hit(1, 2, &a, now + 3600).allowed);
    }
}
