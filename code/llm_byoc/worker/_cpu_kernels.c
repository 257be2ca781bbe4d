/* The CPU kernels torch has no single operator for (worker/cpu_kernels.py loads them):
 *
 * decode_attention: decode attention read straight from the paged KV pool (float32; worker/cpu_attention.py).
 * One query token per row. For row b and KV head h, the G = H / KVH query heads
 * that share h attend over the keys at slots gather[b, 0..L-1] (mask[b, j] == 0:
 * key j is padding). Each key and value row is read once from the pool, in
 * place: no gathered copy, no padded batch, and a row's result does not depend
 * on the other rows of the step (nor on how long the longest of them is).
 * Scores are computed in float32, softmax with its maximum subtracted, the
 * weighted sum of values accumulated in float32: the arithmetic of SDPA's CPU
 * kernel, in another order (results agree to a few units in the last place).
 *
 * linear: y = x @ W.T + b in float32 (worker/linear.py's PackedLinear), W packed at load into blocks of 16
 * outputs ([ceil(N / 16)][K][16]), each block read once per tile of up to 6 rows, on torch's OpenMP threads
 * (this library links the libgomp torch has loaded). Each output is one chain of fused multiply-adds over k in
 * order, whatever the tile: a row's result is the same bits alone or in any batch.
 *
 * int8_linear: y = x @ W.T + b with W int8 per output channel and x quantized to int8 per row, on AVX-512 VNNI
 * (worker/quant.py's PackedInt8Linear): W packed at load as [ceil(N / 16)][ceil(K / 4)][16][4] bytes, four
 * inputs of 16 outputs to a register, as vpdpbusd takes them. Integer sums are exact, the epilogue per element:
 * a row's result is the same bits alone or in any batch, and on any thread count.
 *
 * rms_norm: y = x / sqrt(mean(x^2) + eps) * weight per row, in float32 (worker/models/llama.py's rms_norm), one
 * call where torch's CPU rms_norm runs eight operators.
 *
 * int8_rows: the input of an int8 projection (worker/quant.py): each row divided by its largest magnitude,
 * then the sentinel row [1, 0, ..., 0, -1]; the same bits as torch's abs / amax / clamp_min / div / cat, in one
 * call instead of five.
 *
 * Built by setup.py as an optional extension (a missing compiler leaves the
 * torch paths); x86-64 gets AVX-512, AVX2+FMA and baseline clones of the inner
 * functions, picked when the library loads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
/* Inside a parallel region: this thread's index in its team, and the team's size (0 and 1 without OpenMP). */
#define TEAM_MEMBER() ((int64_t)omp_get_thread_num())
#define TEAM_SIZE() ((int64_t)omp_get_num_threads())
#define MAX_TEAM(threads) (threads)
#else
#define TEAM_MEMBER() ((int64_t)0)
#define TEAM_SIZE() ((int64_t)1)
#define MAX_TEAM(threads) 1
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
#define HAVE_INT8_KERNELS 1
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

/* exp(x) for x <= 0 (scores less their maximum), in place over n floats: Cephes' expf, range-reduced by
 * ln 2 (n rounded to nearest by the 1.5 * 2^23 trick), relative error ~1e-7; -inf and anything below -87.3
 * give 0. Branch-free, so that the loop vectorizes. */
static inline void exp_nonpositive(float *x, int64_t n) {
    const float log2e = 1.44269504088896341f, round = 12582912.0f;
    const float c1 = 0.693359375f, c2 = -2.12194440e-4f;
    for (int64_t j = 0; j < n; j++) {
        const float v = x[j];
        const float clamped = v < -87.3f ? -87.3f : v;
        const float k = (clamped * log2e + round) - round;
        const float r = clamped - k * c1 - k * c2;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * (r * r) + r + 1.0f;
        const int32_t bits = ((int32_t)k + 127) << 23;
        float scale;
        memcpy(&scale, &bits, sizeof scale);
        x[j] = v < -87.3f ? 0.0f : p * scale;
    }
}

/* 16 lanes summed as a tree (not 16 dependent adds), in place. */
static inline float sum16(float *lanes) {
    for (int i = 0; i < 8; i++) lanes[i] += lanes[i + 8];
    for (int i = 0; i < 4; i++) lanes[i] += lanes[i + 4];
    for (int i = 0; i < 2; i++) lanes[i] += lanes[i + 2];
    return lanes[0] + lanes[1];
}

/* A dot product in 16 lanes. */
static inline float dot(const float *a, const float *b, int64_t D) {
    float acc[16] = {0};
    int64_t d = 0;
    for (; d + 16 <= D; d += 16)
        for (int i = 0; i < 16; i++) acc[i] += a[d + i] * b[d + i];
    for (; d < D; d++) acc[d % 16] += a[d] * b[d];
    return sum16(acc);
}

/* The largest |x| of a row, in 16 lanes (0 for an empty row; a NaN is not seen: callers test for it). */
static inline float absmax(const float *row, int64_t cols) {
    float lanes[16] = {0};
    int64_t j = 0;
    for (; j + 16 <= cols; j += 16)
        for (int i = 0; i < 16; i++) {
            const float a = fabsf(row[j + i]);
            lanes[i] = a > lanes[i] ? a : lanes[i];
        }
    for (int i = 0; j + i < cols; i++) {
        const float a = fabsf(row[j + i]);
        lanes[i] = a > lanes[i] ? a : lanes[i];
    }
    float top = 0.0f;
    for (int i = 0; i < 16; i++) top = lanes[i] > top ? lanes[i] : top;
    return top;
}

/* One row, KV heads kvh0..kvh1: out [H, D] for their query heads (G each, H = (kvh1 - kvh0) * G; q and out start
 * at the first of them). Each key's heads (D floats each, contiguous in the slot) are read once, in order;
 * scores: H * L floats of scratch, head-major. */
