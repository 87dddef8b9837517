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
// The bias add, its column sums, ReLU, the layer norm (with f32 scale and shift) and the
// min-max scaling also come in bf16 (computed in f32, rounded once), since bf16 is CUDA's
// default compute dtype here; the convolution's bf16 kernel (at the end of this file) runs on
// the tensor cores.
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
template <typename T>
__device__ __forceinline__ void row_statistics(const T *row, int d, float eps, float *mean,
                                               float *rstd) {
    float s = 0.0f;
    for (int i = threadIdx.x; i < d; i += WARP) {
        s += widen(row[i]);
    }
    const float m = warp_sum(s) / (float)d;
    float q = 0.0f;
    for (int i = threadIdx.x; i < d; i += WARP) {
        const float c = widen(row[i]) - m;
        q += c * c;
    }
    *mean = m;
    *rstd = 1.0f / sqrtf(warp_sum(q) / (float)d + eps);
}

// out = (x - mean) / sqrt(var + eps) * gamma + beta, per row of d; x and out f32 or bf16
// (statistics in f32), gamma and beta f32.
template <typename T>
__device__ void layer_norm(const T *x, const float *gamma, const float *beta, T *out, int rows,
                           int d, float eps) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const T *xr = x + (size_t)row * d;
    T *o = out + (size_t)row * d;
    float mean, rstd;
    row_statistics(xr, d, eps, &mean, &rstd);
    for (int i = threadIdx.x; i < d; i += WARP) {
        o[i] = narrow<T>((widen(xr[i]) - mean) * rstd * gamma[i] + beta[i]);
    }
}

extern "C" __global__ void cumind_layer_norm_f32(const float *x, const float *gamma,
                                                 const float *beta, float *out, int rows, int d,
                                                 float eps) {
    layer_norm<float>(x, gamma, beta, out, rows, d, eps);
}
extern "C" __global__ void cumind_layer_norm_bf16(const __nv_bfloat16 *x, const float *gamma,
                                                  const float *beta, __nv_bfloat16 *out, int rows,
                                                  int d, float eps) {
    layer_norm<__nv_bfloat16>(x, gamma, beta, out, rows, d, eps);
}

// The layer norm followed by what a residual network does next, for inference: out =
// relu?(residual? + layer_norm(x)), one pass where the written-out form is two or three (the
// norm, the add, the ReLU), each over the whole batch. The scale and shift hold one value per
// `group` consecutive features (a conv net's plane norm: one per channel, group = H * W; 1:
// one per feature), so they need not be spread over the board first. residual is read only
// when add_residual is set (then it has x's shape); the sum and the ReLU are taken in f32 and
// the result rounded once.
template <typename T>
__device__ void layer_norm_act(const T *x, const T *residual, const float *gamma,
                               const float *beta, T *out, int rows, int d, int group, float eps,
                               int add_residual, int relu) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const T *xr = x + (size_t)row * d;
    const T *rr = residual + (size_t)row * d;
    T *o = out + (size_t)row * d;
    float mean, rstd;
    row_statistics(xr, d, eps, &mean, &rstd);
    for (int i = threadIdx.x; i < d; i += WARP) {
        const int g = i / group;
        float v = (widen(xr[i]) - mean) * rstd * gamma[g] + beta[g];
        if (add_residual) {
            v += widen(rr[i]);
        }
        if (relu) {
            v = fmaxf(v, 0.0f);
        }
        o[i] = narrow<T>(v);
    }
}

extern "C" __global__ void cumind_layer_norm_act_f32(const float *x, const float *residual,
                                                     const float *gamma, const float *beta,
                                                     float *out, int rows, int d, int group,
                                                     float eps, int add_residual, int relu) {
    layer_norm_act<float>(x, residual, gamma, beta, out, rows, d, group, eps, add_residual,
                          relu);
}
extern "C" __global__ void cumind_layer_norm_act_bf16(const __nv_bfloat16 *x,
                                                      const __nv_bfloat16 *residual,
                                                      const float *gamma, const float *beta,
                                                      __nv_bfloat16 *out, int rows, int d,
                                                      int group, float eps, int add_residual,
                                                      int relu) {
    layer_norm_act<__nv_bfloat16>(x, residual, gamma, beta, out, rows, d, group, eps,
                                  add_residual, relu);
}

// The same in bf16 with 16-byte loads and stores (8 values a lane at a time), for rows whose
// length is a multiple of 8 and whose pointers (x, residual, out) are 16-byte aligned: the
// scalar loads above move 64 bytes per warp instruction, these 512.
__device__ __forceinline__ void unpack8(uint4 u, float *v) {
    const __nv_bfloat162 *p = reinterpret_cast<const __nv_bfloat162 *>(&u);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(p[j]);
        v[2 * j] = f.x;
        v[2 * j + 1] = f.y;
    }
}

extern "C" __global__ void cumind_layer_norm_act_bf16x8(const __nv_bfloat16 *x,
                                                        const __nv_bfloat16 *residual,
                                                        const float *gamma, const float *beta,
                                                        __nv_bfloat16 *out, int rows, int d,
                                                        int group, float eps, int add_residual,
                                                        int relu) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const int n8 = d / 8;
    const uint4 *xr = reinterpret_cast<const uint4 *>(x + (size_t)row * d);
    const uint4 *rr = reinterpret_cast<const uint4 *>(residual + (size_t)row * d);
    uint4 *o = reinterpret_cast<uint4 *>(out + (size_t)row * d);
    float v[8];
    float s = 0.0f;
    for (int i = threadIdx.x; i < n8; i += WARP) {
        unpack8(xr[i], v);
#pragma unroll
        for (int j = 0; j < 8; ++j) s += v[j];
    }
    const float mean = warp_sum(s) / (float)d;
    float q = 0.0f;
    for (int i = threadIdx.x; i < n8; i += WARP) {
        unpack8(xr[i], v);
#pragma unroll
        for (int j = 0; j < 8; ++j) q += (v[j] - mean) * (v[j] - mean);
    }
    const float rstd = 1.0f / sqrtf(warp_sum(q) / (float)d + eps);
    for (int i = threadIdx.x; i < n8; i += WARP) {
        unpack8(xr[i], v);
        float r[8];
        if (add_residual) {
            unpack8(rr[i], r);
        }
        uint4 packed;
        __nv_bfloat162 *p = reinterpret_cast<__nv_bfloat162 *>(&packed);
        // The group of the word's first value; later values may cross into the next groups.
        int g = (8 * i) / group;
        int left = group - (8 * i - g * group);
        float y[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (left == 0) {
                ++g;
                left = group;
            }
            --left;
            float value = (v[j] - mean) * rstd * gamma[g] + beta[g];
            if (add_residual) {
                value += r[j];
            }
            y[j] = relu ? fmaxf(value, 0.0f) : value;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            p[j] = __floats2bfloat162_rn(y[2 * j], y[2 * j + 1]);
        }
        o[i] = packed;
    }
}

