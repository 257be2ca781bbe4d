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

/* One row: out [H, D] for its H = KVH * G query heads. Each key's slot (KVH heads of D floats, contiguous) is read
 * whole, once, in order; scores: H * L floats of scratch, head-major. */
CLONES
static void attend_row(const float *q, const float *k_pool, const float *v_pool, const int64_t *slots,
                       const uint8_t *mask, float *out, float *scores, int64_t KVH, int64_t G, int64_t D, int64_t L,
                       float scale) {
    const int64_t H = KVH * G, slot_stride = KVH * D;
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

/* decode_attention(q, k_pool, v_pool, gather, mask, out, B, H, KVH, D, L, scale)
 * Pointers as integers (tensor.data_ptr()): q [B, H, D], pools [slots, KVH, D], gather [B, L] int64,
 * mask [B, L] uint8 or 0 for none, out [B, H, D]; all contiguous float32. */
static PyObject *decode_attention(PyObject *self, PyObject *args) {
    unsigned long long q, k_pool, v_pool, gather, mask, out;
    long long B, H, KVH, D, L;
    double scale;
    if (!PyArg_ParseTuple(args, "KKKKKKLLLLLd", &q, &k_pool, &v_pool, &gather, &mask, &out, &B, &H, &KVH, &D,
                          &L, &scale))
        return NULL;
    if (B < 0 || H <= 0 || KVH <= 0 || H % KVH || D <= 0 || L <= 0) {
        PyErr_SetString(PyExc_ValueError, "decode_attention: bad shape");
        return NULL;
    }
    const int64_t G = H / KVH;
    float *scores = malloc((size_t)(H * L) * sizeof(float));
    if (!scores) return PyErr_NoMemory();
    Py_BEGIN_ALLOW_THREADS
    for (int64_t b = 0; b < B; b++)
        attend_row((const float *)(uintptr_t)q + b * H * D, (const float *)(uintptr_t)k_pool,
                   (const float *)(uintptr_t)v_pool, (const int64_t *)(uintptr_t)gather + b * L,
                   mask ? (const uint8_t *)(uintptr_t)mask + b * L : NULL, (float *)(uintptr_t)out + b * H * D,
                   scores, KVH, G, D, L, (float)scale);
    Py_END_ALLOW_THREADS
    free(scores);
    Py_RETURN_NONE;
}

/* Each row divided by its largest |x|: that magnitude NaN if the row holds a NaN (as torch's amax), at least
 * FLT_MIN (clamp_min). The maximum and the NaN test are separate reductions, so that both vectorize. */
CLONES
static void int8_rows_body(const float *x, float *out, float *scales, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * cols;
        float *o = out + r * cols;
        float lanes[16] = {0};
        int nan = 0;
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
        for (j = 0; j < cols; j++) nan |= row[j] != row[j];
        float top = 0.0f;
        for (int i = 0; i < 16; i++) top = lanes[i] > top ? lanes[i] : top;
        top = nan ? NAN : (top < FLT_MIN ? FLT_MIN : top);
        scales[r] = top;
        for (j = 0; j < cols; j++) o[j] = row[j] / top;
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
    {"decode_attention", decode_attention, METH_VARARGS,
     "decode_attention(q, k_pool, v_pool, gather, mask, out, B, H, KVH, D, L, scale): see worker/cpu_attention.py"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cpu_kernels", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cpu_kernels(void) { return PyModule_Create(&module); }