CLONES
static void attend_row(const float *q, const float *k_pool, const float *v_pool, const int64_t *slots,
                       const uint8_t *mask, float *out, float *scores, int64_t KVH, int64_t kvh0, int64_t kvh1,
                       int64_t G, int64_t D, int64_t L, float scale) {
    const int64_t H = (kvh1 - kvh0) * G, slot_stride = KVH * D;
    k_pool += kvh0 * D;
    v_pool += kvh0 * D;
    int64_t first = 0;  /* the row's first key: where its padding on the left ends */
    while (mask && first < L && !mask[first]) first++;
    for (int64_t j = 0; j < L; j++) {
        if (mask && !mask[j]) {
            for (int64_t h = 0; h < H; h++) scores[h * L + j] = -INFINITY;
            continue;
        }
        const float *slot = k_pool + slots[j] * slot_stride;
        for (int64_t h = 0; h < H; h++)
            scores[h * L + j] = dot(q + h * D, slot + (h / G) * D, D) * scale;
    }
    float totals[H];
    for (int64_t h = 0; h < H; h++) {
        float *s = scores + h * L;
        float lanes[16];  /* maximum, then sum, in 16 lanes: reductions the compiler vectorizes */
        for (int i = 0; i < 16; i++) lanes[i] = -INFINITY;
        int64_t j = 0;
        for (; j + 16 <= L; j += 16)
            for (int i = 0; i < 16; i++) lanes[i] = s[j + i] > lanes[i] ? s[j + i] : lanes[i];
        float top = -INFINITY;
        for (; j < L; j++) top = s[j] > top ? s[j] : top;
        for (int i = 0; i < 16; i++) top = lanes[i] > top ? lanes[i] : top;
        totals[h] = 0.0f;
        if (top == -INFINITY) {  /* no key to look at: zeros */
            for (j = 0; j < L; j++) s[j] = 0.0f;
            continue;
        }
        for (j = 0; j < L; j++) s[j] -= top;
        exp_nonpositive(s, L);
        /* The sum, in lanes counted from the row's first key: each key lands in the same lane however the
         * row is padded (on the right, or on the left in a sliding-window group), padding adds exact zeros,
         * and so the row's result is the same bits alone or in any batch. */
        for (int i = 0; i < 16; i++) lanes[i] = 0.0f;
        for (j = first; j + 16 <= L; j += 16)
            for (int i = 0; i < 16; i++) lanes[i] += s[j + i];
        for (int i = 0; j + i < L; i++) lanes[i] += s[j + i];
        totals[h] = sum16(lanes);
    }
    memset(out, 0, (size_t)(H * D) * sizeof(float));
    for (int64_t j = 0; j < L; j++) {
        if (mask && !mask[j]) continue;
        const float *slot = v_pool + slots[j] * slot_stride;
        for (int64_t h = 0; h < H; h++) {
            const float p = scores[h * L + j], *value = slot + (h / G) * D;
            float *o = out + h * D;
            for (int64_t d = 0; d < D; d++) o[d] += p * value[d];
        }
    }
    for (int64_t h = 0; h < H; h++) {
        const float inv = totals[h] > 0.0f ? 1.0f / totals[h] : 0.0f;
        for (int64_t d = 0; d < D; d++) out[h * D + d] *= inv;
    }
}

/* decode_attention(q, k_pool, v_pool, gather, mask, out, B, H, KVH, D, L, scale[, threads])
 * Pointers as integers (tensor.data_ptr()): q [B, H, D], pools [slots, KVH, D], gather [B, L] int64,
 * mask [B, L] uint8 or 0 for none, out [B, H, D]; all contiguous float32. The (row, KV head) pairs are shared
 * among the threads (torch's OpenMP pool), each computed as alone. */
static PyObject *decode_attention(PyObject *self, PyObject *args) {
    unsigned long long q, k_pool, v_pool, gather, mask, out;
    long long B, H, KVH, D, L;
    double scale;
    int threads = 1;
    if (!PyArg_ParseTuple(args, "KKKKKKLLLLLd|i", &q, &k_pool, &v_pool, &gather, &mask, &out, &B, &H, &KVH, &D,
                          &L, &scale, &threads))
        return NULL;
    if (B < 0 || H <= 0 || KVH <= 0 || H % KVH || D <= 0 || L <= 0 || threads <= 0) {
        PyErr_SetString(PyExc_ValueError, "decode_attention: bad shape");
        return NULL;
    }
    const int64_t G = H / KVH, tasks = B * KVH;  /* a task: one row's query heads on one KV head */
    float *scores = malloc((size_t)(B * H * L) * sizeof(float));
    if (!scores) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1 && tasks > 1 && B * L >= 64)
#endif
    for (int64_t task = 0; task < tasks; task++) {
        const int64_t b = task / KVH, h = task % KVH;
        attend_row((const float *)(uintptr_t)q + (b * H + h * G) * D, (const float *)(uintptr_t)k_pool,
                   (const float *)(uintptr_t)v_pool, (const int64_t *)(uintptr_t)gather + b * L,
                   mask ? (const uint8_t *)(uintptr_t)mask + b * L : NULL,
                   (float *)(uintptr_t)out + (b * H + h * G) * D, scores + task * G * L, KVH, h, h + 1, G, D, L,
                   (float)scale);
    }
    Py_END_ALLOW_THREADS
    free(scores);
    Py_RETURN_NONE;
}

/* ---- linear ---- */

/* 16 floats: one block of outputs (one AVX-512 register, two AVX2 ones, four SSE ones). */
typedef float v16 __attribute__((vector_size(64)));
#define LOAD16(p) __extension__({ v16 v_; memcpy(&v_, (p), 64); v_; })

/* One tile: RB rows of x [., K] against BB blocks of packed weights (block j at wb + j * K * 16) ->
 * out[RB][BB][16]. The weights are loaded once per k for all RB rows. */
#define LINEAR_TILE(NAME, RB, BB, TARGET)                                                                     \
    TARGET static void NAME(const float *x, const float *wb, int64_t K, float *out) {                         \
        v16 acc[RB][BB];                                                                                        \
        for (int r = 0; r < RB; r++)                                                                            \
            for (int j = 0; j < BB; j++) acc[r][j] = (v16){0};                                                  \
        for (int64_t k = 0; k < K; k++) {                                                                       \
            v16 w[BB];                                                                                          \
            for (int j = 0; j < BB; j++) w[j] = LOAD16(wb + (j * K + k) * 16);                                  \
            for (int r = 0; r < RB; r++) {                                                                      \
                const float xv = x[r * K + k];                                                                  \
                for (int j = 0; j < BB; j++) acc[r][j] += xv * w[j];                                            \
            }                                                                                                   \
        }                                                                                                       \
        for (int r = 0; r < RB; r++)                                                                            \
            for (int j = 0; j < BB; j++) memcpy(out + (r * BB + j) * 16, &acc[r][j], 64);                       \
    }