// The input gradient of the layer norm, per row: with g = dy * gamma and xhat the
// standardised row, dx = rstd * (g - mean(g) - xhat * mean(g * xhat)). Writes each row's mean
// and rstd to stats[2 * row], stats[2 * row + 1] for the column kernel below. dy and x f32 or
// bf16; dx always f32 (packed with the f32 parameter gradients).
template <typename T>
__device__ void layer_norm_backward_rows(const T *dy, const T *x, const float *gamma, float *dx,
                                         float *stats, int rows, int d, float eps) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const T *xr = x + (size_t)row * d;
    const T *dyr = dy + (size_t)row * d;
    float *dxr = dx + (size_t)row * d;
    float mean, rstd;
    row_statistics(xr, d, eps, &mean, &rstd);
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int i = threadIdx.x; i < d; i += WARP) {
        const float g = widen(dyr[i]) * gamma[i];
        sum_g += g;
        sum_gx += g * (widen(xr[i]) - mean) * rstd;
    }
    const float mean_g = warp_sum(sum_g) / (float)d;
    const float mean_gx = warp_sum(sum_gx) / (float)d;
    for (int i = threadIdx.x; i < d; i += WARP) {
        const float xhat = (widen(xr[i]) - mean) * rstd;
        dxr[i] = rstd * (widen(dyr[i]) * gamma[i] - mean_g - xhat * mean_gx);
    }
    if (threadIdx.x == 0) {
        stats[2 * row] = mean;
        stats[2 * row + 1] = rstd;
    }
}

extern "C" __global__ void cumind_layer_norm_backward_rows_f32(const float *dy, const float *x,
                                                               const float *gamma, float *dx,
                                                               float *stats, int rows, int d,
                                                               float eps) {
    layer_norm_backward_rows<float>(dy, x, gamma, dx, stats, rows, d, eps);
}
extern "C" __global__ void cumind_layer_norm_backward_rows_bf16(const __nv_bfloat16 *dy,
                                                                const __nv_bfloat16 *x,
                                                                const float *gamma, float *dx,
                                                                float *stats, int rows, int d,
                                                                float eps) {
    layer_norm_backward_rows<__nv_bfloat16>(dy, x, gamma, dx, stats, rows, d, eps);
}

// Column sums over the rows, for column j = blockIdx.x * WARP + threadIdx.x: thread phase p =
// threadIdx.y adds rows p, p + PHASES, ...; the phases are then added in order. With
// WITH_XHAT: dgamma[j] = sum dy * xhat and sums[j] = sum dy (the layer norm's parameter
// gradients, xhat from x and the row statistics); without: sums[j] = sum dy.
template <bool WITH_XHAT, typename T, typename S>
__device__ __forceinline__ void column_sums(const T *dy, const T *x, const float *stats,
                                            float *dgamma, S *sums, int rows, int d) {
    __shared__ float part_xhat[PHASES][WARP];
    __shared__ float part_sum[PHASES][WARP];
    const int j = blockIdx.x * WARP + threadIdx.x;
    float s_xhat = 0.0f, s = 0.0f;
    if (j < d) {
        for (int r = threadIdx.y; r < rows; r += PHASES) {
            const float g = widen(dy[(size_t)r * d + j]);
            s += g;
            if (WITH_XHAT) {
                s_xhat += g * (widen(x[(size_t)r * d + j]) - stats[2 * r]) * stats[2 * r + 1];
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
        sums[j] = narrow<S>(total);
    }
}

// The layer norm's scale and shift gradients (blockDim = (WARP, PHASES)).
extern "C" __global__ void cumind_layer_norm_param_grads_f32(const float *dy, const float *x,
                                                             const float *stats, float *dgamma,
                                                             float *dbeta, int rows, int d) {
    column_sums<true, float, float>(dy, x, stats, dgamma, dbeta, rows, d);
}
extern "C" __global__ void cumind_layer_norm_param_grads_bf16(const __nv_bfloat16 *dy,
                                                              const __nv_bfloat16 *x,
                                                              const float *stats, float *dgamma,
                                                              float *dbeta, int rows, int d) {
    column_sums<true, __nv_bfloat16, float>(dy, x, stats, dgamma, dbeta, rows, d);
}

// sums[j] = sum over rows of g[row, j] (blockDim = (WARP, PHASES)): the bias's gradient,
// accumulated in f32.
extern "C" __global__ void cumind_sum_rows_f32(const float *g, float *sums, int rows, int d) {
    column_sums<false, float, float>(g, NULL, NULL, NULL, sums, rows, d);
}

extern "C" __global__ void cumind_sum_rows_bf16(const __nv_bfloat16 *g, __nv_bfloat16 *sums,
                                                int rows, int d) {
    column_sums<false, __nv_bfloat16, __nv_bfloat16>(g, NULL, NULL, NULL, sums, rows, d);
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

// The same two kernels with the kernel size fixed at compile time (1, 3 or 5: the divisions
// by k become multiplications), for the common sizes.
// One thread per patch entry (n entries), the kernel size fixed: the f32 kernels. (One
// thread per row and channel, below, ran f32 convolutions 1.3 times slower on an H200 and
// bf16 ones faster.)
template <int K, typename T>
__device__ void im2col_e(const T *src, T *cols, int c, int h, int w, size_t n) {
    const int p = K / 2;
    const int hw = h * w;
    GRID_STRIDE(i, n) {
        const int entries = c * K * K;
        const int row = (int)i / entries;
        const int e = (int)i - row * entries;
        const int ci = e / (K * K);
        const int r = e - ci * (K * K);
        const int ky = r / K;
        const int kx = r - ky * K;
        const int b = row / hw;
        const int pos = row - b * hw;
        const int y = pos / w;
        const int x = pos - y * w;
        const int sy = y + ky - p;
        const int sx = x + kx - p;
        cols[i] = (sy >= 0 && sy < h && sx >= 0 && sx < w)
                      ? src[((b * c + ci) * h + sy) * w + sx]
                      : narrow<T>(0.0f);
    }
}

template <int K, typename T>
__device__ void im2col_k(const T *src, T *cols, int c, int h, int w, size_t n) {
    // One thread per (patch row, channel): its K * K entries are neighbours in the row, and
    // neighbouring threads' entries follow each other, so a warp writes one contiguous span.
    // n is the number of (row, channel) pairs.
    const int p = K / 2;
    const int hw = h * w;
    GRID_STRIDE(i, n) {
        const int row = (int)i / c;
        const int ci = (int)i - row * c;
        const int b = row / hw;
        const int pos = row - b * hw;
        const int y = pos / w;
        const int x = pos - y * w;
        const T *plane = src + (size_t)(b * c + ci) * hw;
        T *out = cols + (size_t)row * (c * K * K) + ci * (K * K);
#pragma unroll
        for (int ky = 0; ky < K; ++ky) {
            const int sy = y + ky - p;
#pragma unroll
            for (int kx = 0; kx < K; ++kx) {
                const int sx = x + kx - p;
                out[ky * K + kx] = (sy >= 0 && sy < h && sx >= 0 && sx < w) ? plane[sy * w + sx]
                                                                           : narrow<T>(0.0f);
            }
        }
    }
}

// bf16 patches 8 entries (16 bytes) at a time, for rows of a multiple of 8 entries (C * K * K,
// so 16-byte aligned rows): one thread per (patch row, 8-entry chunk), each gathering its
// entries and writing them in one 16-byte store, so a warp writes 512 contiguous bytes. (The
// kernel above writes each entry with its own 2-byte store, at an 18-byte stride between
// threads for K = 3.) n is the number of chunks.
template <int K>
__device__ void im2col_k_x8(const __nv_bfloat16 *src, uint4 *cols, int c, int h, int w,
                            size_t n) {
    const int p = K / 2;
    const int hw = h * w;
    const int chunks = c * K * K / 8;
    GRID_STRIDE(i, n) {
        const int row = (int)(i / chunks);
        const int chunk = (int)(i - (size_t)row * chunks);
        const int b = row / hw;
        const int pos = row - b * hw;
        const int y = pos / w;
        const int x = pos - y * w;
        const int first = chunk * 8;
        int ci = first / (K * K);
        int r = first - ci * (K * K);
        __align__(16) __nv_bfloat16 v[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int ky = r / K;
            const int kx = r - ky * K;
            const int sy = y + ky - p;
            const int sx = x + kx - p;
            v[j] = (sy >= 0 && sy < h && sx >= 0 && sx < w)
                       ? src[((size_t)(b * c + ci) * h + sy) * w + sx]
                       : __float2bfloat16(0.0f);
            if (++r == K * K) {
                r = 0;
                ++ci;
            }
        }
        cols[i] = *reinterpret_cast<const uint4 *>(v);
    }
}

template <int K, typename T>
__device__ void col2im_k(const T *cols, T *dx, int c, int h, int w, size_t n) {
    const int p = K / 2;
    const int hw = h * w;
    GRID_STRIDE(i, n) {
        const int plane = (int)i / hw;
        const int pos = (int)i - plane * hw;
        const int y = pos / w;
        const int x = pos - y * w;
        const int ci = plane % c;
        const int b = plane / c;
        float s = 0.0f;
#pragma unroll
        for (int ky = 0; ky < K; ++ky) {
            const int oy = y - ky + p;
#pragma unroll
            for (int kx = 0; kx < K; ++kx) {
                const int ox = x - kx + p;
                if (oy >= 0 && oy < h && ox >= 0 && ox < w) {
                    s += widen(cols[((size_t)(b * h + oy) * w + ox) * (c * K * K) + ci * (K * K) +
                                    ky * K + kx]);
                }
            }
        }
        dx[i] = narrow<T>(s);
    }
}

#define UNFOLD_K(K)                                                                            \
    extern "C" __global__ void cumind_im2col_k##K##_f32(const float *src, float *cols, int c,   \
                                                        int h, int w, int k, size_t n) {        \
        im2col_e<K, float>(src, cols, c, h, w, n);                                             \
    }                                                                                          \
    extern "C" __global__ void cumind_im2col_k##K##_bf16(const __nv_bfloat16 *src,              \
                                                         __nv_bfloat16 *cols, int c, int h,     \
                                                         int w, int k, size_t n) {              \
        im2col_k<K, __nv_bfloat16>(src, cols, c, h, w, n);                                     \
    }                                                                                          \
    extern "C" __global__ void cumind_im2col_k##K##_bf16x8(const __nv_bfloat16 *src,            \
                                                           __nv_bfloat16 *cols, int c, int h,   \
                                                           int w, int k, size_t n) {            \
        im2col_k_x8<K>(src, reinterpret_cast<uint4 *>(cols), c, h, w, n);                      \
    }                                                                                          \
    extern "C" __global__ void cumind_col2im_k##K##_f32(const float *cols, float *dx, int c,    \
                                                        int h, int w, int k, size_t n) {        \
        col2im_k<K, float>(cols, dx, c, h, w, n);                                              \
    }                                                                                          \
    extern "C" __global__ void cumind_col2im_k##K##_bf16(const __nv_bfloat16 *cols,             \
                                                         __nv_bfloat16 *dx, int c, int h,       \
                                                         int w, int k, size_t n) {              \
        col2im_k<K, __nv_bfloat16>(cols, dx, c, h, w, n);                                      \
    }
