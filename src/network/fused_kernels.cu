// CUDA kernels of the fused ops in fused.rs (f32): layer norm and its backward, bias add and
// the column sums its backward needs, ReLU and its backward, and the soft-target
// cross-entropy and its backward; and a convolution's patches (im2col) and their adjoint for
// network::unfold. Each computes what the CPU kernel of the same op computes
// (fused.rs), so one op (one tensor) replaces the dozen that the written-out forms issue.
//
// Row kernels run one warp per row (blockDim = (32, ROWS_PER_BLOCK)): every lane of a warp
// has the same row, so a warp leaves together and the shuffles see all 32 lanes. Column sums
// run one thread per (column, row phase) and add the phases in a fixed order, so results do
// not depend on scheduling (no atomics): a seed reproduces a run on a GPU too.
//
// The bias add, its column sums and ReLU also come in bf16 (computed in f32, rounded once),
// since bf16 is CUDA's default compute dtype here.
//
// Compiled to PTX by build.rs with the `cuda` feature; loaded at the first call on each device
// (`CudaDevice::get_or_load_custom_func`).

#include <stdint.h>
#include <cuda_bf16.h>

#define WARP 32
// Rows of a column sum that each of its row phases adds up (the block is WARP x PHASES).
#define PHASES 32

__device__ __forceinline__ float warp_sum(float v) {
    for (int offset = WARP / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int offset = WARP / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

__device__ __forceinline__ float widen(float v) { return v; }
__device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T narrow(float v);
template <> __device__ __forceinline__ float narrow<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) {
    return __float2bfloat16(v);
}

// Mean and 1 / sqrt(var + eps) of one row of d values, all lanes of the warp taking part.
__device__ __forceinline__ void row_statistics(const float *row, int d, float eps, float *mean,
                                               float *rstd) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += WARP) {
        s += row[i];
    }
    const float m = warp_sum(s) / (float)d;
    float q = 0.0f;
    for (int i = threadIdx.x; i < d; i += WARP) {
        const float c = row[i] - m;
        q += c * c;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(warp_sum(q) / (float)d + eps);
}

// out = (x - mean) / sqrt(var + eps) * gamma + beta, per row of d.
extern "C" __global__ void cumind_layer_norm_f32(const float *x, const float *gamma,
                                                 const float *beta, float *out, int rows, int d,
                                                 float eps) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const float *xr = x + (size_t)row * d;
    float *o = out + (size_t)row * d;
    float mean, rstd;
    row_statistics(xr, d, eps, &mean, &rstd);
    for (int i = threadIdx.x; i < d; i += WARP) {
        o[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
    }
}

// The input gradient of the layer norm, per row: with g = dy * gamma and xhat the
// standardised row, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). Writes each row's mean
// and rstd to stats[2 * row], stats[2 * row + 1] for the column kernel below.
extern "C" __global__ void cumind_layer_norm_backward_rows_f32(const float *dy, const float *x,
                                                               const float *gamma, float *dx,
                                                               float *stats, int rows, int d,
                                                               float eps) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const float *xr = x + (size_t)row * d;
    const float *dyr = dy + (size_t)row * d;
    float *dxr = dx + (size_t)row * d;
    float mean, rstd;
    row_statistics(xr, d, eps, &mean, &rstd);
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int i = threadIdx.x; i < d; i += WARP) {
        const float g = dyr[i] * gamma[i];
        sum_g += g;
        sum_gx += g * (xr[i] - mean) * rstd;
    }
    const float mean_g = warp_sum(sum_g) / (float)d;
    const float mean_gx = warp_sum(sum_gx) / (float)d;
    for (int i = threadIdx.x; i < d; i += WARP) {
        const float xhat = (xr[i] - mean) * rstd;
        dxr[i] = rstd * (dyr[i] * gamma[i] - mean_g - xhat * mean_gx);
    }
    if (threadIdx.x == 0) {
        stats[2 * row] = mean;
        stats[2 * row + 1] = rstd;
    }
}

