//! Random CPU tensors and their comparison, for tests of tensor code.

use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng};

/// A CPU f32 tensor of `shape` with values uniform in `(-bound, bound)`, drawn from a
/// generator seeded with `seed`.
pub fn uniform(shape: &[usize], bound: f32, seed: u64) -> Tensor {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|_| rng.random_range(-bound..bound)).collect();
    Tensor::from_vec(v, shape, &Device::Cpu).expect("a tensor of its own length")
}

/// Every value of `t` (any shape, any float dtype) as f32, in order.
pub fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(candle_core::DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .expect("a float tensor")
}

/// The largest |a_i - b_i| of two equally long vectors.
pub fn max_abs_difference(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "vectors of different lengths");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Asserts that no |a_i - b_i| reaches `tolerance`, naming `what` and the largest difference.
pub fn assert_close(a: &[f32], b: &[f32], tolerance: f32, what: &str) {
    let difference = max_abs_difference(a, b);
    assert!(
        difference < tolerance,
        "{what} differ by {difference} (tolerance {tolerance})"
    );
}