UNFOLD_K(1)
UNFOLD_K(3)
UNFOLD_K(5)

// ---------------------------------------------------------------------------------------------
// Implicit-GEMM convolution in bf16 on the tensor cores (network::unfold::conv2d_implicit).
//
// out[b, o, y, x] = bias[o] + sum over (ky, kx, ci) of
//                   w[o, ci, ky, kx] * src[b, ci, y + ky - k / 2, x + kx - k / 2]
// for a "same" k x k convolution with stride 1, src and out NCHW. As a matrix product: rows are
// the P = B * H * W positions, columns the O filters, and the reduction runs over the kernel's
// taps (ky, kx) and, within a tap, over the channels, CONV_BK at a time. The patch entries are
// gathered from src as they are needed (never written out as im2col's patches are): within one
// step every entry of a position shares the tap, so one bounds check serves the step and each
// entry is one address and one load. Products in bf16, sums in f32 (WMMA 16x16x16 fragments),
// the bias added and the result rounded once.
//
// A block computes CONV_BM positions x CONV_BN filters with 8 warps (4 x 2, 32 x 32 each); the
// next step's entries are loaded into registers while the tensor cores work on the current
// one. Needs compute capability 8.0 (bf16 WMMA); built for less, the kernel traps, and the host
// side never launches it there.

#include <mma.h>

#define CONV_BM 128
#define CONV_BN 64
#define CONV_BK 32
#define CONV_THREADS 256
// Padded leading dimensions of the shared tiles (multiples of 8 bf16 / 4 f32, as WMMA needs).
#define CONV_LDA (CONV_BM + 8)
#define CONV_LDB (CONV_BK + 8)
#define CONV_LDC (CONV_BM + 4)
// Per thread and step: pairs of A entries (two neighbouring positions, one 32-bit shared
// store) and pairs of B entries (two neighbouring channels of one filter).
#define CONV_A_PAIRS 8
#define CONV_B_PAIRS 4

// Where one position's patch starts in src, and whether it exists.
struct ConvPosition {
    int base, y, x, valid;
};

__device__ __forceinline__ ConvPosition conv_position(int p, int positions, int c, int h, int w) {
    ConvPosition q = {0, 0, 0, p < positions};
    if (q.valid) {
        const int hw = h * w;
        const int b = p / hw;
        const int r = p - b * hw;
        q.y = r / w;
        q.x = r - q.y * w;
        q.base = b * c * hw + q.y * w + q.x;
    }
    return q;
}

// The entries ci0 + a_kk + 4 j (j < CONV_A_PAIRS) of tap (dy, dx) for two positions.
__device__ __forceinline__ void conv_load_a(const __nv_bfloat16 *__restrict__ src, int ci0, int c,
                                            int hw, int h, int w, int dy, int dx,
                                            const ConvPosition &q0, const ConvPosition &q1,
                                            int a_kk, __nv_bfloat162 *regs) {
    const int shift = dy * w + dx;
    const bool in0 = q0.valid && q0.y + dy >= 0 && q0.y + dy < h && q0.x + dx >= 0 &&
                     q0.x + dx < w;
    const bool in1 = q1.valid && q1.y + dy >= 0 && q1.y + dy < h && q1.x + dx >= 0 &&
                     q1.x + dx < w;
    const int base0 = in0 ? q0.base + shift : 0;
    const int base1 = in1 ? q1.base + shift : 0;
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
#pragma unroll
    for (int j = 0; j < CONV_A_PAIRS; ++j) {
        const int ci = ci0 + a_kk + 4 * j;
        const bool ok = ci < c;
        const int offset = ok ? ci * hw : 0;
        const __nv_bfloat16 v0 = src[base0 + offset];
        const __nv_bfloat16 v1 = src[base1 + offset];
        regs[j].x = (in0 && ok) ? v0 : zero;
        regs[j].y = (in1 && ok) ? v1 : zero;
    }
}