// Column sums over the rows, for column j = blockIdx.x * WARP + threadIdx.x: thread phase p =
// threadIdx.y adds rows p, p + PHASES, ...; the phases are then added in order. With
// WITH_XHAT: dgamma[j] = sum dy * xhat and sums[j] = sum dy (the layer norm's parameter
// gradients, xhat from x and the row statistics); without: sums[j] = sum dy.
template <bool WITH_XHAT, typename T>
__device__ __forceinline__ void column_sums(const T *dy, const float *x, const float *stats,
                                            float *dgamma, T *sums, int rows, int d) {
    __shared__ float part_xhat[PHASES][WARP];
    __shared__ float part_sum[PHASES][WARP];
    const int j = blockIdx.x * WARP + threadIdx.x;
    float s_xhat = 0.0f, s = 0.0f;
    if (j < d) {
        for (int r = threadIdx.y; r < rows; r += PHASES) {
            const float g = widen(dy[(size_t)r * d + j]);
            s += g;
            if (WITH_XHAT) {
                s_xhat += g * (x[(size_t)r * d + j] - stats[2 * r]) * stats[2 * r + 1];
            }
        }
    }
    part_xhat[threadIdx.y][threadIdx.x] = s_xhat;
    part_sum[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        float total_xhat = 0.0f, total = 0.0f;
        for (int p = 0; p < PHASES; ++p) {
            total_xhat += part_xhat[p][threadIdx.x];
            total += part_sum[p][threadIdx.x];
        }
        if (WITH_XHAT) {
            dgamma[j] = total_xhat;
        }
        sums[j] = narrow<T>(total);
    }
}

// The layer norm's scale and shift gradients (blockDim = (WARP, PHASES)).
extern "C" __global__ void cumind_layer_norm_param_grads_f32(const float *dy, const float *x,
                                                             const float *stats, float *dgamma,
                                                             float *dbeta, int rows, int d) {
    column_sums<true, float>(dy, x, stats, dgamma, dbeta, rows, d);
}

// sums[j] = sum over rows of g[row, j] (blockDim = (WARP, PHASES)): the bias's gradient,
// accumulated in f32.
extern "C" __global__ void cumind_sum_rows_f32(const float *g, float *sums, int rows, int d) {
    column_sums<false, float>(g, NULL, NULL, NULL, sums, rows, d);
}

extern "C" __global__ void cumind_sum_rows_bf16(const __nv_bfloat16 *g, __nv_bfloat16 *sums,
                                                int rows, int d) {
    column_sums<false, __nv_bfloat16>(g, NULL, NULL, NULL, sums, rows, d);
}

#define GRID_STRIDE(i, n)                                                                      \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

// out[i] = y[i] + b[i % d].
template <typename T> __device__ void bias_add(const T *y, const T *b, T *out, size_t n, int d) {
    GRID_STRIDE(i, n) { out[i] = narrow<T>(widen(y[i]) + widen(b[i % d])); }
}

// out = max(x, 0).
template <typename T> __device__ void relu(const T *x, T *out, size_t n) {
    GRID_STRIDE(i, n) { out[i] = widen(x[i]) > 0.0f ? x[i] : narrow<T>(0.0f); }
}

// The gradient passes where x >= 0 (as candle's ReLU backward does).
template <typename T> __device__ void relu_backward(const T *grad, const T *x, T *out, size_t n) {
    GRID_STRIDE(i, n) { out[i] = widen(x[i]) >= 0.0f ? grad[i] : narrow<T>(0.0f); }
}

extern "C" __global__ void cumind_bias_add_f32(const float *y, const float *b, float *out,
                                               size_t n, int d) {
    bias_add<float>(y, b, out, n, d);
}
extern "C" __global__ void cumind_bias_add_bf16(const __nv_bfloat16 *y, const __nv_bfloat16 *b,
                                                __nv_bfloat16 *out, size_t n, int d) {
    bias_add<__nv_bfloat16>(y, b, out, n, d);
}
extern "C" __global__ void cumind_relu_f32(const float *x, float *out, size_t n) {
    relu<float>(x, out, n);
}
extern "C" __global__ void cumind_relu_bf16(const __nv_bfloat16 *x, __nv_bfloat16 *out,
                                            size_t n) {
    relu<__nv_bfloat16>(x, out, n);
}
extern "C" __global__ void cumind_relu_backward_f32(const float *grad, const float *x, float *out,
                                                    size_t n) {
    relu_backward<float>(grad, x, out, n);
}
extern "C" __global__ void cumind_relu_backward_bf16(const __nv_bfloat16 *grad,
                                                     const __nv_bfloat16 *x,
                                                     __nv_bfloat16 *out, size_t n) {
    relu_backward<__nv_bfloat16>(grad, x, out, n);
}

// Maximum and log-sum-exp of one row of n logits, all lanes taking part.
__device__ __forceinline__ float row_log_sum_exp(const float *row, int n) {
    float m = -INFINITY;
    for (int i = threadIdx.x; i < n; i += WARP) {
        m = fmaxf(m, row[i]);
    }
    m = warp_max(m);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += WARP) {
        s += expf(row[i] - m);
    }
    return m + logf(warp_sum(s));
}

