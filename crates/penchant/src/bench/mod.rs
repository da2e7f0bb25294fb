//! Benchmarks that print tables: each workload beside a reference run in the same process.

pub mod bloom;
pub mod personalization;
pub mod store;

/// Format a rate with thousands separators.
pub fn rate(n: f64) -> String {
    let n = n.round() as u64;
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