// B[kk][n] = w[n, ci0 + kk, tap] for the pairs of entries (b_kk, b_kk + 1) of filters b_n,
// b_n + 16, ...
__device__ __forceinline__ void conv_load_b(const __nv_bfloat16 *__restrict__ wt, int ci0, int c,
                                            int kk_taps, int tap, int n0, int o, int b_kk,
                                            int b_n, __nv_bfloat162 *regs) {
    const __nv_bfloat16 zero = __float2bfloat16(0.0f);
    const int ci = ci0 + b_kk;
    const int kdim = c * kk_taps;
#pragma unroll
    for (int j = 0; j < CONV_B_PAIRS; ++j) {
        const int n = n0 + b_n + 16 * j;
        const bool row = n < o;
        const int at = (row ? n : 0) * kdim + tap;
        const __nv_bfloat16 v0 = wt[at + (ci < c ? ci : 0) * kk_taps];
        const __nv_bfloat16 v1 = wt[at + (ci + 1 < c ? ci + 1 : 0) * kk_taps];
        regs[j].x = (row && ci < c) ? v0 : zero;
        regs[j].y = (row && ci + 1 < c) ? v1 : zero;
    }
}

template <int K>
__device__ void conv_implicit(const __nv_bfloat16 *__restrict__ src,
                              const __nv_bfloat16 *__restrict__ wt,
                              const __nv_bfloat16 *__restrict__ bias, __nv_bfloat16 *__restrict__ out,
                              int positions, int c, int h, int w, int o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    __shared__ __align__(128) __nv_bfloat16 as[CONV_BK * CONV_LDA];  // A, col-major: [k][m]
    __shared__ __align__(128) __nv_bfloat16 bs[CONV_BN * CONV_LDB];  // B, col-major: [n][k]
    __shared__ __align__(128) float cs[CONV_BN * CONV_LDC];          // result: [n][m]

    const int tid = threadIdx.x;
    const int warp = tid / WARP;
    const int wm = warp / 2, wn = warp % 2;
    const int hw = h * w;
    const int m0 = blockIdx.x * CONV_BM;
    const int n0 = blockIdx.y * CONV_BN;

    // This thread's two positions for the A loads (fixed over the reduction) and its entries
    // a_kk, a_kk + 4, ... of each step.
    const int am = 2 * (tid % (CONV_BM / 2));
    const int a_kk = tid / (CONV_BM / 2);
    const ConvPosition q0 = conv_position(m0 + am, positions, c, h, w);
    const ConvPosition q1 = conv_position(m0 + am + 1, positions, c, h, w);
    // This thread's B entries: a pair of channels (b_kk, b_kk + 1) of filters b_n, b_n + 16, ...
    const int b_kk = 2 * (tid % (CONV_BK / 2));
    const int b_n = tid / (CONV_BK / 2);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    // Steps: every tap, and within it the channels CONV_BK at a time.
    const int chunks = (c + CONV_BK - 1) / CONV_BK;
    const int steps = K * K * chunks;
    __nv_bfloat162 ra[CONV_A_PAIRS], rb[CONV_B_PAIRS];
    conv_load_a(src, 0, c, hw, h, w, -(K / 2), -(K / 2), q0, q1, a_kk, ra);
    conv_load_b(wt, 0, c, K * K, 0, n0, o, b_kk, b_n, rb);
    for (int step = 0; step < steps; ++step) {
#pragma unroll
        for (int j = 0; j < CONV_A_PAIRS; ++j)
            *reinterpret_cast<__nv_bfloat162 *>(as + (a_kk + 4 * j) * CONV_LDA + am) = ra[j];
#pragma unroll
        for (int j = 0; j < CONV_B_PAIRS; ++j) {
            bs[(b_n + 16 * j) * CONV_LDB + b_kk] = rb[j].x;
            bs[(b_n + 16 * j) * CONV_LDB + b_kk + 1] = rb[j].y;
        }
        __syncthreads();
        if (step + 1 < steps) {
            const int tap = (step + 1) / chunks;
            const int ci0 = ((step + 1) - tap * chunks) * CONV_BK;
            const int ky = tap / K;
            const int kx = tap - ky * K;
            conv_load_a(src, ci0, c, hw, h, w, ky - K / 2, kx - K / 2, q0, q1, a_kk, ra);
            conv_load_b(wt, ci0, c, K * K, tap, n0, o, b_kk, b_n, rb);
        }
#pragma unroll
        for (int ks = 0; ks < CONV_BK; ks += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::col_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; ++i)
                wmma::load_matrix_sync(fa[i], as + ks * CONV_LDA + wm * 32 + i * 16, CONV_LDA);
#pragma unroll
            for (int j = 0; j < 2; ++j)
                wmma::load_matrix_sync(fb[j], bs + (wn * 32 + j * 16) * CONV_LDB + ks, CONV_LDB);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
    // The result tile, filter-major, then bias and the NCHW store: thread t writes position
    // t % 128 of filters t / 128, t / 128 + 2, ...
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(cs + (wn * 32 + j * 16) * CONV_LDC + wm * 32 + i * 16,
                                    acc[i][j], CONV_LDC, wmma::mem_col_major);
    __syncthreads();
    const int cm = tid % CONV_BM;
    const int p = m0 + cm;
    if (p < positions) {
        const int b = p / hw;
        const int r = p - b * hw;
        for (int n = tid / CONV_BM; n < CONV_BN; n += CONV_THREADS / CONV_BM) {
            const int f = n0 + n;
            if (f < o) {
                out[((size_t)b * o + f) * hw + r] =
                    __float2bfloat16(cs[n * CONV_LDC + cm] + __bfloat162float(bias[f]));
            }
        }
    }
#else
    __trap();
#endif
}

#define CONV_IMPLICIT(K)                                                                       \
    extern "C" __global__ void __launch_bounds__(CONV_THREADS, 2)                               \
        cumind_conv_implicit_k##K##_bf16(const __nv_bfloat16 *src, const __nv_bfloat16 *wt,     \
                                          const __nv_bfloat16 *bias, __nv_bfloat16 *out,        \
                                          int positions, int c, int h, int w, int o) {          \
        conv_implicit<K>(src, wt, bias, out, positions, c, h, w, o);                           \
    }
CONV_IMPLICIT(1)
CONV_IMPLICIT(3)
CONV_IMPLICIT(5)

// ---------------------------------------------------------------------------------------------
// The same convolution with the boards staged in shared memory (network::unfold's bf16 path for
// boards up to 62 cells wide with a 3x3 kernel, 29 with a 5x5).
//
// The positions are laid out as one tall padded image: every board gets PAD = K / 2 zero rows
// above it and PAD zero columns to its right, so board b's cell (y, x) sits at the flat index
// q = (b * (h + PAD) + PAD + y) * (w + PAD) + x. In that layout a tap (dy, dx) of every
// position is one fixed shift of q, dy * (w + PAD) + dx: a neighbour past the left edge lands
// in the previous row's padding, one past the right edge in this row's, one above the board
// in its padding rows and one below it in the next board's (or past the last board, where
// the staging writes zeros). So a block stages the ST_BM flat positions it computes, with
// HALO = PAD * (w + PAD) + PAD more on either side, once per 32 channels (channels innermost,
// 16-byte shared stores), and every tap's operand A is the same staged tile read from a
// shifted row: a regular matrix for the WMMA loads, with no bounds checks or address
// arithmetic inside the reduction. The price is the padding positions, computed and
// discarded (56 flat positions for the 42 cells of a 6x7 board). The filters, rearranged so
// that each filter's 32 channels of a tap are 64 contiguous bytes, are loaded one tap ahead
// into registers (one 16-byte load a thread) while the tensor cores work on the current tap.
// Products in bf16, sums in f32, the bias added and the result rounded once, NCHW in and out,
// as above. On an H200 at batch 4,096 of Connect Four boards (64 channels) it takes about 140
// us where the gathering kernel above takes 187 (docs/benchmarks.md); variants with deeper
// pipelines (16 channels a stage, the filters copied asynchronously two taps ahead) measured
// slower: the loop is bound by issuing instructions (the WMMA loads' address arithmetic), not
// by memory.