typedef void (*linear_tile)(const float *, const float *, int64_t, float *);

/* An instruction set's tiles: BB blocks wide (and 1 wide for the last blocks), 1..RB_MAX rows tall, sized to
 * its registers (AVX-512: 6 x 4 x 1 of 32 zmm; AVX2: 6 x 1 x 2 of 16 ymm; baseline: 2 x 1 x 4 of 16 xmm). */
typedef struct {
    int bb, rb_max;
    linear_tile wide[7], narrow[7];  /* [rows]: bb blocks, 1 block */
} linear_tiles;

#define LINEAR_TILES(ISA, BB, TARGET)                                                                           \
    LINEAR_TILE(ISA##_w1, 1, BB, TARGET) LINEAR_TILE(ISA##_w2, 2, BB, TARGET) LINEAR_TILE(ISA##_w3, 3, BB, TARGET) \
    LINEAR_TILE(ISA##_w4, 4, BB, TARGET) LINEAR_TILE(ISA##_w5, 5, BB, TARGET) LINEAR_TILE(ISA##_w6, 6, BB, TARGET) \
    LINEAR_TILE(ISA##_n1, 1, 1, TARGET) LINEAR_TILE(ISA##_n2, 2, 1, TARGET) LINEAR_TILE(ISA##_n3, 3, 1, TARGET)  \
    LINEAR_TILE(ISA##_n4, 4, 1, TARGET) LINEAR_TILE(ISA##_n5, 5, 1, TARGET) LINEAR_TILE(ISA##_n6, 6, 1, TARGET)

#define TILE_TABLE(ISA, BB, RB_MAX)                                                                            \
    {BB, RB_MAX, {NULL, ISA##_w1, ISA##_w2, ISA##_w3, ISA##_w4, ISA##_w5, ISA##_w6},                          \
     {NULL, ISA##_n1, ISA##_n2, ISA##_n3, ISA##_n4, ISA##_n5, ISA##_n6}}

LINEAR_TILES(base, 1, )
static const linear_tiles base_tiles = TILE_TABLE(base, 1, 2);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
/* AVX-512: up to 6 rows by 1 or 4 blocks, each accumulator a variable of its own (see the AVX2 tiles below). */
#define AVX512_ROW(r, A, B, C, D)                                                                               \
    if (rows > r) {                                                                                             \
        const __m512 xv = _mm512_set1_ps(x[r * K + k]);                                                         \
        A = _mm512_fmadd_ps(xv, w0, A);                                                                         \
        if (wide > 1) {                                                                                         \
            B = _mm512_fmadd_ps(xv, w1, B);                                                                     \
            C = _mm512_fmadd_ps(xv, w2, C);                                                                     \
            D = _mm512_fmadd_ps(xv, w3, D);                                                                     \
        }                                                                                                       \
    }
/* Row r's accumulators to out (1 or 4 blocks of 16): STORE is the register type's unaligned store (float32 and
 * int8 tiles alike). */
#define TILE_STORE(STORE, r, A, B, C, D)                                                                        \
    if (rows > r) {                                                                                             \
        STORE(out + (r * wide) * 16, A);                                                                        \
        if (wide > 1) {                                                                                         \
            STORE(out + (r * wide + 1) * 16, B);                                                                \
            STORE(out + (r * wide + 2) * 16, C);                                                                \
            STORE(out + (r * wide + 3) * 16, D);                                                                \
        }                                                                                                       \
    }
#define AVX512_STORE(r, A, B, C, D) TILE_STORE(_mm512_storeu_ps, r, A, B, C, D)
#define LINEAR_TILE_AVX512(NAME, RB, BB)                                                                        \
    __attribute__((target("avx512f"))) static void NAME(const float *x, const float *wb, int64_t K, float *out) { \
        const int rows = RB, wide = BB;                                                                         \
        __m512 z = _mm512_setzero_ps();                                                                         \
        __m512 a0 = z, b0 = z, c0 = z, d0 = z, a1 = z, b1 = z, c1 = z, d1 = z, a2 = z, b2 = z, c2 = z, d2 = z;   \
        __m512 a3 = z, b3 = z, c3 = z, d3 = z, a4 = z, b4 = z, c4 = z, d4 = z, a5 = z, b5 = z, c5 = z, d5 = z;   \
        for (int64_t k = 0; k < K; k++) {                                                                       \
            const __m512 w0 = _mm512_loadu_ps(wb + k * 16);                                                     \
            const __m512 w1 = wide > 1 ? _mm512_loadu_ps(wb + (K + k) * 16) : z;                                \
            const __m512 w2 = wide > 1 ? _mm512_loadu_ps(wb + (2 * K + k) * 16) : z;                            \
            const __m512 w3 = wide > 1 ? _mm512_loadu_ps(wb + (3 * K + k) * 16) : z;                            \
            AVX512_ROW(0, a0, b0, c0, d0) AVX512_ROW(1, a1, b1, c1, d1) AVX512_ROW(2, a2, b2, c2, d2)           \
            AVX512_ROW(3, a3, b3, c3, d3) AVX512_ROW(4, a4, b4, c4, d4) AVX512_ROW(5, a5, b5, c5, d5)           \
        }                                                                                                       \
        AVX512_STORE(0, a0, b0, c0, d0) AVX512_STORE(1, a1, b1, c1, d1) AVX512_STORE(2, a2, b2, c2, d2)         \
        AVX512_STORE(3, a3, b3, c3, d3) AVX512_STORE(4, a4, b4, c4, d4) AVX512_STORE(5, a5, b5, c5, d5)         \
    }
LINEAR_TILE_AVX512(avx512_w1, 1, 4) LINEAR_TILE_AVX512(avx512_w2, 2, 4) LINEAR_TILE_AVX512(avx512_w3, 3, 4)
LINEAR_TILE_AVX512(avx512_w4, 4, 4) LINEAR_TILE_AVX512(avx512_w5, 5, 4) LINEAR_TILE_AVX512(avx512_w6, 6, 4)
LINEAR_TILE_AVX512(avx512_n1, 1, 1) LINEAR_TILE_AVX512(avx512_n2, 2, 1) LINEAR_TILE_AVX512(avx512_n3, 3, 1)
LINEAR_TILE_AVX512(avx512_n4, 4, 1) LINEAR_TILE_AVX512(avx512_n5, 5, 1) LINEAR_TILE_AVX512(avx512_n6, 6, 1)

/* AVX2 in intrinsics (GCC's 64-byte vectors, split in two for AVX2, ran 4-8x slower): one block as two ymm by
 * up to 6 rows, 12 accumulators of 16 registers, each a variable of its own (in an array GCC stored them to the
 * stack at every step). The same fused multiply-adds in the same order as the AVX-512 tiles: the same bits. */
#define AVX2_ROW(r, A, B)                                                                                       \
    if (rows > r) {                                                                                             \
        const __m256 xv = _mm256_broadcast_ss(x + r * K + k);                                                  \
        A = _mm256_fmadd_ps(xv, w0, A);                                                                         \
        B = _mm256_fmadd_ps(xv, w1, B);                                                                         \
    }
#define AVX2_STORE(r, A, B)                                                                                     \
    if (rows > r) {                                                                                             \
        _mm256_storeu_ps(out + r * 16, A);                                                                      \
        _mm256_storeu_ps(out + r * 16 + 8, B);                                                                  \
    }
#define LINEAR_TILE_AVX2(NAME, RB)                                                                              \
    __attribute__((target("avx2,fma"))) static void NAME(const float *x, const float *wb, int64_t K, float *out) { \
        const int rows = RB;                                                                                    \
        __m256 a0 = _mm256_setzero_ps(), b0 = a0, a1 = a0, b1 = a0, a2 = a0, b2 = a0, a3 = a0, b3 = a0, a4 = a0,  \
               b4 = a0, a5 = a0, b5 = a0;                                                                       \
        for (int64_t k = 0; k < K; k++) {                                                                       \
            const __m256 w0 = _mm256_loadu_ps(wb + k * 16), w1 = _mm256_loadu_ps(wb + k * 16 + 8);              \
            AVX2_ROW(0, a0, b0) AVX2_ROW(1, a1, b1) AVX2_ROW(2, a2, b2)                                         \
            AVX2_ROW(3, a3, b3) AVX2_ROW(4, a4, b4) AVX2_ROW(5, a5, b5)                                         \
        }                                                                                                       \
        AVX2_STORE(0, a0, b0) AVX2_STORE(1, a1, b1) AVX2_STORE(2, a2, b2)                                       \
        AVX2_STORE(3, a3, b3) AVX2_STORE(4, a4, b4) AVX2_STORE(5, a5, b5)                                       \
    }
LINEAR_TILE_AVX2(avx2_1, 1) LINEAR_TILE_AVX2(avx2_2, 2) LINEAR_TILE_AVX2(avx2_3, 3)
LINEAR_TILE_AVX2(avx2_4, 4) LINEAR_TILE_AVX2(avx2_5, 5) LINEAR_TILE_AVX2(avx2_6, 6)
static const linear_tiles avx512_tiles = TILE_TABLE(avx512, 4, 6);
static const linear_tiles avx2_tiles = {1, 6, {NULL, avx2_1, avx2_2, avx2_3, avx2_4, avx2_5, avx2_6},
                                        {NULL, avx2_1, avx2_2, avx2_3, avx2_4, avx2_5, avx2_6}};
#endif

/* The tiles for an instruction set by name ("avx512", "avx2", "base"; NULL: the best this CPU runs), or NULL
 * where this CPU cannot run them. */
static const linear_tiles *tiles_for(const char *isa) {
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    const int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                       __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    const int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!isa) return avx512 ? &avx512_tiles : avx2 ? &avx2_tiles : &base_tiles;
    if (!strcmp(isa, "avx512")) return avx512 ? &avx512_tiles : NULL;
    if (!strcmp(isa, "avx2")) return avx2 ? &avx2_tiles : NULL;
#else
    if (!isa) return &base_tiles;
#endif
    return strcmp(isa, "base") ? NULL : &base_tiles;
}

/* Rows r0..r1 of y against blocks b0..b1, in groups of 4 blocks: for each group, every tile of rows (rb_max
 * tall, the last one shorter) against the group's blocks, bb at a time while bb are left, then one; so a tile's
 * rows stay in L1 across the group, and the group's weights in L2 across the tiles. */
static void linear_part(const linear_tiles *t, const float *x, const float *w, const float *bias, float *y,
                        int64_t K, int64_t N, int64_t r0, int64_t r1, int64_t b0, int64_t b1) {
    float out[6 * 4 * 16];
    for (int64_t g = b0; g < b1; g += 4) {
        const int64_t g1 = b1 - g < 4 ? b1 : g + 4;
        for (int64_t r = r0; r < r1; r += t->rb_max) {
            const int nr = r1 - r < t->rb_max ? (int)(r1 - r) : t->rb_max;
            for (int64_t b = g; b < g1;) {
                const int bb = g1 - b >= t->bb ? t->bb : 1;
                (bb == t->bb ? t->wide : t->narrow)[nr](x + r * K, w + b * K * 16, K, out);
                for (int i = 0; i < nr; i++)
                    for (int j = 0; j < bb; j++) {
                        const int64_t n0 = (b + j) * 16;
                        const int lanes = N - n0 < 16 ? (int)(N - n0) : 16;
                        const float *o = out + (i * bb + j) * 16;
                        float *yr = y + (r + i) * N + n0;
                        for (int l = 0; l < lanes; l++) yr[l] = bias ? o[l] + bias[n0 + l] : o[l];
                    }
                b += bb;
            }
        }
    }
}

/* How linear and int8_linear share R rows x NB blocks among at most ``threads``: split_n ways over the blocks
 * (at least 4 blocks each), and split_r ways over the rows where threads are left; thread t of split_n *
 * split_r takes rows [*r0, *r1) and blocks [*b0, *b1). */
typedef struct {
    int64_t split_n, split_r;
} work_split;

static work_split split_work(int64_t R, int64_t NB, int threads) {
    work_split w;
    w.split_n = NB / 4 < threads ? (NB / 4 > 0 ? NB / 4 : 1) : threads;
    w.split_r = threads / w.split_n < R ? threads / w.split_n : (R > 0 ? R : 1);
    return w;
}

static void work_part(work_split w, int64_t t, int64_t R, int64_t NB, int64_t *r0, int64_t *r1, int64_t *b0,
                      int64_t *b1) {
    const int64_t tn = t % w.split_n, tr = t / w.split_n;
    *r0 = R * tr / w.split_r;
    *r1 = R * (tr + 1) / w.split_r;
    *b0 = NB * tn / w.split_n;
    *b1 = NB * (tn + 1) / w.split_n;
}

/* linear(x, packed, bias, y, R, K, N, threads[, isa]): x [R, K], bias [N] or 0, y [R, N]; contiguous float32.
 * The threads split the blocks, and the rows too where there are fewer than 4 blocks a thread. isa: the tiles
 * of one instruction set ("avx512", "avx2", "base"; for tests), else the best this CPU runs. */
static PyObject *linear(PyObject *self, PyObject *args) {
    unsigned long long x, packed, bias, y;
    long long R, K, N;
    int threads;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "KKKKLLLi|z", &x, &packed, &bias, &y, &R, &K, &N, &threads, &isa)) return NULL;
    if (R < 0 || K <= 0 || N <= 0 || threads <= 0) {
        PyErr_SetString(PyExc_ValueError, "linear: bad shape");
        return NULL;
    }
    static const linear_tiles *best = NULL;
    if (!best) best = tiles_for(NULL);
    const linear_tiles *tiles = isa ? tiles_for(isa) : best;
    if (!tiles) {
        PyErr_Format(PyExc_ValueError, "linear: this CPU cannot run the %s tiles", isa);
        return NULL;
    }
    const int64_t NB = (N + 15) / 16;
    const work_split split = split_work(R, NB, MAX_TEAM(threads));
    const float *xp = (const float *)(uintptr_t)x, *wp = (const float *)(uintptr_t)packed;
    const float *bp = (const float *)(uintptr_t)bias;
    float *yp = (float *)(uintptr_t)y;
    Py_BEGIN_ALLOW_THREADS
#ifdef _OPENMP
#pragma omp parallel num_threads((int)(split.split_n * split.split_r)) if (split.split_n * split.split_r > 1)
#endif
    {
        const int64_t t = TEAM_MEMBER();
        int64_t r0, r1, b0, b1;
        work_part(split, t, R, NB, &r0, &r1, &b0, &b1);
        linear_part(tiles, xp, wp, bp, yp, K, N, r0, r1, b0, b1);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---- int8_linear ---- */

#ifdef HAVE_INT8_KERNELS
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* One tile: RB rows of x as u8 (q + 128, Kp = 4 * Kq bytes a row) against BB blocks (block j at wb + j * Kq * 64)
 * -> out[RB][BB][16] int32: sum over k of (q + 128) * w. Each accumulator a variable of its own (as the float
 * tiles'). */
#define VNNI_ROW(r, A, B, C, D)                                                                                 \
    if (rows > r) {                                                                                             \
        int32_t four;                                                                                           \
        memcpy(&four, x + r * Kp + 4 * kq, 4);                                                                  \
        const __m512i xb = _mm512_set1_epi32(four);                                                             \
        A = _mm512_dpbusd_epi32(A, xb, w0);                                                                     \
        if (wide > 1) {                                                                                         \
            B = _mm512_dpbusd_epi32(B, xb, w1);                                                                 \
            C = _mm512_dpbusd_epi32(C, xb, w2);                                                                 \
            D = _mm512_dpbusd_epi32(D, xb, w3);                                                                 \
        }                                                                                                       \
    }
#define VNNI_STORE(r, A, B, C, D) TILE_STORE(_mm512_storeu_si512, r, A, B, C, D)
#define INT8_TILE(NAME, RB, BB)                                                                                 \
    VNNI static void NAME(const uint8_t *x, int64_t Kp, const int8_t *wb, int64_t Kq, int32_t *out) {          \
        const int rows = RB, wide = BB;                                                                         \
        const __m512i z = _mm512_setzero_si512();                                                               \
        __m512i a0 = z, b0 = z, c0 = z, d0 = z, a1 = z, b1 = z, c1 = z, d1 = z;                                 \
        __m512i a2 = z, b2 = z, c2 = z, d2 = z, a3 = z, b3 = z, c3 = z, d3 = z;                                 \
        for (int64_t kq = 0; kq < Kq; kq++) {                                                                   \
            const __m512i w0 = _mm512_loadu_si512(wb + kq * 64);                                               \
            const __m512i w1 = wide > 1 ? _mm512_loadu_si512(wb + (Kq + kq) * 64) : z;                          \
            const __m512i w2 = wide > 1 ? _mm512_loadu_si512(wb + (2 * Kq + kq) * 64) : z;                      \
            const __m512i w3 = wide > 1 ? _mm512_loadu_si512(wb + (3 * Kq + kq) * 64) : z;                      \
            VNNI_ROW(0, a0, b0, c0, d0) VNNI_ROW(1, a1, b1, c1, d1)                                             \
            VNNI_ROW(2, a2, b2, c2, d2) VNNI_ROW(3, a3, b3, c3, d3)                                             \
        }                                                                                                       \
        VNNI_STORE(0, a0, b0, c0, d0) VNNI_STORE(1, a1, b1, c1, d1)                                             \
        VNNI_STORE(2, a2, b2, c2, d2) VNNI_STORE(3, a3, b3, c3, d3)                                             \
    }

typedef void (*int8_tile)(const uint8_t *, int64_t, const int8_t *, int64_t, int32_t *);
/* 4 rows x 4 blocks: 16 accumulators (6 x 4 spilled and ran 1.5x slower at 64-256 rows) */
INT8_TILE(i8_w1, 1, 4) INT8_TILE(i8_w2, 2, 4) INT8_TILE(i8_w3, 3, 4) INT8_TILE(i8_w4, 4, 4)
INT8_TILE(i8_n1, 1, 1) INT8_TILE(i8_n2, 2, 1) INT8_TILE(i8_n3, 3, 1) INT8_TILE(i8_n4, 4, 1)

/* AVX2 without VNNI: the same sums, exactly, from vpmaddwd on both operands widened to 16 bits (u8 * s8 pairs
 * summed in int32: no saturation, unlike vpmaddubsw). One block (4 registers of 4 outputs x 4 inputs) by up to
 * 2 rows: 8 accumulators of 16 registers; each register's 8 lanes are 4 outputs' two pair sums, added at the
 * end. */
#define AVX2I __attribute__((target("avx2,fma")))
#define AVX2_INT8_ROW(r, A, B, C, D)                                                                            \
    if (rows > r) {                                                                                             \
        int32_t four;                                                                                           \
        memcpy(&four, x + r * Kp + 4 * kq, 4);                                                                  \
        const __m256i xb = _mm256_broadcastq_epi64(_mm_cvtepu8_epi16(_mm_cvtsi32_si128(four)));                 \
        A = _mm256_add_epi32(A, _mm256_madd_epi16(w0, xb));                                                     \
        B = _mm256_add_epi32(B, _mm256_madd_epi16(w1, xb));                                                     \
        C = _mm256_add_epi32(C, _mm256_madd_epi16(w2, xb));                                                     \
        D = _mm256_add_epi32(D, _mm256_madd_epi16(w3, xb));                                                     \
    }
#define AVX2_INT8_STORE(r, A, B, C, D)                                                                          \
    if (rows > r) {                                                                                             \
        const __m256i parts[4] = {A, B, C, D};                                                                  \
        for (int j = 0; j < 4; j++) {                                                                           \
            int32_t lanes[8];                                                                                   \
            _mm256_storeu_si256((__m256i *)lanes, parts[j]);                                                    \
            for (int o = 0; o < 4; o++) out[r * 16 + 4 * j + o] = lanes[2 * o] + lanes[2 * o + 1];             \
        }                                                                                                       \
    }
#define INT8_TILE_AVX2(NAME, RB)                                                                                 \
    AVX2I static void NAME(const uint8_t *x, int64_t Kp, const int8_t *wb, int64_t Kq, int32_t *out) {          \
        const int rows = RB;                                                                                    \
        const __m256i z = _mm256_setzero_si256();                                                               \
        __m256i a0 = z, b0 = z, c0 = z, d0 = z, a1 = z, b1 = z, c1 = z, d1 = z;                                 \
        for (int64_t kq = 0; kq < Kq; kq++) {                                                                   \
            const int8_t *w = wb + kq * 64;                                                                     \
            const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)w));                      \
            const __m256i w1 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 16)));               \
            const __m256i w2 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 32)));               \
            const __m256i w3 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 48)));               \
            AVX2_INT8_ROW(0, a0, b0, c0, d0) AVX2_INT8_ROW(1, a1, b1, c1, d1)                                   \
        }                                                                                                       \
        AVX2_INT8_STORE(0, a0, b0, c0, d0) AVX2_INT8_STORE(1, a1, b1, c1, d1)                                   \
    }
