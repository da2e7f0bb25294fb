//! Row keys: every row of an app starts with [`app_prefix`], so an app's data is one contiguous
//! key range in every table — what multi-tenancy, deletion of an app and data residency
//! (placing an app's prefix in a region's store) rest on.

/// The key prefix of every row of `app`: its ID and a 0 byte, so that no app's prefix is a
/// prefix of another's (app IDs never contain a 0 byte).
pub fn app_prefix(app: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(app.len() + 1);
    key.extend_from_slice(app.as_bytes());
    key.push(0);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_prefixes_never_nest() {
        let a = app_prefix("APP");
        let b = app_prefix("APP2");
        assert!(!b.starts_with(&a) && !a.starts_with(&b));
        assert!(a < b, "apps sort like their IDs");
    }
}