#define ST_BM 128
#define ST_BN 64
#define ST_BK 32
#define ST_THREADS 256
// The widest halo the staging has room for (the host launches the kernel above otherwise).
#define ST_HALO 64
#define ST_ROWS (ST_BM + 2 * ST_HALO)
// A staged row: 32 channels and 16 bf16 of padding, 96 bytes, so that every row a WMMA load
// starts at is 32-byte aligned.
#define ST_LDA 48
// The tap's filters, column-major ([n][k]), and the result ([n][m]).
#define ST_LDB (ST_BK + 8)
#define ST_LDC (ST_BM + 4)
#define ST_A_BYTES (ST_ROWS * ST_LDA * 2)
#define ST_B_BYTES (ST_BN * ST_LDB * 2)
#define ST_C_BYTES (ST_BN * ST_LDC * 4)
#define ST_SMEM_BYTES \
    (ST_A_BYTES + ST_B_BYTES > ST_C_BYTES ? ST_A_BYTES + ST_B_BYTES : ST_C_BYTES)

// Where flat position q of the padded image is in src (the offset of its channel 0), or -1
// for padding and positions past the last board.
__device__ __forceinline__ int staged_source(int q, int flat, int per_board, int w2, int pad,
                                             int c, int h, int w, int *y, int *x) {
    if (q < 0 || q >= flat) {
        return -1;
    }
    const int b = q / per_board;
    const int r = q - b * per_board;
    const int row = r / w2;
    *x = r - row * w2;
    *y = row - pad;
    if (*y < 0 || *x >= w) {
        return -1;
    }
    return (b * c * h + *y) * w + *x;
}

// The filters rearranged for the staged kernel: out[(n * taps + tap) * cpad + ci] =
// wt[(n * c + ci) * taps + tap], zero for ci >= c (cpad a multiple of ST_BK), so that the 32
// channels of one filter and tap are 64 contiguous bytes. One thread per entry of out.
extern "C" __global__ void cumind_conv_filters_by_tap_bf16(const __nv_bfloat16 *wt,
                                                           __nv_bfloat16 *out, int o, int c,
                                                           int taps, int cpad) {
    const size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (size_t)o * taps * cpad) {
        return;
    }
    const int ci = (int)(i % cpad);
    const size_t nt = i / cpad;
    const int tap = (int)(nt % taps);
    const int n = (int)(nt / taps);
    out[i] = ci < c ? wt[((size_t)n * c + ci) * taps + tap] : __float2bfloat16(0.0f);
}

// This thread's 8 filter entries of (ci0, tap) from the rearranged filters: filter n0 + tid / 4,
// channels ci0 + 8 (tid % 4) ... + 7, one 16-byte load (zeros past the last filter).
__device__ __forceinline__ uint4 staged_load_b(const __nv_bfloat16 *__restrict__ wt, int ci0,
                                               int cpad, int taps, int tap, int n0, int o) {
    const int n = n0 + threadIdx.x / 4;
    if (n >= o) {
        return make_uint4(0, 0, 0, 0);
    }
    return *reinterpret_cast<const uint4 *>(wt + ((size_t)n * taps + tap) * cpad + ci0 +
                                            8 * (threadIdx.x % 4));
}

template <int K>
__device__ void conv_staged(const __nv_bfloat16 *__restrict__ src,
                            const __nv_bfloat16 *__restrict__ wt,
                            const __nv_bfloat16 *__restrict__ bias, __nv_bfloat16 *__restrict__ out,
                            int boards, int c, int cpad, int h, int w, int o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    using namespace nvcuda;
    constexpr int PAD = K / 2;
    constexpr int TAPS = K * K;
    __shared__ __align__(128) unsigned char smem[ST_SMEM_BYTES];
    __nv_bfloat16 *as = reinterpret_cast<__nv_bfloat16 *>(smem);
    __nv_bfloat16 *bs = reinterpret_cast<__nv_bfloat16 *>(smem + ST_A_BYTES);
    float *cs = reinterpret_cast<float *>(smem);
    const int tid = threadIdx.x;
    const int warp = tid / WARP;
    const int wm = warp / 2, wn = warp % 2;
    const int w2 = w + PAD;
    const int per_board = (h + PAD) * w2;
    const int flat = boards * per_board;
    const int halo = PAD * w2 + PAD;
    const int rows = ST_BM + 2 * halo;
    const int hw = h * w;
    const int m0 = blockIdx.x * ST_BM;
    const int n0 = blockIdx.y * ST_BN;

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    // Steps: every 32 channels (a new staging of the rows), and within them every tap.
    const int chunks = cpad / ST_BK;
    uint4 rb = staged_load_b(wt, 0, cpad, TAPS, 0, n0, o);
    for (int chunk = 0; chunk < chunks; ++chunk) {
        const int ci0 = chunk * ST_BK;
        // Stage rows m0 - halo ... m0 + ST_BM + halo of channels ci0 ... ci0 + 31: a thread
        // takes one row and 8 channels (consecutive threads, consecutive rows: the global
        // loads of one channel are coalesced) and stores them as one 16-byte word.
        for (int task = tid; task < rows * (ST_BK / 8); task += ST_THREADS) {
            const int r = task % rows;
            const int g = task / rows;
            int y, x;
            const int at = staged_source(m0 - halo + r, flat, per_board, w2, PAD, c, h, w, &y, &x);
            union {
                uint4 word;
                __nv_bfloat16 entry[8];
            } v;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int ci = ci0 + 8 * g + j;
                v.entry[j] = (at >= 0 && ci < c) ? src[at + ci * hw] : __float2bfloat16(0.0f);
            }
            *reinterpret_cast<uint4 *>(as + r * ST_LDA + 8 * g) = v.word;
        }
        for (int tap = 0; tap < TAPS; ++tap) {
            *reinterpret_cast<uint4 *>(bs + (tid / 4) * ST_LDB + 8 * (tid % 4)) = rb;
            __syncthreads();
            // The next tap's filters (or the next chunk's first) while this one multiplies.
            if (tap + 1 < TAPS) {
                rb = staged_load_b(wt, ci0, cpad, TAPS, tap + 1, n0, o);
            } else if (chunk + 1 < chunks) {
                rb = staged_load_b(wt, ci0 + ST_BK, cpad, TAPS, 0, n0, o);
            }
            const int ky = tap / K;
            const int kx = tap - ky * K;
            const int row0 = halo + (ky - PAD) * w2 + (kx - PAD) + wm * 32;
#pragma unroll
            for (int ks = 0; ks < ST_BK; ks += 16) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa[2];
                wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb[2];
#pragma unroll
                for (int i = 0; i < 2; ++i)
                    wmma::load_matrix_sync(fa[i], as + (row0 + i * 16) * ST_LDA + ks, ST_LDA);
#pragma unroll
                for (int j = 0; j < 2; ++j)
                    wmma::load_matrix_sync(fb[j], bs + (wn * 32 + j * 16) * ST_LDB + ks, ST_LDB);
#pragma unroll
                for (int i = 0; i < 2; ++i)
#pragma unroll
                    for (int j = 0; j < 2; ++j)
                        wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
            }
            __syncthreads();
        }
    }
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(cs + (wn * 32 + j * 16) * ST_LDC + wm * 32 + i * 16,
                                    acc[i][j], ST_LDC, wmma::mem_col_major);
    __syncthreads();
    // Bias and the NCHW store: thread t writes position t % 128 of filters t / 128, + 2, ...
    const int cm = tid % ST_BM;
    int y, x;
    const int at = staged_source(m0 + cm, flat, per_board, w2, PAD, c, h, w, &y, &x);
    if (at >= 0) {
        const int b = (m0 + cm) / per_board;
        for (int n = tid / ST_BM; n < ST_BN; n += ST_THREADS / ST_BM) {
            const int f = n0 + n;
            if (f < o) {
                out[(((size_t)b * o + f) * h + y) * w + x] =
                    __float2bfloat16(cs[n * ST_LDC + cm] + __bfloat162float(bias[f]));
            }
        }
    }
