/* geojax_torus.h: exact top-k search over packed b-bit flat-torus codes, C99, single header.
 *
 * Stowell 2026, "Torus embeddings", section 4: integers with overflow are a torus. A b-bit code of an angle
 * t (in turns) is round(2^b t) mod 2^b; 8/b codes share a byte, little-endian (code i of a byte sits in bits
 * i*b ... i*b + b - 1). The distance of two codes a, c is the wraparound L1
 *     sum_k min(d_k, 2^b - d_k),  d_k = (a_k - c_k) mod 2^b,
 * computed here on 32-bit words, 32/b codes at a time (SWAR), with integer arithmetic only: no floating
 * point, no allocation, no library calls beyond memcpy. The results equal geojax.search.torus_topk:
 * ascending distance, ties to the lower database index.
 *
 * Use: in ONE C file,
 *     #define GEOJAX_TORUS_IMPLEMENTATION
 *     #include "geojax_torus.h"
 * and include it plainly elsewhere (define GEOJAX_TORUS_STATIC as well to make every function static).
 * The codes.gjt files of `python -m train.export` can be read from memory with gjt_open.
 */
#ifndef GEOJAX_TORUS_H
#define GEOJAX_TORUS_H

#include <stddef.h>
#include <stdint.h>

#ifdef GEOJAX_TORUS_STATIC
#define GJT_DEF static
#else
#define GJT_DEF extern
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* A database of packed codes: count rows of row_bytes bytes, bits per angle, dim angles per row. */
typedef struct {
    uint32_t bits;
    uint32_t dim;
    uint32_t row_bytes;
    uint64_t count;
    const uint8_t *codes;  /* count * row_bytes bytes */
    const uint8_t *labels; /* count little-endian int32 (read them with gjt_label), or NULL */
} gjt_db;

/* Read the fixed header of a codes.gjt image held in memory (len bytes). 0 on success, -1 otherwise. The
 * database points into buf; nothing is copied. */
GJT_DEF int gjt_open(const uint8_t *buf, size_t len, gjt_db *db);

/* Label of row i of a database read by gjt_open. */
GJT_DEF int32_t gjt_label(const gjt_db *db, uint64_t i);

/* Wraparound L1 distance of two packed codes of row_bytes bytes and bits in {1, 2, 4, 8}. */
GJT_DEF uint32_t gjt_distance(const uint8_t *a, const uint8_t *c, uint32_t row_bytes, uint32_t bits);

/* The k nearest of n codes to one query: out_dist[k] ascending, out_index[k] (ties: lower index first).
 * Returns the number of results, min(k, n); bits must be 1, 2, 4 or 8 (else 0 results). n < 2^32. */
GJT_DEF uint32_t gjt_topk(const uint8_t *query, const uint8_t *codes, uint64_t n, uint32_t row_bytes,
                          uint32_t bits, uint32_t k, uint32_t *out_dist, uint32_t *out_index);

/* gjt_topk for nq queries stored one after another; row q of the outputs starts at q * k. */
GJT_DEF uint32_t gjt_topk_batch(const uint8_t *queries, uint64_t nq, const uint8_t *codes, uint64_t n,
                                uint32_t row_bytes, uint32_t bits, uint32_t k, uint32_t *out_dist,
                                uint32_t *out_index);

#ifdef __cplusplus
}
#endif

#ifdef GEOJAX_TORUS_IMPLEMENTATION

#include <string.h>