INT8_TILE_AVX2(i8_avx2_1, 1) INT8_TILE_AVX2(i8_avx2_2, 2)

typedef void (*int8_finish)(const int32_t *, const int32_t *, const float *, const float *, float, float *, int);
typedef struct {
    int bb, rb_max;
    int8_tile wide[5], narrow[5];  /* [rows]: bb blocks, 1 block */
    int8_finish epilogue;
} int8_tiles;

static int vnni_here(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vnni");
}

static int avx2_here(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

/* Rows r0..r1 of x [R, K] -> u8 [R, Kp]: q + 128 with q = rint(x * 127 / a), a = max |x_r| (at least FLT_MIN), the
 * padding 128 (q = 0); row_scale[r] = a / 127. A row holding NaN or an infinity gets q = 0 and a NaN scale: its
 * outputs are NaN, the other rows' untouched. */
CLONES
static void int8_quantize_rows(const float *x, int64_t r0, int64_t r1, int64_t K, int64_t Kp, uint8_t *q,
                               float *row_scale) {
    for (int64_t r = r0; r < r1; r++) {
        const float *row = x + r * K;
        uint8_t *out = q + r * Kp;
        float top = absmax(row, K);
        int finite = 1;
        for (int64_t k = 0; k < K; k++) finite &= isfinite(row[k]) != 0;
        if (!finite) {
            memset(out, 128, (size_t)Kp);
            row_scale[r] = NAN;
            continue;
        }
        top = top < FLT_MIN ? FLT_MIN : top;
        const float inv = 127.0f / top;
        for (int64_t k = 0; k < K; k++) {
            float v = rintf(row[k] * inv);
            v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
            out[k] = (uint8_t)((int)v + 128);
        }
        memset(out + K, 128, (size_t)(Kp - K));
        row_scale[r] = top / 127.0f;
    }
}

/* 16 outputs (the first ``lanes`` of them) of one row: (sum - 128 * colsum) * (a * w_scale) (+ bias), the same
 * operations in the same order for every lane, masked where a block is the last, short one. */
VNNI static void int8_epilogue(const int32_t *sums, const int32_t *colsum, const float *w_scale, const float *bias,
                               float a, float *y, int lanes) {
    const __mmask16 m = lanes == 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << lanes) - 1);
    const __m512i total = _mm512_sub_epi32(_mm512_loadu_si512(sums),
                                           _mm512_slli_epi32(_mm512_maskz_loadu_epi32(m, colsum), 7));
    const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(a), _mm512_maskz_loadu_ps(m, w_scale));
    const __m512 v = bias ? _mm512_fmadd_ps(_mm512_cvtepi32_ps(total), scale, _mm512_maskz_loadu_ps(m, bias))
                          : _mm512_mul_ps(_mm512_cvtepi32_ps(total), scale);
    _mm512_mask_storeu_ps(y, m, v);
}