#else
    __trap();
#endif
}

#define CONV_STAGED(K)                                                                         \
    extern "C" __global__ void __launch_bounds__(ST_THREADS, 2)                                 \
        cumind_conv_staged_k##K##_bf16(const __nv_bfloat16 *src, const __nv_bfloat16 *wt,       \
                                        const __nv_bfloat16 *bias, __nv_bfloat16 *out,          \
                                        int boards, int c, int cpad, int h, int w, int o) {     \
        conv_staged<K>(src, wt, bias, out, boards, c, cpad, h, w, o);                          \
    }
CONV_STAGED(1)
CONV_STAGED(3)
CONV_STAGED(5)

// A 1x1 convolution with at most FEW_FILTERS filters (the heads' policy, value and reward
// planes): one thread per position, the sums over the channels in f32, bias added and rounded
// once. The tensor-core kernels above compute a tile of 64 filters, almost all of it waste for
// one or two.
#define FEW_FILTERS 8
extern "C" __global__ void cumind_conv1x1_few_bf16(const __nv_bfloat16 *__restrict__ src,
                                                   const __nv_bfloat16 *__restrict__ wt,
                                                   const __nv_bfloat16 *__restrict__ bias,
                                                   __nv_bfloat16 *__restrict__ out,
                                                   int positions, int c, int hw, int o) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= positions) {
        return;
    }
    const int b = p / hw;
    const int r = p - b * hw;
    float acc[FEW_FILTERS];
#pragma unroll
    for (int f = 0; f < FEW_FILTERS; ++f) {
        acc[f] = f < o ? __bfloat162float(bias[f]) : 0.0f;
    }
    const __nv_bfloat16 *xs = src + (size_t)b * c * hw + r;
    for (int ci = 0; ci < c; ++ci) {
        const float v = __bfloat162float(xs[(size_t)ci * hw]);
#pragma unroll
        for (int f = 0; f < FEW_FILTERS; ++f) {
            if (f < o) {
                acc[f] += __bfloat162float(wt[f * c + ci]) * v;
            }
        }
    }
#pragma unroll
    for (int f = 0; f < FEW_FILTERS; ++f) {
        if (f < o) {
            out[((size_t)b * o + f) * hw + r] = __float2bfloat16(acc[f]);
        }
    }
}

// Rows of src picked by index: out[i, :] = src[index[i], :], copied in words of W (4 or 16
// bytes; the host picks 16 when the rows and offsets allow), zeros for an index past src's
// rows. One thread per word. What the search does to fetch its parents' latents, where
// candle's index_select works element by element.
template <typename W>
__device__ void gather_rows(const W *src, const uint32_t *index, W *out, int rows, int words,
                            int src_rows) {
    const size_t n = (size_t)rows * words;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        const size_t r = i / words;
        const uint32_t from = index[r];
        W zero;
        memset(&zero, 0, sizeof(W));
        out[i] = from < (uint32_t)src_rows ? src[(size_t)from * words + (i - r * words)] : zero;
    }
}
extern "C" __global__ void cumind_gather_rows_w4(const uint32_t *src, const uint32_t *index,
                                                 uint32_t *out, int rows, int words,
                                                 int src_rows) {
    gather_rows<uint32_t>(src, index, out, rows, words, src_rows);
}
extern "C" __global__ void cumind_gather_rows_w16(const uint4 *src, const uint32_t *index,
                                                  uint4 *out, int rows, int words,
                                                  int src_rows) {
    gather_rows<uint4>(src, index, out, rows, words, src_rows);
}

// Min-max scaling of each row of d values to [0, 1]: (x - min) / (max - min + 1e-5), one warp
// per row, in f32 (bf16 rows rounded once at the end). The latent states' normalisation, as
// one kernel for inference (the written-out form is six ops, each a pass over the batch).
template <typename T>
__device__ void min_max_scale(const T *x, T *out, int rows, int d) {
    const int row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) {
        return;
    }
    const T *xr = x + (size_t)row * d;
    T *o = out + (size_t)row * d;
    float lo = INFINITY, hi = -INFINITY;
    for (int i = threadIdx.x; i < d; i += WARP) {
        const float v = widen(xr[i]);
        lo = fminf(lo, v);
        hi = fmaxf(hi, v);
    }
    lo = -warp_max(-lo);
    hi = warp_max(hi);
    const float scale = (hi - lo) + 1e-5f;
    for (int i = threadIdx.x; i < d; i += WARP) {
        o[i] = narrow<T>((widen(xr[i]) - lo) / scale);
    }
}

extern "C" __global__ void cumind_min_max_scale_f32(const float *x, float *out, int rows, int d) {
    min_max_scale<float>(x, out, rows, d);
}
extern "C" __global__ void cumind_min_max_scale_bf16(const __nv_bfloat16 *x, __nv_bfloat16 *out,
                                                     int rows, int d) {
    min_max_scale<__nv_bfloat16>(x, out, rows, d);
}

// ---------------------------------------------------------------------------------------------
// The MLP networks' search calls as one kernel each (network::cuda_mlp): the initial inference
// (representation, then prediction) and the recurrent one (dynamics, then prediction), in f32
// throughout. Each warp computes ROWS trees (blockDim = (32, warps)): a lane owns outputs
// o, o + 32, ... of every layer and keeps one sum per tree in registers, so each weight it
// loads serves ROWS trees. A tree's activations live in five buffers of `width` floats in
// shared memory, the warp's trees side by side (tree r's buffer at r * width). The weights are
// read from one packed f32 buffer (network::packed_mlp: every linear layer as its transposed
// weight [in, out] then its bias, every layer norm as its scale then its shift, in the order
// the networks run them), so the lanes of a warp read consecutive floats. The latents live in
// a store of rows (row `node * batch + tree`); the logits go to one output row per tree,
// policy then value then reward, and the value and reward logits are decoded to scalars there
// too (softmax expectation over the support's atoms, then MuZero's inverse transform), so the
// host reads policy logits, value and reward, A + 2 floats a tree, in one copy. Trees past the
// batch (the last warp's spare rows) compute on zeros and write nothing.

#define MLP_EPS 1e-5f
// Weights each block asks the L1 cache to fetch before it starts (floats): the L1 holds them
// beside the block's shared memory on every GPU this targets.
#define MLP_PREFETCH (96 * 1024 / 4)

// Ask the L1 cache for the n floats at p, 128-byte lines spread over the block's threads, all
// in flight at once: the layers then read their weights from the L1 instead of waiting on the
// L2 for each line in turn.
__device__ __forceinline__ void mlp_prefetch(const float *p, int n) {
    n = min(n, MLP_PREFETCH);
    const int threads = blockDim.x * blockDim.y;
    for (int at = (threadIdx.y * blockDim.x + threadIdx.x) * 32; at < n; at += threads * 32) {
        asm volatile("prefetch.global.L1 [%0];" ::"l"(p + at));
    }
}