static inline uint32_t gjt__load32(const uint8_t *p) {
    /* little-endian, whatever the host: byte j of the word is p[j] */
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint64_t gjt__load64(const uint8_t *p) {
    return (uint64_t)gjt__load32(p) | ((uint64_t)gjt__load32(p + 4) << 32);
}

/* Masks of one lane bit per bits-wide lane: the lowest and the highest. */
static inline uint32_t gjt__low(uint32_t bits) {
    return bits == 8 ? 0x01010101u : bits == 4 ? 0x11111111u : bits == 2 ? 0x55555555u : 0xFFFFFFFFu;
}

static inline uint32_t gjt__high(uint32_t bits) {
    return bits == 8 ? 0x80808080u : bits == 4 ? 0x88888888u : bits == 2 ? 0xAAAAAAAAu : 0xFFFFFFFFu;
}

/* Sum over the 32/bits lanes of min(d, 2^b - d), d = (a - c) mod 2^b per lane. The subtraction borrows
 * into no neighbouring lane; min(d, 2^b - d) = (d XOR (2^b - 1) s) + s with s = [d >= 2^(b-1)] never
 * carries out of its lane; neighbouring lanes are then added pairwise up to one 32-bit total. With
 * bits = 1 the masks are all ones and the same steps give popcount(a XOR c). */
static inline uint32_t gjt__word(uint32_t a, uint32_t c, uint32_t bits, uint32_t hi, uint32_t lo) {
    uint32_t d = ((a | hi) - (c & ~hi)) ^ ((a ^ ~c) & hi);
    uint32_t s = (d >> (bits - 1)) & lo;
    uint32_t r = (d ^ (s * ((1u << bits) - 1u))) + s;
    if (bits < 2) r = (r & 0x55555555u) + ((r >> 1) & 0x55555555u);
    if (bits < 4) r = (r & 0x33333333u) + ((r >> 2) & 0x33333333u);
    if (bits < 8) r = (r & 0x0F0F0F0Fu) + ((r >> 4) & 0x0F0F0F0Fu);
    r = (r & 0x00FF00FFu) + ((r >> 8) & 0x00FF00FFu);
    return (r & 0xFFFFu) + (r >> 16);
}

static int gjt__bits_ok(uint32_t bits) { return bits == 1 || bits == 2 || bits == 4 || bits == 8; }

static inline uint32_t gjt__distance(const uint8_t *a, const uint8_t *c, uint32_t row_bytes, uint32_t bits) {
    uint32_t hi = gjt__high(bits), lo = gjt__low(bits), total = 0, j = 0;
    for (; j + 4 <= row_bytes; j += 4) total += gjt__word(gjt__load32(a + j), gjt__load32(c + j), bits, hi, lo);
    if (j < row_bytes) { /* tail bytes; the zero bytes appended add no distance */
        uint8_t ta[4] = {0, 0, 0, 0}, tc[4] = {0, 0, 0, 0};
        memcpy(ta, a + j, row_bytes - j);
        memcpy(tc, c + j, row_bytes - j);
        total += gjt__word(gjt__load32(ta), gjt__load32(tc), bits, hi, lo);
    }
    return total;
}

GJT_DEF uint32_t gjt_distance(const uint8_t *a, const uint8_t *c, uint32_t row_bytes, uint32_t bits) {
    return gjt__bits_ok(bits) ? gjt__distance(a, c, row_bytes, bits) : 0;
}

/* The scan, inlined below once per constant bits so that the compiler folds the lane masks and steps. */
static inline uint32_t gjt__topk(const uint8_t *query, const uint8_t *codes, uint64_t n, uint32_t row_bytes,
                                 uint32_t bits, uint32_t k, uint32_t *out_dist, uint32_t *out_index) {
    uint32_t found = 0;
    uint64_t i;
    for (i = 0; i < n; ++i) {
        uint32_t d = gjt__distance(query, codes + i * (uint64_t)row_bytes, row_bytes, bits), pos;
        if (found == k && d >= out_dist[k - 1]) continue; /* a tie keeps the earlier (lower) index */
        pos = found < k ? found++ : k - 1;
        while (pos > 0 && out_dist[pos - 1] > d) { /* insertion after every entry <= d */
            out_dist[pos] = out_dist[pos - 1];
            out_index[pos] = out_index[pos - 1];
            --pos;
        }
        out_dist[pos] = d;
        out_index[pos] = (uint32_t)i;
    }
    return found;
}

GJT_DEF uint32_t gjt_topk(const uint8_t *query, const uint8_t *codes, uint64_t n, uint32_t row_bytes,
                          uint32_t bits, uint32_t k, uint32_t *out_dist, uint32_t *out_index) {
    if (k == 0) return 0;
    switch (bits) {
        case 8: return gjt__topk(query, codes, n, row_bytes, 8, k, out_dist, out_index);
        case 4: return gjt__topk(query, codes, n, row_bytes, 4, k, out_dist, out_index);
        case 2: return gjt__topk(query, codes, n, row_bytes, 2, k, out_dist, out_index);
        case 1: return gjt__topk(query, codes, n, row_bytes, 1, k, out_dist, out_index);
        default: return 0;
    }
}

GJT_DEF uint32_t gjt_topk_batch(const uint8_t *queries, uint64_t nq, const uint8_t *codes, uint64_t n,
                                uint32_t row_bytes, uint32_t bits, uint32_t k, uint32_t *out_dist,
                                uint32_t *out_index) {
    uint32_t found = 0;
    uint64_t q;
    for (q = 0; q < nq; ++q)
        found = gjt_topk(queries + q * (uint64_t)row_bytes, codes, n, row_bytes, bits, k, out_dist + q * k,
                         out_index + q * k);
    return found;
}

GJT_DEF int gjt_open(const uint8_t *buf, size_t len, gjt_db *db) {
    static const uint8_t magic[8] = {'G', 'J', 'T', 'O', 'R', 'U', 'S', 0};
    uint64_t codes_offset, labels_offset;
    if (len < 36 || memcmp(buf, magic, 8) != 0 || gjt__load32(buf + 8) != 1u) return -1;
    db->bits = gjt__load32(buf + 12);
    db->dim = gjt__load32(buf + 16);
    db->row_bytes = gjt__load32(buf + 20);
    db->count = gjt__load64(buf + 24);
    if (!gjt__bits_ok(db->bits) || (uint64_t)db->row_bytes * 8u != (uint64_t)db->dim * db->bits) return -1;
    codes_offset = (36u + (uint64_t)gjt__load32(buf + 32) + 7u) / 8u * 8u;
    labels_offset = (codes_offset + db->count * db->row_bytes + 7u) / 8u * 8u;
    if (labels_offset + 4u * db->count > len) return -1;
    db->codes = buf + codes_offset;
    db->labels = buf + labels_offset;
    return 0;
}

GJT_DEF int32_t gjt_label(const gjt_db *db, uint64_t i) {
    uint32_t u = gjt__load32(db->labels + 4u * i);
    return u <= 0x7FFFFFFFu ? (int32_t)u : -(int32_t)(0xFFFFFFFFu - u) - 1;
}

#endif /* GEOJAX_TORUS_IMPLEMENTATION */
#endif /* GEOJAX_TORUS_H */
