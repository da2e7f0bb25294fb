//! How sure a test's difference is, on users (the unit the test splits): a share of users who
//! clicked, converted, added to cart or bought is compared with a two-sided two-proportion
//! z-test (pooled), revenue per user with Welch's z-test; each significance is `1 − p` (0.95
//! or more: significant at 5%). The normal distribution is statrs'.
//!
//! How many users a variant needs to detect the conversion difference seen so far, at α = 0.05
//! (two-sided) with a power of 0.8: `n = (z₀.₉₇₅·√(2p̄(1−p̄)) + z₀.₈·√(p₁(1−p₁)+p₂(1−p₂)))² /
//! (p₁−p₂)²` (the normal approximation).

use std::collections::BTreeMap;

use statrs::distribution::{ContinuousCDF, Normal};

use super::Counts;

fn normal() -> Normal {
    Normal::standard()
}

/// `1 − p` of a two-sided two-proportion z-test: `x₁` of `n₁` against `x₂` of `n₂`. `None`
/// while a side has no one, or when neither side differs from 0 or 1 (no spread to test).
pub fn two_proportions(x1: i64, n1: i64, x2: i64, n2: i64) -> Option<f64> {
    if n1 <= 0 || n2 <= 0 {
        return None;
    }
    let (n1f, n2f) = (n1 as f64, n2 as f64);
    let (p1, p2) = (x1.clamp(0, n1) as f64 / n1f, x2.clamp(0, n2) as f64 / n2f);
    let pooled = (p1 * n1f + p2 * n2f) / (n1f + n2f);
    let se = (pooled * (1.0 - pooled) * (1.0 / n1f + 1.0 / n2f)).sqrt();
    if se <= 0.0 || !se.is_finite() {
        return None;
    }
    Some(confidence((p2 - p1) / se))
}

/// `1 − p` of a two-sided z-test of two means, each with its variance and size (Welch's).
pub fn two_means(a: (f64, f64, i64), b: (f64, f64, i64)) -> Option<f64> {
    let ((m1, v1, n1), (m2, v2, n2)) = (a, b);
    if n1 < 2 || n2 < 2 {
        return None;
    }
    let se = (v1 / n1 as f64 + v2 / n2 as f64).sqrt();
    if se <= 0.0 || !se.is_finite() {
        return None;
    }
    Some(confidence((m2 - m1) / se))
}

/// `1 − p` for a z score, two-sided.
fn confidence(z: f64) -> f64 {
    let p = 2.0 * (1.0 - normal().cdf(z.abs()));
    (1.0 - p).clamp(0.0, 1.0)
}

/// Users each variant needs to detect rates `p1` against `p2` (see the module); `None` when
/// they are equal.
pub fn sample_size(p1: f64, p2: f64) -> Option<i64> {
    let delta = (p1 - p2).abs();
    if delta <= 0.0 || !delta.is_finite() {
        return None;
    }
    let (z_alpha, z_power) = (normal().inverse_cdf(0.975), normal().inverse_cdf(0.8));
    let mean = (p1 + p2) / 2.0;
    let n = (z_alpha * (2.0 * mean * (1.0 - mean)).sqrt()
        + z_power * (p1 * (1.0 - p1) + p2 * (1.0 - p2)).sqrt())
    .powi(2)
        / delta.powi(2);
    Some(n.ceil() as i64)
}

/// What a test's counts say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Significance {
    pub click: Option<f64>,
    pub conversion: Option<f64>,
    pub add_to_cart: Option<f64>,
    pub purchase: Option<f64>,
    /// Per currency: revenue per user.
    pub revenue: BTreeMap<String, f64>,
    /// Users each variant needs for the conversion difference seen so far.
    pub sample_size: Option<i64>,
    /// Users still to come, both variants together, for that.
    pub users_still_needed: Option<i64>,
}

/// A variant's revenue per user in a currency: mean and sample variance (cents).
pub fn revenue_per_user(counts: &Counts, currency: &str) -> Option<(f64, f64)> {
    let revenue = counts.revenue.get(currency)?;
    let n = counts.users.max(1) as f64;
    let mean = revenue.cents as f64 / n;
    let population = (revenue.squares as f64 / n - mean * mean).max(0.0);
    let variance = if n > 1.0 {
        population * n / (n - 1.0)
    } else {
        0.0
    };
    Some((mean, variance))
}

/// The significance of each difference between A and B.
pub fn of(counts: &[Counts; 2]) -> Significance {
    let [a, b] = counts;
    let test = |x: fn(&Counts) -> i64| two_proportions(x(a), a.users, x(b), b.users);
    let rate =
        |c: &Counts| (c.users > 0).then(|| c.converted_users.min(c.users) as f64 / c.users as f64);
    let sample_size = match (rate(a), rate(b)) {
        (Some(pa), Some(pb)) => sample_size(pa, pb),
        _ => None,
    };
    let currencies: std::collections::BTreeSet<&String> =
        a.revenue.keys().chain(b.revenue.keys()).collect();
    let revenue = currencies
        .into_iter()
        .filter_map(|currency| {
            let side = |c: &Counts| {
                let (mean, variance) = revenue_per_user(c, currency).unwrap_or((0.0, 0.0));
                (mean, variance, c.users)
            };
            Some((currency.clone(), two_means(side(a), side(b))?))
        })
        .collect();
    Significance {
        click: test(|c| c.clicked_users),
        conversion: test(|c| c.converted_users),
        add_to_cart: test(|c| c.add_to_cart_users),
        purchase: test(|c| c.purchase_users),
        revenue,
        sample_size,
        users_still_needed: sample_size.map(|n| (n - a.users).max(0) + (n - b.users).max(0)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_proportions_match_a_worked_example() {
        // 200/1000 against 250/1000: pooled 0.225, se 0.018675, z 2.6774, p 0.00742.
        let s = two_proportions(200, 1000, 250, 1000).unwrap();
        assert!((s - (1.0 - 0.00742)).abs() < 2e-4, "{s}");
        // Symmetric, and no difference is no significance.
        assert_eq!(s, two_proportions(250, 1000, 200, 1000).unwrap());
        assert!(two_proportions(100, 1000, 100, 1000).unwrap() < 1e-9);
        assert_eq!(two_proportions(0, 10, 0, 10), None);
        assert_eq!(two_proportions(1, 0, 0, 10), None);
    }

    #[test]
    fn sample_sizes_match_the_textbook() {
        // 10% against 12%: 3,841 per group (the normal approximation, α 0.05, power 0.8).
        let n = sample_size(0.10, 0.12).unwrap();
        assert!((3830..=3850).contains(&n), "{n}");
        assert!(sample_size(0.10, 0.20).unwrap() < n);
        assert_eq!(sample_size(0.1, 0.1), None);
    }

    #[test]
    fn welch_on_means() {
        // Means 10 and 11, variances 4, 100 each: se = sqrt(0.08) → z 3.5355, p 0.000407.
        let s = two_means((10.0, 4.0, 100), (11.0, 4.0, 100)).unwrap();
        assert!((s - (1.0 - 0.000407)).abs() < 1e-5, "{s}");
        assert_eq!(two_means((1.0, 0.0, 10), (1.0, 0.0, 10)), None);
    }
}