// out[row] = sum_i targets_i * (lse - logits_i) = -sum_i targets_i * log_softmax(logits)_i.
extern "C" __global__ void cumind_soft_cross_entropy_f32(const float *logits,
                                                         const float *targets, float *out,
                                                         int rows, int n) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const float *l = logits + (size_t)row * n;
    const float *t = targets + (size_t)row * n;
    const float lse = row_log_sum_exp(l, n);
    float s = 0.0f;
    for (int i = threadIdx.x; i < n; i += WARP) {
        s += t[i] * (lse - l[i]);
    }
    s = warp_sum(s);
    if (threadIdx.x == 0) {
        out[row] = s;
    }
}

// out = grad[row] * (softmax(logits) * sum(targets) - targets), per row.
extern "C" __global__ void cumind_soft_cross_entropy_backward_f32(const float *grad,
                                                                  const float *logits,
                                                                  const float *targets,
                                                                  float *out, int rows, int n) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const float *l = logits + (size_t)row * n;
    const float *t = targets + (size_t)row * n;
    float *o = out + (size_t)row * n;
    const float lse = row_log_sum_exp(l, n);
    float mass = 0.0f;
    for (int i = threadIdx.x; i < n; i += WARP) {
        mass += t[i];
    }
    mass = warp_sum(mass);
    const float g = grad[row];
    for (int i = threadIdx.x; i < n; i += WARP) {
        o[i] = g * (expf(l[i] - lse) * mass - t[i]);
    }
}

// A convolution's patches and their adjoint, for a k x k kernel with "same" padding k / 2 and
// stride 1 (network::unfold). Indices are 32-bit: the caller checks that every tensor has
// fewer than 2^31 elements. candle's own im2col computes each index with 64-bit divisions,
// which made it 12 times slower than the matrix product that follows (the H200 profile in
// docs/benchmarks.md).
//
// cols[b, y * w + x, (ci * k + ky) * k + kx] = src[b, ci, y + ky - k / 2, x + kx - k / 2], 0
// outside the board.
template <typename T>
__device__ void im2col(const T *src, T *cols, int c, int h, int w, int k, size_t n) {
    const int p = k / 2;
    GRID_STRIDE(i, n) {
        int r = (int)i;
        const int kx = r % k;
        r /= k;
        const int ky = r % k;
        r /= k;
        const int ci = r % c;
        r /= c;
        const int x = r % w;
        r /= w;
        const int y = r % h;
        const int b = r / h;
        const int sy = y + ky - p;
        const int sx = x + kx - p;
        cols[i] = (sy >= 0 && sy < h && sx >= 0 && sx < w)
                      ? src[((b * c + ci) * h + sy) * w + sx]
                      : narrow<T>(0.0f);
    }
}

// The adjoint of im2col: dx[b, ci, y, x] = the sum of the patch entries that copied it,
// added in a fixed order (ky, kx), so the result does not depend on scheduling.
template <typename T>
__device__ void col2im(const T *cols, T *dx, int c, int h, int w, int k, size_t n) {
    const int kk = k * k;
    const int p = k / 2;
    GRID_STRIDE(i, n) {
        int r = (int)i;
        const int x = r % w;
        r /= w;
        const int y = r % h;
        r /= h;
        const int ci = r % c;
        const int b = r / c;
        float s = 0.0f;
        for (int ky = 0; ky < k; ++ky) {
            const int oy = y - ky + p;
            if (oy < 0 || oy >= h) {
                continue;
            }
            for (int kx = 0; kx < k; ++kx) {
                const int ox = x - kx + p;
                if (ox < 0 || ox >= w) {
                    continue;
                }
                s += widen(cols[((b * h + oy) * w + ox) * c * kk + ci * kk + ky * k + kx]);
            }
        }
        dx[i] = narrow<T>(s);
    }
}

extern "C" __global__ void cumind_im2col_f32(const float *src, float *cols, int c, int h, int w,
                                             int k, size_t n) {
    im2col<float>(src, cols, c, h, w, k, n);
}
extern "C" __global__ void cumind_im2col_bf16(const __nv_bfloat16 *src, __nv_bfloat16 *cols,
                                              int c, int h, int w, int k, size_t n) {
    im2col<__nv_bfloat16>(src, cols, c, h, w, k, n);
}
extern "C" __global__ void cumind_col2im_f32(const float *cols, float *dx, int c, int h, int w,
                                             int k, size_t n) {
    col2im<float>(cols, dx, c, h, w, k, n);
}
extern "C" __global__ void cumind_col2im_bf16(const __nv_bfloat16 *cols, __nv_bfloat16 *dx,
                                              int c, int h, int w, int k, size_t n) {
    col2im<__nv_bfloat16>(cols, dx, c, h, w, k, n);
}
