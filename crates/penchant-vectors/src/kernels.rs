//! The inner loops: dot product, squared distance, norm and `axpy` over `f32` slices.
//!
//! Every score, every top-k scan and every conjugate-gradient step in this crate ends in one of
//! these four loops, so they are written once, with SIMD. The workspace denies `unsafe`, which
//! rules out `std::arch` intrinsics; [`pulp`] gives a safe API over them and picks the widest
//! instruction set the CPU has at run time (AVX2+FMA, AVX-512 when built with it, NEON, or a
//! portable fallback), so one binary runs everywhere at full speed. Each loop keeps four vector
//! accumulators so that consecutive fused multiply-adds do not wait on each other.
//!
//! The SIMD sums are associated differently from a left-to-right scalar loop, so results differ
//! from [`dot_naive`] in the last bits; the property tests bound that difference.

use std::sync::LazyLock;

use pulp::{Arch, Simd, WithSimd};

/// The instruction set detected once at first use.
static ARCH: LazyLock<Arch> = LazyLock::new(Arch::new);

/// The dot product `Σ aᵢbᵢ`.
///
/// The slices must have the same length (checked in debug builds; in release builds the extra
/// elements of the longer slice are ignored).
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len(), "dot of slices of different lengths");
    ARCH.dispatch(Dot { a, b })
}

/// The squared Euclidean distance `Σ (aᵢ − bᵢ)²`; lengths as for [`dot`].
#[inline]
pub fn squared_distance(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(
        a.len(),
        b.len(),
        "distance between slices of different lengths"
    );
    ARCH.dispatch(SquaredDistance { a, b })
}

/// The Euclidean norm `√Σ aᵢ²`.
#[inline]
pub fn norm(a: &[f32]) -> f32 {
    dot(a, a).sqrt()
}

/// `y += alpha · x`; lengths as for [`dot`].
#[inline]
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len(), "axpy over slices of different lengths");
    ARCH.dispatch(Axpy { alpha, x, y });
}

/// The dot product as a plain left-to-right loop: the reference the SIMD version is tested and
/// benchmarked against.
pub fn dot_naive(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len(), "dot of slices of different lengths");
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// [`squared_distance`] as a plain loop, for tests.
pub fn squared_distance_naive(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(
        a.len(),
        b.len(),
        "distance between slices of different lengths"
    );
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// [`axpy`] as a plain loop, for tests.
pub fn axpy_naive(alpha: f32, x: &[f32], y: &mut [f32]) {
    debug_assert_eq!(x.len(), y.len(), "axpy over slices of different lengths");
    for (y, x) in y.iter_mut().zip(x) {
        *y += alpha * x;
    }
}

/// Cuts two slices to their common length.
#[inline(always)]
fn common<'a>(a: &'a [f32], b: &'a [f32]) -> (&'a [f32], &'a [f32]) {
    let n = a.len().min(b.len());
    (&a[..n], &b[..n])
}

/// Runs `op` on the instruction set detected at first use.
///
/// Loops that call the kernels once per row (a top-k scan, an ALS half-step) run whole inside
/// one dispatch and call the `*_simd` helpers below, which inline into the caller: dispatching
/// per call costs a feature check and an indirect call that is never inlined, which dominated
/// short rows.
#[inline]
pub(crate) fn dispatch<W: WithSimd>(op: W) -> W::Output {
    ARCH.dispatch(op)
}

/// [`dot`] on a given back end, inlined into the caller.
#[inline(always)]
pub(crate) fn dot_simd<S: Simd>(simd: S, a: &[f32], b: &[f32]) -> f32 {
    let (a, b) = common(a, b);
    let (a_head, a_tail) = S::as_simd_f32s(a);
    let (b_head, b_tail) = S::as_simd_f32s(b);
    let zero = simd.splat_f32s(0.0);
    let mut acc = [zero; 4];
    let a_quads = a_head.chunks_exact(4);
    let b_quads = b_head.chunks_exact(4);
    let (a_rest, b_rest) = (a_quads.remainder(), b_quads.remainder());
    for (x, y) in a_quads.zip(b_quads) {
        acc[0] = simd.mul_add_e_f32s(x[0], y[0], acc[0]);
        acc[1] = simd.mul_add_e_f32s(x[1], y[1], acc[1]);
        acc[2] = simd.mul_add_e_f32s(x[2], y[2], acc[2]);
        acc[3] = simd.mul_add_e_f32s(x[3], y[3], acc[3]);
    }
    // The leftover vectors go to different accumulators, so they do not wait on each other.
    for (acc, (x, y)) in acc.iter_mut().zip(a_rest.iter().zip(b_rest)) {
        *acc = simd.mul_add_e_f32s(*x, *y, *acc);
    }
    let sum = simd.add_f32s(simd.add_f32s(acc[0], acc[1]), simd.add_f32s(acc[2], acc[3]));
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    simd.reduce_sum_f32s(sum) + tail
}