/* The same epilogue in two halves of 8 lanes: the same bits. */
AVX2I static void int8_epilogue_avx2(const int32_t *sums, const int32_t *colsum, const float *w_scale,
                                     const float *bias, float a, float *y, int lanes) {
    int32_t c[16] = {0};
    float ws[16] = {0}, b[16] = {0}, out[16];
    memcpy(c, colsum, (size_t)lanes * sizeof(int32_t));
    memcpy(ws, w_scale, (size_t)lanes * sizeof(float));
    if (bias) memcpy(b, bias, (size_t)lanes * sizeof(float));
    for (int h = 0; h < 16; h += 8) {
        const __m256i total = _mm256_sub_epi32(_mm256_loadu_si256((const __m256i *)(sums + h)),
                                               _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(c + h)), 7));
        const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(a), _mm256_loadu_ps(ws + h));
        const __m256 v = bias ? _mm256_fmadd_ps(_mm256_cvtepi32_ps(total), scale, _mm256_loadu_ps(b + h))
                              : _mm256_mul_ps(_mm256_cvtepi32_ps(total), scale);
        _mm256_storeu_ps(out + h, v);
    }
    memcpy(y, out, (size_t)lanes * sizeof(float));
}

static const int8_tiles vnni_int8 = {4, 4, {NULL, i8_w1, i8_w2, i8_w3, i8_w4}, {NULL, i8_n1, i8_n2, i8_n3, i8_n4},
                                     int8_epilogue};