// The packed weights' next n floats.
__device__ __forceinline__ const float *mlp_take(const float *&p, int n) {
    const float *at = p;
    p += n;
    return at;
}

// y = x W^T + b (relu'd when asked) for the warp's ROWS trees: tree r's input at x + r * xs,
// its output at y + r * ys (shared or global memory), written for the first `valid` trees.
template <int ROWS>
__device__ void mlp_linear(const float *x, int xs, int in, float *y, int ys, int out,
                           const float *&p, bool relu, int valid) {
    const float *wt = mlp_take(p, in * out);
    const float *b = mlp_take(p, out);
    for (int o = threadIdx.x; o < out; o += WARP) {
        float acc[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            acc[r] = 0.0f;
        }
#pragma unroll 8
        for (int i = 0; i < in; ++i) {
            const float w = wt[(size_t)i * out + o];
#pragma unroll
            for (int r = 0; r < ROWS; ++r) {
                acc[r] = fmaf(x[r * xs + i], w, acc[r]);
            }
        }
        const float bias = b[o];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (r < valid) {
                const float v = acc[r] + bias;
                y[(size_t)r * ys + o] = relu ? fmaxf(v, 0.0f) : v;
            }
        }
    }
    __syncwarp();
}

// Layer norm of each tree's d values (at x + r * xs) in place, relu'd when asked.
template <int ROWS>
__device__ void mlp_norm(float *x, int xs, int d, const float *&p, bool relu) {
    const float *gamma = mlp_take(p, d);
    const float *beta = mlp_take(p, d);
    for (int r = 0; r < ROWS; ++r) {
        float *row = x + r * xs;
        float mean, rstd;
        row_statistics(row, d, MLP_EPS, &mean, &rstd);
        for (int o = threadIdx.x; o < d; o += WARP) {
            const float v = (row[o] - mean) * rstd * gamma[o] + beta[o];
            row[o] = relu ? fmaxf(v, 0.0f) : v;
        }
    }
    __syncwarp();
}

// Linear -> LayerNorm -> ReLU, then residual blocks relu(h + LN(W2 relu(LN(W1 h)))): x (in
// values a tree) to h (hidden values), with a and b as scratch; all at stride w.
template <int ROWS>
__device__ void mlp_trunk(const float *x, int in, int hidden, int blocks, float *h, float *a,
                          float *b, int w, const float *&p) {
    mlp_linear<ROWS>(x, w, in, h, w, hidden, p, false, ROWS);
    mlp_norm<ROWS>(h, w, hidden, p, true);
    for (int k = 0; k < blocks; ++k) {
        mlp_linear<ROWS>(h, w, hidden, a, w, hidden, p, false, ROWS);
        mlp_norm<ROWS>(a, w, hidden, p, true);
        mlp_linear<ROWS>(a, w, hidden, b, w, hidden, p, false, ROWS);
        mlp_norm<ROWS>(b, w, hidden, p, false);
        for (int r = 0; r < ROWS; ++r) {
            for (int o = threadIdx.x; o < hidden; o += WARP) {
                h[r * w + o] = fmaxf(h[r * w + o] + b[r * w + o], 0.0f);
            }
        }
        __syncwarp();
    }
}

__device__ __forceinline__ int mlp_trunk_len(int in, int hidden, int blocks) {
    return in * hidden + 3 * hidden + blocks * (2 * hidden * hidden + 6 * hidden);
}

// Scale each tree's d values (at x + r * xs) to [0, 1] in place: (x - min) / (max - min + 1e-5).
template <int ROWS>
__device__ void mlp_min_max(float *x, int xs, int d) {
    for (int r = 0; r < ROWS; ++r) {
        float *row = x + r * xs;
        float lo = INFINITY, hi = -INFINITY;
        for (int o = threadIdx.x; o < d; o += WARP) {
            lo = fminf(lo, row[o]);
            hi = fmaxf(hi, row[o]);
        }
        lo = -warp_max(-lo);
        hi = warp_max(hi);
        const float scale = (hi - lo) + 1e-5f;
        for (int o = threadIdx.x; o < d; o += WARP) {
            row[o] = (row[o] - lo) / scale;
        }
    }
    __syncwarp();
}

// The sizes of a packed MLP (the arguments every MLP kernel takes).
struct MlpDims {
    int obs, latent, actions, hidden, blocks, value, reward, width;
    __device__ int representation_len() const {
        return mlp_trunk_len(obs, hidden, blocks) + hidden * latent + latent;
    }
    __device__ int dynamics_len() const {
        return mlp_trunk_len(latent + actions, hidden, blocks) + hidden * latent + latent +
               hidden * hidden + hidden + hidden * reward + reward;
    }
    __device__ int prediction_len() const {
        return mlp_trunk_len(latent, hidden, blocks) + hidden * actions + actions +
               hidden * hidden + hidden + hidden * value + value;
    }
};

// The supports the scalars are decoded from: the atom of index 0, and whether MuZero's
// transform h applies (1) or the atoms are the values (0).
struct MlpSupports {
    int value_min, value_transform, reward_min, reward_transform;
};

// The scalar that n support logits (a row the whole warp reads) stand for: the softmax's
// expected atom, min + sum_i i p_i, mapped back through h's inverse (support.rs: `h_inv`, in
// f64 as there) when `transform` is 1.
__device__ float mlp_decode(const float *row, int n, int min_atom, int transform) {
    float m = -INFINITY;
    for (int o = threadIdx.x; o < n; o += WARP) {
        m = fmaxf(m, row[o]);
    }
    m = warp_max(m);
    float total = 0.0f, moment = 0.0f;
    for (int o = threadIdx.x; o < n; o += WARP) {
        const float e = expf(row[o] - m);
        total += e;
        moment += e * (float)o;
    }
    total = warp_sum(total);
    moment = warp_sum(moment);
    const float y = (float)min_atom + moment / total;
    if (transform == 0) {
        return y;
    }
    const double yd = y, eps = (double)0.001f;
    const double a = fabs(yd) + 1.0 + eps;
    const double ratio = 2.0 * a / (sqrt(1.0 + 4.0 * eps * a) + 1.0);
    return (float)(copysign(1.0, yd) * (ratio * ratio - 1.0));
}

// What the host reads of the warp's trees: policy logits, value, reward (0 without one), from
// their logits rows (stride os) to their rows of `compact` (A + 2 floats a tree).
template <int ROWS>
__device__ void mlp_compact(const float *logits, int os, const MlpDims &d,
                            const MlpSupports &s, bool reward, float *compact, int valid) {
    const int cs = d.actions + 2;
    for (int r = 0; r < valid; ++r) {
        const float *row = logits + (size_t)r * os;
        float *c = compact + (size_t)r * cs;
        for (int o = threadIdx.x; o < d.actions; o += WARP) {
            c[o] = row[o];
        }
        const float v = mlp_decode(row + d.actions, d.value, s.value_min, s.value_transform);
        const float w = reward ? mlp_decode(row + d.actions + d.value, d.reward, s.reward_min,
                                            s.reward_transform)
                               : 0.0f;
        if (threadIdx.x == 0) {
            c[d.actions] = v;
            c[d.actions + 1] = w;
        }
    }
}

// The warp's trees' rows of the latent store: z (shared, stride d.width) to rows
// `first_row + r` of `store`, for the first `valid` trees.
template <int ROWS>
__device__ void mlp_store(const float *z, const MlpDims &d, float *store, size_t first_row,
                          int valid) {
    for (int r = 0; r < valid; ++r) {
        float *dst = store + (first_row + r) * d.latent;
        for (int o = threadIdx.x; o < d.latent; o += WARP) {
            dst[o] = z[r * d.width + o];
        }
    }
}

