//! The SIMD kernels against plain loops, for every length up to a few vector widths past 256.

use penchant_vectors::kernels::{
    axpy, axpy_naive, dot, dot_naive, norm, squared_distance, squared_distance_naive,
};
use proptest::prelude::*;

/// Two vectors of the same length, 0..300, with values of mixed sign and magnitude.
fn pair() -> impl Strategy<Value = (Vec<f32>, Vec<f32>)> {
    (0usize..300).prop_flat_map(|n| {
        let value = -100.0f32..100.0;
        (
            prop::collection::vec(value.clone(), n),
            prop::collection::vec(value, n),
        )
    })
}

/// The bound on the difference between two summation orders: relative to the sum of the
/// absolute terms, which is what rounding error scales with.
fn close(got: f32, want: f32, magnitude: f32) -> bool {
    (got - want).abs() <= 1e-4 * magnitude + 1e-6
}

proptest! {
    #[test]
    fn dot_matches_the_scalar_reference((a, b) in pair()) {
        let magnitude: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
        let (got, want) = (dot(&a, &b), dot_naive(&a, &b));
        prop_assert!(close(got, want, magnitude), "{} vs {}", got, want);
    }

    #[test]
    fn squared_distance_matches_the_scalar_reference((a, b) in pair()) {
        let want = squared_distance_naive(&a, &b);
        let got = squared_distance(&a, &b);
        prop_assert!(close(got, want, want), "{} vs {}", got, want);
        prop_assert!(got >= 0.0);
    }

    #[test]
    fn norm_matches_the_scalar_reference((a, _) in pair()) {
        let want = dot_naive(&a, &a).sqrt();
        let got = norm(&a);
        prop_assert!(close(got, want, want), "{} vs {}", got, want);
    }

    #[test]
    fn axpy_matches_the_scalar_reference((x, y) in pair(), alpha in -10.0f32..10.0) {
        let mut got = y.clone();
        let mut want = y.clone();
        axpy(alpha, &x, &mut got);
        axpy_naive(alpha, &x, &mut want);
        for i in 0..x.len() {
            let magnitude = (alpha * x[i]).abs() + y[i].abs();
            prop_assert!(close(got[i], want[i], magnitude), "[{}] {} vs {}", i, got[i], want[i]);
        }
    }
}