static const int8_tiles avx2_int8 = {1, 2, {NULL, i8_avx2_1, i8_avx2_2}, {NULL, i8_avx2_1, i8_avx2_2},
                                     int8_epilogue_avx2};

/* The int8 tiles for an instruction set by name ("avx512vnni", "avx2"; NULL: the best this CPU runs), or NULL
 * where this CPU cannot run them. */
static const int8_tiles *int8_tiles_for(const char *isa) {
    if (!isa) return vnni_here() ? &vnni_int8 : avx2_here() ? &avx2_int8 : NULL;
    if (!strcmp(isa, "avx512vnni")) return vnni_here() ? &vnni_int8 : NULL;
    if (!strcmp(isa, "avx2")) return avx2_here() ? &avx2_int8 : NULL;
    return NULL;
}

/* Rows r0..r1 against blocks b0..b1, then the epilogue: (sum - 128 * colsum[n]) * row_scale[r] * w_scale[n]
 * (+ bias[n]). */
static void int8_part(const int8_tiles *t, const uint8_t *q, const float *row_scale, const int8_t *w,
                      const int32_t *colsum, const float *w_scale, const float *bias, float *y, int64_t Kq, int64_t N,
                      int64_t r0, int64_t r1, int64_t b0, int64_t b1) {
    int32_t out[4 * 4 * 16];
    const int64_t Kp = 4 * Kq;
    for (int64_t b = b0; b < b1;) {
        const int bb = b1 - b >= t->bb ? t->bb : 1;
        for (int64_t r = r0; r < r1; r += t->rb_max) {
            const int nr = r1 - r < t->rb_max ? (int)(r1 - r) : t->rb_max;
            (bb == t->bb ? t->wide : t->narrow)[nr](q + r * Kp, Kp, w + b * Kq * 64, Kq, out);
            for (int i = 0; i < nr; i++)
                for (int j = 0; j < bb; j++) {
                    const int64_t n0 = (b + j) * 16;
                    t->epilogue(out + (i * bb + j) * 16, colsum + n0, w_scale + n0, bias ? bias + n0 : NULL,
                                  row_scale[r + i], y + (r + i) * N + n0, N - n0 < 16 ? (int)(N - n0) : 16);
                }
        }
        b += bb;
    }
}
#endif

