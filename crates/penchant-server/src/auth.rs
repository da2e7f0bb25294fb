//! Authentication: Algolia's credentials, in headers or (as `search-insights` sends them) in the
//! query string, checked against the app's keys; ACLs checked per route.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use penchant_engine::tenancy::{Acl, Principal};

use crate::AppState;
use crate::error::{ApiError, ErrorKind};

const APP_HEADER: &str = "x-algolia-application-id";
const KEY_HEADER: &str = "x-algolia-api-key";

fn invalid_credentials() -> ApiError {
    ApiError::kind(ErrorKind::Unauthorized, "Invalid credentials")
}

/// Algolia's 403, saying which ACL the key lacks.
fn lacks(acl: Acl) -> ApiError {
    let name = serde_json::to_value(acl)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{acl:?}"));
    ApiError::kind(
        ErrorKind::Forbidden,
        format!("Method not allowed with this API key: it lacks the ACL `{name}`"),
    )
}

/// The application ID and API key of a request: headers first, then query parameters (names
/// compared case-insensitively, as Algolia does).
fn credentials(parts: &Parts) -> (Option<String>, Option<String>) {
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let query: Vec<(String, String)> = Query::try_from_uri(&parts.uri)
        .map(|Query(q)| q)
        .unwrap_or_default();
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    (
        header(APP_HEADER).or_else(|| param(APP_HEADER)),
        header(KEY_HEADER).or_else(|| param(KEY_HEADER)),
    )
}

/// Whether a key has the shape of Algolia's secured API keys: base64 of a 64-hex-digit HMAC
/// followed by URL-encoded restrictions.
fn is_secured_key(key: &str) -> bool {
    use base64::Engine as _;
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(key) else {
        return false;
    };
    bytes.len() > 64 && bytes[..64].iter().all(u8::is_ascii_hexdigit) && bytes[64..].contains(&b'=')
}

/// The authenticated caller of an app-scoped route. The app comes from the credentials, never
/// from the body.
#[derive(Debug)]
pub struct Auth(pub Principal);

impl Auth {
    /// The caller, if its key grants `acl`; else 403 naming the ACL.
    pub fn require(&self, acl: Acl) -> Result<&Principal, ApiError> {
        if self.0.allows(acl) {
            Ok(&self.0)
        } else {
            Err(lacks(acl))
        }
    }
}

impl FromRequestParts<AppState> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let (Some(app), Some(key)) = credentials(parts) else {
            return Err(invalid_credentials());
        };
        let Some(principal) = state.engine.authenticate(&app, &key).await? else {
            return Err(if is_secured_key(&key) {
                ApiError::kind(
                    ErrorKind::Unauthorized,
                    "Invalid credentials: secured API keys (generateSecuredApiKey) are not \
                     supported: Penchant stores keys hashed and cannot check their signature; \
                     use a key with only the ACLs the caller needs, and pass filters or the \
                     userToken in the request",
                )
            } else {
                invalid_credentials()
            });
        };
        if let Some(limit) = principal.rate_limit {
            let now = penchant_store::validate::now_micros() as u64 / 1_000_000;
            let verdict = state
                .rate_limiter
                .hit(limit.key, limit.per_hour, parts, now);
            crate::context::set_rate(verdict);
            if !verdict.allowed {
                return Err(ApiError::kind(
                    ErrorKind::TooManyRequests,
                    format!(
                        "Too many requests: this API key allows {} requests per IP address per \
                         hour; retry after the time in Retry-After",
                        limit.per_hour
                    ),
                ));
            }
        }
        Ok(Auth(principal))
    }
}

/// A caller holding the global admin key (managing apps).
#[derive(Debug)]
pub struct GlobalAdmin;

impl FromRequestParts<AppState> for GlobalAdmin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match credentials(parts).1 {
            Some(key) if state.engine.is_global_admin(&key) => Ok(GlobalAdmin),
            _ if !state.engine.has_global_admin() => Err(ApiError::kind(
                ErrorKind::Unauthorized,
                "Invalid credentials: this node has no admin key, so no key can manage apps; \
                 start it with one (auth.admin_key, PENCHANT_AUTH__ADMIN_KEY)",
            )),
            _ => Err(invalid_credentials()),
        }
    }
}

/// May the caller read `app_id`'s settings (its layout, its placement): the global admin key,
/// or a key of that app with ACL `settings`?
pub fn may_read_app(
    app_id: &str,
    admin: Result<GlobalAdmin, ApiError>,
    auth: Result<Auth, ApiError>,
) -> Result<(), ApiError> {
    if admin.is_ok() {
        return Ok(());
    }
    let caller = auth?;
    if caller.require(Acl::Settings)?.app_id != app_id {
        return Err(ApiError::kind(
            ErrorKind::Forbidden,
            "Method not allowed with this API key: it is a key of another app",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn secured_keys_are_told_apart() {
        let hmac = "9f".repeat(32);
        let secured = base64::engine::general_purpose::STANDARD
            .encode(format!("{hmac}filters=brand%3AApple&validUntil=1795000000"));
        assert!(is_secured_key(&secured));
        for other in ["69c008466856c91063e625cbbb62a7a4", "", "not base64!", &hmac] {
            assert!(!is_secured_key(other), "{other}");
        }
    }
}