// The prediction at the latents z: policy logits to out[0, A), value logits to out[A, A + V)
// of each tree's output row (stride os).
template <int ROWS>
__device__ void mlp_predict(const float *z, const MlpDims &d, const float *p, float *h,
                            float *a, float *b, float *out, int os, int valid) {
    const int w = d.width;
    mlp_trunk<ROWS>(z, d.latent, d.hidden, d.blocks, h, a, b, w, p);
    mlp_linear<ROWS>(h, w, d.hidden, out, os, d.actions, p, false, valid);
    mlp_linear<ROWS>(h, w, d.hidden, a, w, d.hidden, p, true, ROWS);
    mlp_linear<ROWS>(a, w, d.hidden, out + d.actions, os, d.value, p, false, valid);
}

// This warp's first tree, how many of its ROWS trees are in the batch (0: none), and its five
// buffers of ROWS * width floats.
template <int ROWS>
__device__ float *mlp_buffers(const MlpDims &d, int batch, int *first, int *valid) {
    extern __shared__ float mlp_shared[];
    *first = (blockIdx.x * blockDim.y + threadIdx.y) * ROWS;
    *valid = max(0, min(ROWS, batch - *first));
    return mlp_shared + (size_t)threadIdx.y * 5 * ROWS * d.width;
}

// Initial inference of `batch` observations (rows of d.obs, already scaled): latents to rows
// 0..batch of the store, logits to out rows of A + V.
template <int ROWS>
__device__ void mlp_initial(const float *__restrict__ weights, float *__restrict__ store,
                            const float *__restrict__ observations, float *__restrict__ out,
                            int batch, const MlpDims d, float *__restrict__ compact,
                            const MlpSupports s) {
    int first, valid;
    float *x = mlp_buffers<ROWS>(d, batch, &first, &valid);
    const float *prediction = weights + d.representation_len() + d.dynamics_len();
    mlp_prefetch(weights, d.representation_len());
    mlp_prefetch(prediction, min(d.prediction_len(), MLP_PREFETCH - d.representation_len()));
    if (valid == 0) {
        return;
    }
    const int w = d.width, span = ROWS * w;
    float *h = x + span, *a = h + span, *b = a + span, *z = b + span;
    for (int r = 0; r < ROWS; ++r) {
        const float *src = observations + (size_t)(first + r) * d.obs;
        for (int o = threadIdx.x; o < d.obs; o += WARP) {
            x[r * w + o] = r < valid ? src[o] : 0.0f;
        }
    }
    __syncwarp();
    const float *p = weights;
    mlp_trunk<ROWS>(x, d.obs, d.hidden, d.blocks, h, a, b, w, p);
    mlp_linear<ROWS>(h, w, d.hidden, z, w, d.latent, p, false, ROWS);
    mlp_min_max<ROWS>(z, w, d.latent);
    mlp_store<ROWS>(z, d, store, first, valid);
    const int os = d.actions + d.value;
    mlp_predict<ROWS>(z, d, prediction, h, a, b, out + (size_t)first * os, os, valid);
    mlp_compact<ROWS>(out + (size_t)first * os, os, d, s, false,
                      compact + (size_t)first * (d.actions + 2), valid);
}

// Recurrent inference: for tree t, the child of store row inputs[t] by action
// inputs[batch + t]; its latent to store row new_node * batch + t, its logits to out row t
// (A + V + R: policy, value, reward).
template <int ROWS>
__device__ void mlp_recurrent(const float *__restrict__ weights, float *__restrict__ store,
                              const uint32_t *__restrict__ inputs, int new_node,
                              float *__restrict__ out, int batch, const MlpDims d,
                              float *__restrict__ compact, const MlpSupports s) {
    int first, valid;
    float *x = mlp_buffers<ROWS>(d, batch, &first, &valid);
    // The dynamics and the prediction lie side by side in the packed weights.
    mlp_prefetch(weights + d.representation_len(), d.dynamics_len() + d.prediction_len());
    if (valid == 0) {
        return;
    }
    const int w = d.width, span = ROWS * w;
    float *h = x + span, *a = h + span, *b = a + span, *z = b + span;
    for (int r = 0; r < ROWS; ++r) {
        const bool live = r < valid;
        const float *parent = store + (size_t)(live ? inputs[first + r] : 0) * d.latent;
        const uint32_t action = live ? inputs[batch + first + r] : 0xffffffffu;
        for (int o = threadIdx.x; o < d.latent; o += WARP) {
            x[r * w + o] = live ? parent[o] : 0.0f;
        }
        for (int o = threadIdx.x; o < d.actions; o += WARP) {
            x[r * w + d.latent + o] = (uint32_t)o == action ? 1.0f : 0.0f;
        }
    }
    __syncwarp();
    const float *p = weights + d.representation_len();
    mlp_trunk<ROWS>(x, d.latent + d.actions, d.hidden, d.blocks, h, a, b, w, p);
    mlp_linear<ROWS>(h, w, d.hidden, z, w, d.latent, p, false, ROWS);
    mlp_min_max<ROWS>(z, w, d.latent);
    mlp_store<ROWS>(z, d, store, (size_t)new_node * batch + first, valid);
    const int os = d.actions + d.value + d.reward;
    float *logits = out + (size_t)first * os;
    mlp_linear<ROWS>(h, w, d.hidden, a, w, d.hidden, p, true, ROWS);
    mlp_linear<ROWS>(a, w, d.hidden, logits + d.actions + d.value, os, d.reward, p, false,
                     valid);
    mlp_predict<ROWS>(z, d, p, h, a, b, logits, os, valid);
    mlp_compact<ROWS>(logits, os, d, s, true, compact + (size_t)first * (d.actions + 2), valid);
}

// One kernel per rows-per-warp (1, 2, 4, 8), chosen by the host from the widths.
#define MLP_KERNELS(R)                                                                          \
    extern "C" __global__ void cumind_mlp_initial_r##R##_f32(                                   \
        const float *__restrict__ weights, float *__restrict__ store,                           \
        const float *__restrict__ observations, float *__restrict__ out, int batch, int obs,   \
        int latent, int actions, int hidden, int blocks, int value, int reward, int width,    \
        float *__restrict__ compact, int value_min, int value_transform, int reward_min,       \
        int reward_transform) {                                                                 \
        mlp_initial<R>(weights, store, observations, out, batch,                               \
                       MlpDims{obs, latent, actions, hidden, blocks, value, reward, width},    \
                       compact,                                                                 \
                       MlpSupports{value_min, value_transform, reward_min, reward_transform}); \
    }                                                                                           \
    extern "C" __global__ void cumind_mlp_recurrent_r##R##_f32(                                 \
        const float *__restrict__ weights, float *__restrict__ store,                           \
        const uint32_t *__restrict__ inputs, int new_node, float *__restrict__ out, int batch, \
        int obs, int latent, int actions, int hidden, int blocks, int value, int reward,       \
        int width, float *__restrict__ compact, int value_min, int value_transform,            \
        int reward_min, int reward_transform) {                                                 \
        mlp_recurrent<R>(                                                                       \
            weights, store, inputs, new_node, out, batch,                                      \
            MlpDims{obs, latent, actions, hidden, blocks, value, reward, width}, compact,      \
            MlpSupports{value_min, value_transform, reward_min, reward_transform});            \
    }
MLP_KERNELS(1)
MLP_KERNELS(2)
MLP_KERNELS(4)
MLP_KERNELS(8)