/* int8_linear(x, packed, colsum, w_scale, bias, y, R, K, N, threads[, isa]): x [R, K] float32, packed
 * [ceil(N / 16), ceil(K / 4), 16, 4] int8, colsum [N] int32 (each output's sum of its int8 weights), w_scale [N]
 * float32, bias [N] or 0, y [R, N] float32; all contiguous. AVX-512 VNNI or AVX2 tiles (int8_linear_here());
 * isa: one of them by name (for tests). */
static PyObject *int8_linear(PyObject *self, PyObject *args) {
    unsigned long long x, packed, colsum, w_scale, bias, y;
    long long R, K, N;
    int threads;
    const char *isa = NULL;
    if (!PyArg_ParseTuple(args, "KKKKKKLLLi|z", &x, &packed, &colsum, &w_scale, &bias, &y, &R, &K, &N, &threads,
                          &isa))
        return NULL;
    if (R < 0 || K <= 0 || N <= 0 || threads <= 0) {
        PyErr_SetString(PyExc_ValueError, "int8_linear: bad shape");
        return NULL;
    }
#ifndef HAVE_INT8_KERNELS
    PyErr_SetString(PyExc_ValueError, "int8_linear: built for x86-64 with GCC only");
    return NULL;
#else
    const int8_tiles *tiles = int8_tiles_for(isa);
    if (!tiles) {
        PyErr_Format(PyExc_ValueError, "int8_linear: this CPU cannot run the %s tiles", isa ? isa : "int8 (AVX2)");
        return NULL;
    }
    const int64_t Kq = (K + 3) / 4, NB = (N + 15) / 16;
    uint8_t *q = malloc((size_t)(R * 4 * Kq) + 1);
    float *row_scale = malloc((size_t)R * sizeof(float) + 1);
    if (!q || !row_scale) {
        free(q);
        free(row_scale);
        return PyErr_NoMemory();
    }
    const work_split split = split_work(R, NB, MAX_TEAM(threads));
    Py_BEGIN_ALLOW_THREADS
#ifdef _OPENMP
#pragma omp parallel num_threads((int)(split.split_n * split.split_r)) if (split.split_n * split.split_r > 1)
#endif
    {
        const int64_t t = TEAM_MEMBER(), n = TEAM_SIZE();
        /* each thread quantizes its share of the rows, and all wait for the whole input */
        int8_quantize_rows((const float *)(uintptr_t)x, R * t / n, R * (t + 1) / n, K, 4 * Kq, q, row_scale);
#ifdef _OPENMP
#pragma omp barrier
#endif
        int64_t r0, r1, b0, b1;
        work_part(split, t, R, NB, &r0, &r1, &b0, &b1);
        int8_part(tiles, q, row_scale, (const int8_t *)(uintptr_t)packed, (const int32_t *)(uintptr_t)colsum,
                  (const float *)(uintptr_t)w_scale, (const float *)(uintptr_t)bias, (float *)(uintptr_t)y, Kq, N,
                  r0, r1, b0, b1);
    }
    Py_END_ALLOW_THREADS
    free(q);
    free(row_scale);
#endif
    Py_RETURN_NONE;
}

