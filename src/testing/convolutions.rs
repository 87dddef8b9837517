//! Convolutions against candle's conv2d: the output and every gradient of a convolution on
//! random inputs, for tests of the convolution paths (host, unfolded, implicit).

use candle_core::{DType, Tensor, Var};

use super::tensors::{assert_close, uniform, values};

/// The output and the input, filter and bias gradients of `conv(x, weight, bias)` (its
/// result weighted by fixed values, so every output element carries its own gradient), on
/// a non-square board with a `k` x `k` kernel; every value in f32.
pub fn conv_and_gradients(
    k: usize,
    seed: u64,
    conv: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
) -> [Vec<f32>; 4] {
    conv_and_gradients_of((3, 4, 5, 6, 7), k, seed, conv)
}

/// [`conv_and_gradients`] for `b` samples of `c` channels on an `h` x `w` board, convolved
/// into `o` channels.
pub fn conv_and_gradients_of(
    (b, c, h, w, o): (usize, usize, usize, usize, usize),
    k: usize,
    seed: u64,
    conv: impl Fn(&Tensor, &Tensor, &Tensor) -> Tensor,
) -> [Vec<f32>; 4] {
    let x = Var::from_tensor(&uniform(&[b, c, h, w], 1.0, seed)).unwrap();
    let weight = Var::from_tensor(&uniform(&[o, c, k, k], 1.0, seed + 10)).unwrap();
    let bias = Var::from_tensor(&uniform(&[o], 1.0, seed + 20)).unwrap();
    let mix = uniform(&[b, o, h, w], 1.0, seed + 30);
    let y = conv(x.as_tensor(), weight.as_tensor(), bias.as_tensor())
        .to_dtype(DType::F32)
        .unwrap();
    let grads = (&y * &mix).unwrap().sum_all().unwrap().backward().unwrap();
    let g = |v: &Var| values(grads.get(v.as_tensor()).unwrap());
    [values(&y), g(&x), g(&weight), g(&bias)]
}

/// candle's own conv2d with the bias added: the reference.
pub fn candle_conv(x: &Tensor, weight: &Tensor, bias: &Tensor) -> Tensor {
    let k = weight.dim(2).unwrap();
    x.conv2d(weight, k / 2, 1, 1, 1)
        .unwrap()
        .broadcast_add(&bias.reshape((1, (), 1, 1)).unwrap())
        .unwrap()
}

/// `ours` against `theirs` (output, input, filter and bias gradients), the output and
/// input gradients within `tolerances.0`, the filter and bias gradients within
/// `tolerances.1`.
pub fn assert_all_close(
    ours: &[Vec<f32>; 4],
    theirs: &[Vec<f32>; 4],
    tolerances: (f32, f32),
    what: &str,
) {
    let names = [
        "outputs",
        "input gradients",
        "filter gradients",
        "bias gradients",
    ];
    for (i, name) in names.iter().enumerate() {
        let tolerance = if i < 2 { tolerances.0 } else { tolerances.1 };
        assert_close(&ours[i], &theirs[i], tolerance, &format!("{what}: {name}"));
    }
}