/// [`squared_distance`] on a given back end, inlined into the caller.
#[inline(always)]
pub(crate) fn squared_distance_simd<S: Simd>(simd: S, a: &[f32], b: &[f32]) -> f32 {
    let (a, b) = common(a, b);
    let (a_head, a_tail) = S::as_simd_f32s(a);
    let (b_head, b_tail) = S::as_simd_f32s(b);
    let zero = simd.splat_f32s(0.0);
    let mut acc = [zero; 4];
    let a_quads = a_head.chunks_exact(4);
    let b_quads = b_head.chunks_exact(4);
    let (a_rest, b_rest) = (a_quads.remainder(), b_quads.remainder());
    for (x, y) in a_quads.zip(b_quads) {
        for lane in 0..4 {
            let d = simd.sub_f32s(x[lane], y[lane]);
            acc[lane] = simd.mul_add_e_f32s(d, d, acc[lane]);
        }
    }
    for (acc, (x, y)) in acc.iter_mut().zip(a_rest.iter().zip(b_rest)) {
        let d = simd.sub_f32s(*x, *y);
        *acc = simd.mul_add_e_f32s(d, d, *acc);
    }
    let sum = simd.add_f32s(simd.add_f32s(acc[0], acc[1]), simd.add_f32s(acc[2], acc[3]));
    let tail: f32 = a_tail
        .iter()
        .zip(b_tail)
        .map(|(x, y)| (x - y) * (x - y))
        .sum();
    simd.reduce_sum_f32s(sum) + tail
}

/// [`axpy`] on a given back end, inlined into the caller.
#[inline(always)]
pub(crate) fn axpy_simd<S: Simd>(simd: S, alpha: f32, x: &[f32], y: &mut [f32]) {
    let n = x.len().min(y.len());
    let (x_head, x_tail) = S::as_simd_f32s(&x[..n]);
    let (y_head, y_tail) = S::as_mut_simd_f32s(&mut y[..n]);
    let a = simd.splat_f32s(alpha);
    for (y, x) in y_head.iter_mut().zip(x_head) {
        *y = simd.mul_add_e_f32s(a, *x, *y);
    }
    for (y, x) in y_tail.iter_mut().zip(x_tail) {
        *y += alpha * x;
    }
}

struct Dot<'a> {
    a: &'a [f32],
    b: &'a [f32],
}

impl WithSimd for Dot<'_> {
    type Output = f32;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> f32 {
        dot_simd(simd, self.a, self.b)
    }
}

struct SquaredDistance<'a> {
    a: &'a [f32],
    b: &'a [f32],
}

impl WithSimd for SquaredDistance<'_> {
    type Output = f32;

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> f32 {
        squared_distance_simd(simd, self.a, self.b)
    }
}

struct Axpy<'a> {
    alpha: f32,
    x: &'a [f32],
    y: &'a mut [f32],
}

impl WithSimd for Axpy<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        axpy_simd(simd, self.alpha, self.x, self.y);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ramp(n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|i| (i as f32 * 0.37 - 3.0) * scale).collect()
    }

    #[test]
    fn dot_matches_the_reference_on_every_tail_length() {
        for n in 0..80 {
            let (a, b) = (ramp(n, 1.0), ramp(n, -0.5));
            let (fast, slow) = (dot(&a, &b), dot_naive(&a, &b));
            let scale: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            assert!(
                (fast - slow).abs() <= 1e-5 * scale.max(1.0),
                "n={n}: {fast} vs {slow}"
            );
        }
    }

    /// Checks the kernels on one back end against the plain loops.
    fn check_back_end<S: Simd>(simd: S) {
        for n in 0..140 {
            let (a, b) = (ramp(n, 1.0), ramp(n, -0.5));
            let scale: f32 = a.iter().zip(&b).map(|(x, y)| (x * y).abs()).sum();
            let d = simd.vectorize(Dot { a: &a, b: &b });
            assert!(
                (d - dot_naive(&a, &b)).abs() <= 1e-5 * scale.max(1.0),
                "dot, n={n}"
            );
            let s = simd.vectorize(SquaredDistance { a: &a, b: &b });
            let want = squared_distance_naive(&a, &b);
            assert!((s - want).abs() <= 1e-5 * want.max(1.0), "distance, n={n}");
            let mut y = b.clone();
            simd.vectorize(Axpy {
                alpha: 0.5,
                x: &a,
                y: &mut y,
            });
            let mut want = b.clone();
            axpy_naive(0.5, &a, &mut want);
            for (got, want) in y.iter().zip(&want) {
                assert!(
                    (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                    "axpy, n={n}"
                );
            }
        }
    }

    #[test]
    fn portable_back_ends_of_every_width_match_the_reference() {
        // 1, 4, 8 and 16 lanes: the code paths of CPUs other than this one (no SIMD, NEON,
        // AVX2, AVX-512) run here too.
        check_back_end(pulp::Scalar);
        check_back_end(pulp::Scalar128b);
        check_back_end(pulp::Scalar256b);
        check_back_end(pulp::Scalar512b);
    }

    #[test]
    fn squared_distance_of_known_vectors() {
        assert_eq!(squared_distance(&[1.0, 2.0, 3.0], &[1.0, 0.0, 7.0]), 20.0);
        assert_eq!(squared_distance(&[], &[]), 0.0);
    }

    #[test]
    fn norm_of_a_3_4_5_triangle() {
        assert_eq!(norm(&[3.0, 4.0]), 5.0);
    }

    #[test]
    fn axpy_adds_a_scaled_vector() {
        let x = ramp(37, 1.0);
        let mut y = ramp(37, 2.0);
        let mut expected = y.clone();
        axpy_naive(0.5, &x, &mut expected);
        axpy(0.5, &x, &mut y);
        for (got, want) in y.iter().zip(&expected) {
            assert!(
                (got - want).abs() <= 1e-5 * want.abs().max(1.0),
                "{got} vs {want}"
            );
        }
    }
}