/* linear_here(): the instruction set linear's tiles use here ("avx512", "avx2", "base"). */
static PyObject *linear_here(PyObject *self, PyObject *args) {
    const linear_tiles *t = tiles_for(NULL);
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    if (t == &avx512_tiles) return PyUnicode_FromString("avx512");
    if (t == &avx2_tiles) return PyUnicode_FromString("avx2");
#endif
    return PyUnicode_FromString(t == &base_tiles ? "base" : "?");
}

/* int8_linear_here(): the best instruction set int8_linear runs here ("avx512vnni", "avx2"), or None. */
static PyObject *int8_linear_here(PyObject *self, PyObject *args) {
#ifdef HAVE_INT8_KERNELS
    if (vnni_here()) return PyUnicode_FromString("avx512vnni");
    if (avx2_here()) return PyUnicode_FromString("avx2");
#endif
    Py_RETURN_NONE;
}

/* ---- rms_norm ---- */

/* Rows r0..r1: the mean of squares (dot, in 16 lanes), then x * (1 / sqrt(mean + eps)) * weight, in that order
 * (transformers' LlamaRMSNorm: the normalised row first, then the weight). */
CLONES
static void rms_norm_rows(const float *x, const float *weight, float *y, int64_t r0, int64_t r1, int64_t cols,
                          float eps) {
    for (int64_t r = r0; r < r1; r++) {
        const float *row = x + r * cols;
        float *out = y + r * cols;
        const float inv = 1.0f / sqrtf(dot(row, row, cols) / (float)cols + eps);
        for (int64_t k = 0; k < cols; k++) out[k] = row[k] * inv * weight[k];
    }
}

/* rms_norm(x, weight, y, rows, cols, eps, threads): x, y [rows, cols], weight [cols]; contiguous float32. */
static PyObject *rms_norm(PyObject *self, PyObject *args) {
    unsigned long long x, weight, y;
    long long rows, cols;
    double eps;
    int threads;
    if (!PyArg_ParseTuple(args, "KKKLLdi", &x, &weight, &y, &rows, &cols, &eps, &threads)) return NULL;
    if (rows < 0 || cols <= 0 || threads <= 0) {
        PyErr_SetString(PyExc_ValueError, "rms_norm: bad shape");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
#ifdef _OPENMP
    const int team = rows * cols >= 65536 && threads > 1 ? threads : 1;
#pragma omp parallel num_threads(team) if (team > 1)
#endif
    {
        const int64_t t = TEAM_MEMBER(), n = TEAM_SIZE();
        rms_norm_rows((const float *)(uintptr_t)x, (const float *)(uintptr_t)weight, (float *)(uintptr_t)y,
                      rows * t / n, rows * (t + 1) / n, cols, (float)eps);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* Each row divided by its largest |x|: that magnitude NaN if the row holds a NaN (as torch's amax), at least
 * FLT_MIN (clamp_min). The maximum and the NaN test are separate reductions, so that both vectorize. */
CLONES
static void int8_rows_body(const float *x, float *out, float *scales, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        float *o = out + r * cols;
        float top = absmax(row, cols);
        int nan = 0;
        for (int64_t j = 0; j < cols; j++) nan |= row[j] != row[j];
        top = nan ? NAN : (top < FLT_MIN ? FLT_MIN : top);
        scales[r] = top;
        for (int64_t j = 0; j < cols; j++) o[j] = row[j] / top;
    }
    float *sentinel = out + rows * cols;
    memset(sentinel, 0, (size_t)cols * sizeof(float));
    sentinel[0] = 1.0f;
    sentinel[cols - 1] = -1.0f;
}

/* int8_rows(x, out, scales, rows, cols): x [rows, cols] -> out [rows + 1, cols], scales [rows]; contiguous float32. */
static PyObject *int8_rows(PyObject *self, PyObject *args) {
    unsigned long long x, out, scales;
    long long rows, cols;
    if (!PyArg_ParseTuple(args, "KKKLL", &x, &out, &scales, &rows, &cols)) return NULL;
    if (rows < 0 || cols < 2) {
        PyErr_SetString(PyExc_ValueError, "int8_rows: bad shape");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    int8_rows_body((const float *)(uintptr_t)x, (float *)(uintptr_t)out, (float *)(uintptr_t)scales, rows, cols);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"int8_rows", int8_rows, METH_VARARGS, "int8_rows(x, out, scales, rows, cols): see worker/quant.py"},
    {"linear", linear, METH_VARARGS, "linear(x, packed, bias, y, R, K, N, threads[, isa]): see worker/linear.py"},
    {"int8_linear", int8_linear, METH_VARARGS,
     "int8_linear(x, packed, colsum, w_scale, bias, y, R, K, N, threads[, isa]): see worker/quant.py"},
    {"linear_here", linear_here, METH_NOARGS, "the instruction set linear runs here"},
    {"int8_linear_here", int8_linear_here, METH_NOARGS, "the instruction set int8_linear runs here, or None"},
    {"rms_norm", rms_norm, METH_VARARGS, "rms_norm(x, weight, y, rows, cols, eps, threads): see worker/models/llama.py"},
    {"decode_attention", decode_attention, METH_VARARGS,
     "decode_attention(q, k_pool, v_pool, gather, mask, out, B, H, KVH, D, L, scale[, threads]): see "
     "worker/cpu_attention.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&module); }
