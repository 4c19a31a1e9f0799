"""geojax.search kernels equal a naive numpy scan (distances and indices, ties to the lower index)."""

import os
import re
import subprocess
import sys

import jax
import numpy as np
import pytest

from geojax import quantize, search
from geojax.search import _kernels, scan


def naive_topk(dist: np.ndarray, k: int):
    order = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(dist, order, axis=1), order


def torus_numpy(a, b, p):
    diff = (a[:, None, :].astype(np.int64) - b[None].astype(np.int64)) % 256
    return (np.minimum(diff, 256 - diff) ** p).sum(-1)


def hamming_numpy(a, b):
    return np.unpackbits(a[:, None, :] ^ b[None], axis=-1).sum(-1)


def with_ties(rng, nq, n, width, mask=255):
    q = rng.integers(0, 256, (nq, width), dtype=np.uint8) & mask
    db = rng.integers(0, 256, (n, width), dtype=np.uint8) & mask
    db[n // 2] = db[1]  # duplicate rows: exact ties, the lower index must come first
    db[n - 1] = db[0]
    q[0] = db[1]
    return q, db


def test_torus_pinned_wraparound():
    a = np.array([[250]], np.uint8)
    b = np.array([[5]], np.uint8)
    assert int(search.torus_distances(a, b)[0, 0]) == 11
    assert int(search.torus_distances(a, b, p=2)[0, 0]) == 121


# (rows, k): one chunk, several chunks (chunk=512 below), large k; the grouped selection path is covered
# by tests/test_search_kernels.py (at these sizes k·group·16 > chunk selects single rows).
CASES = [(40, 5), (3000, 7), (2000, 300)]


@pytest.mark.parametrize("n,k", CASES)
@pytest.mark.parametrize("p,width", [(1, 13), (2, 8)])
def test_torus_topk_equals_numpy(n, k, p, width):
    rng = np.random.default_rng(n + p)
    q, db = with_ties(rng, 9, n, width, mask=0b11000011)
    d, i = search.torus_topk(q, db, k, p=p, chunk=512, query_block=4)
    ref_d, ref_i = naive_topk(torus_numpy(q, db, p), k)
    np.testing.assert_array_equal(np.asarray(d), ref_d)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    np.testing.assert_array_equal(search.torus_distances(q, db, p=p), torus_numpy(q, db, p))


def torus_bits_numpy(a, b, bits, p):
    """Naive b-bit wraparound Lp^p: unpack each byte's little-endian lanes with numpy, then loop-free sums."""
    per, levels = 8 // bits, 1 << bits

    def unpack(x):
        shifts = np.arange(0, 8, bits, dtype=np.uint8)
        return ((x[..., None] >> shifts) & (levels - 1)).reshape(x.shape[0], x.shape[1] * per)

    diff = (unpack(a)[:, None, :].astype(np.int64) - unpack(b)[None].astype(np.int64)) % levels
    return (np.minimum(diff, levels - diff) ** p).sum(-1)


def test_torus_bits_pinned_wraparound():
    # 4-bit: coordinates (15, 1) vs (1, 14): wraparound distances 2 and 3; nibbles little-endian in a byte.
    a = np.array([[15 | 1 << 4]], np.uint8)
    b = np.array([[1 | 14 << 4]], np.uint8)
    assert int(search.torus_distances(a, b, bits=4)[0, 0]) == 5
    assert int(search.torus_distances(a, b, bits=4, p=2)[0, 0]) == 13
    # 2-bit: 0 vs 2 is the antipode (distance 2), 3 vs 0 is one step.
    a2 = np.array([[0 | 3 << 2]], np.uint8)
    b2 = np.array([[2 | 0 << 2]], np.uint8)
    assert int(search.torus_distances(a2, b2, bits=2)[0, 0]) == 3


@pytest.mark.parametrize("bits", [1, 2, 4])
@pytest.mark.parametrize("n,k", CASES)
@pytest.mark.parametrize("p,width", [(1, 13), (2, 8)])
def test_torus_bits_topk_equals_numpy(bits, n, k, p, width):
    rng = np.random.default_rng(n + p + bits)
    q, db = with_ties(rng, 9, n, width)
    d, i = search.torus_topk(q, db, k, bits=bits, p=p, chunk=512, query_block=4)
    ref = torus_bits_numpy(q, db, bits, p)
    ref_d, ref_i = naive_topk(ref, k)
    np.testing.assert_array_equal(np.asarray(d), ref_d)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    np.testing.assert_array_equal(search.torus_distances(q, db, p=p, bits=bits), ref)


@pytest.mark.parametrize("bits", [2, 4])
def test_torus_bits_wide_codes_fall_back_to_bytes(bits):
    # Past 2,047 (4-bit) or 4,095 (2-bit) uint32 words the 16-bit SWAR lanes could overflow: the scan must
    # switch to one byte per coordinate and stay exact at the largest distances.
    width = 4 * _kernels.word_limit(bits) + 4
    rng = np.random.default_rng(bits)
    db = rng.integers(0, 256, (6, width), dtype=np.uint8)
    antipode = {4: 0x88, 2: 0xAA}[bits]  # every coordinate half a turn away from 0
    db[3] = antipode
    q = np.zeros((2, width), np.uint8)
    d, i = search.torus_topk(q, db, 6, bits=bits)
    ref_d, ref_i = naive_topk(torus_bits_numpy(q, db, bits, 1), 6)
    np.testing.assert_array_equal(np.asarray(d), ref_d)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    assert int(d[0, -1]) == width * (8 // bits) * (1 << (bits - 1))


def test_torus_bits_8_is_the_uint8_scan():
    rng = np.random.default_rng(5)
    q, db = with_ties(rng, 5, 300, 12)
    for a, b in zip(search.torus_topk(q, db, 4, bits=8), search.torus_topk(q, db, 4), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_torus_bits_rejects_other_widths():
    q = np.zeros((2, 4), np.uint8)
    with pytest.raises(ValueError, match="bits"):
        search.torus_topk(q, q, 1, bits=3)


@pytest.mark.parametrize("n,k", CASES)
def test_hamming_topk_equals_numpy(n, k):
    rng = np.random.default_rng(n)
    q, db = with_ties(rng, 9, n, 6, mask=0x11)  # 48 bits, 6 bytes: not a whole number of uint32 words
    d, i = search.hamming_topk(q, db, k, chunk=512, query_block=4)
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), k)
    np.testing.assert_array_equal(np.asarray(d), ref_d)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    np.testing.assert_array_equal(search.hamming_distances(q, db), hamming_numpy(q, db))


HAMMING_FORMS = {"swar": _kernels._hamming_swar, "popcount": _kernels._hamming_popcount}


@pytest.mark.parametrize("form", sorted(HAMMING_FORMS))
@pytest.mark.parametrize("words", [1, 7, 8, 29, 30, 31, 61, 128, 129, 150])
def test_hamming_forms_count_every_bit_in_each_layout(form, words):
    """Both ways of counting bits give the numpy distance in the kernels' three layouts (shared column-major
    rows, per-query rows, per-query blocks). Widths around the SWAR form's word groups (30 words), the
    unrolled limit (128) and past it, with rows at every distance from 0 to all bits."""
    rng = np.random.default_rng(words)
    q = rng.integers(0, 256, (3, 4 * words), dtype=np.uint8)
    db = rng.integers(0, 256, (40, 4 * words), dtype=np.uint8)
    db[0], db[1], db[2] = q[0], ~q[0], q[1] ^ 0x0F  # distance 0, every bit, half of them
    ref = hamming_numpy(q, db)
    assert ref[0, 0] == 0 and ref[0, 1] == 32 * words and ref[1, 2] == 16 * words
    kernel = HAMMING_FORMS[form]
    qw, dbw = scan._as_words(q), np.asarray(scan._as_words(db))
    np.testing.assert_array_equal(kernel(qw, dbw.T, True), ref)
    picks = rng.integers(0, 40, (3, 5))  # per query: rows picks[i]
    np.testing.assert_array_equal(kernel(qw, dbw[picks], False), np.take_along_axis(ref, picks, axis=1))
    blocks = jax.numpy.asarray(dbw.reshape(8, 5, -1).transpose(0, 2, 1))  # [B, W, n]: rows 5j … 5j + 4
    numbers = jax.numpy.asarray([[0, 7], [3, 3], [6, 1]], np.int32)
    want = np.stack([ref[i].reshape(8, 5)[np.asarray(numbers[i])] for i in range(3)])
    np.testing.assert_array_equal(kernel(qw, (blocks, numbers), _kernels.BLOCKS), want)
    np.testing.assert_array_equal(search.hamming_distances(q, db), ref)  # the form this host uses


@pytest.mark.parametrize(
    "machine,flags,xla_flags,want",
    [
        ("x86_64", {"avx2", "avx512f", "avx512_vpopcntdq"}, "", True),
        ("x86_64", {"avx2", "avx512f", "avx512bw"}, "", False),  # AVX-512 without VPOPCNTDQ
        ("x86_64", {"avx2", "popcnt"}, "", False),  # scalar POPCNT only
        ("x86_64", set(), "", False),  # flags unknown
        ("x86_64", {"avx512_vpopcntdq"}, "--xla_cpu_max_isa=AVX2", False),
        ("x86_64", {"avx512_vpopcntdq"}, "--xla_cpu_max_isa=AVX512", True),
        ("aarch64", set(), "", True),
        ("arm64", set(), "", True),
    ],
)
def test_vector_popcount_follows_the_cpu_and_xla_cap(machine, flags, xla_flags, want):
    assert _kernels.vector_popcount(machine, frozenset(flags), xla_flags) is want


@pytest.mark.parametrize("host_vector_popcount", [True, False])
def test_hamming_kernel_on_a_cpu_counts_bits_by_the_form_the_host_has(monkeypatch, host_vector_popcount):
    """The compiled CPU program holds a population count exactly when the host has a vector one."""
    monkeypatch.setattr(_kernels, "_host_vector_popcount", lambda: host_vector_popcount)
    q, rows = np.zeros((2, 8), np.uint32), np.zeros((8, 64), np.uint32)
    # a new function, so that no trace cached under the other choice is reused
    compiled = jax.jit(lambda a, b: _kernels.hamming_kernel(a, b, True)).lower(q, rows).compile()
    assert ("popcnt" in compiled.as_text()) is host_vector_popcount
    assert _kernels.counts_by_popcount("cpu") is host_vector_popcount
    assert _kernels.counts_by_popcount("gpu")


@pytest.mark.parametrize("n,k", CASES[:2])
def test_pq_topk_equals_numpy(n, k):
    rng = np.random.default_rng(5)
    pq = quantize.PQ(codebooks=rng.normal(size=(4, 16, 2)).astype(np.float32), objective=np.zeros((4, 0)))
    codes = rng.integers(0, 16, (n, 4)).astype(np.uint8)
    codes[n // 2] = codes[1]
    codes[n - 1] = codes[0]
    queries = rng.normal(size=(9, 8)).astype(np.float32)
    cb = np.asarray(pq.codebooks, np.float64)
    sub = queries.reshape(9, 4, 2).astype(np.float64)
    tables = ((sub[:, :, None, :] - cb[None]) ** 2).sum(-1)  # [Q, m, K]
    ref = sum(tables[:, j, codes[:, j]] for j in range(4))
    ref_d, ref_i = naive_topk(ref, k)
    d, i = search.pq_topk(queries, pq, codes, k, chunk=512, query_block=4)
    np.testing.assert_allclose(np.asarray(d), ref_d, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    np.testing.assert_allclose(search.pq_distances(queries, pq, codes), ref, rtol=1e-5, atol=1e-5)
    # ADC equals the squared distance to the reconstruction.
    dec = np.asarray(quantize.pq_decode(pq, codes), np.float64)
    np.testing.assert_allclose(ref, ((queries[:, None, :] - dec[None]) ** 2).sum(-1), rtol=1e-6)


def test_jit_wrapped():
    q, db = with_ties(np.random.default_rng(0), 3, 100, 8)
    d, i = jax.jit(lambda a, b: search.hamming_topk(a, b, 4))(q, db)
    np.testing.assert_array_equal(np.asarray(i), naive_topk(hamming_numpy(q, db), 4)[1])


def test_bad_inputs():
    q = np.zeros((2, 8), np.uint8)
    db = np.zeros((5, 8), np.uint8)
    with pytest.raises(ValueError, match="db"):
        search.hamming_topk(q, db.astype(np.int32), 2)
    with pytest.raises(ValueError, match="queries"):
        search.torus_topk(q.astype(np.float32), db, 2)
    with pytest.raises(ValueError, match="same last dimension"):
        search.hamming_topk(q, np.zeros((5, 4), np.uint8), 2)
    with pytest.raises(ValueError, match="k"):
        search.torus_topk(q, db, 6)
    with pytest.raises(ValueError, match="p"):
        search.torus_topk(q, db, 2, p=3)
    x = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    pq = quantize.PQ(codebooks=x[:4].reshape(2, 4, 2), objective=np.zeros((2, 0)))
    codes = np.zeros((20, 2), np.uint8)
    with pytest.raises(ValueError, match="codes"):
        search.pq_topk(x, pq, np.asarray(codes).astype(np.int32), 2)
    with pytest.raises(ValueError, match="queries"):
        search.pq_topk(x[:, :3], pq, codes, 2)
    with pytest.raises(ValueError, match="k"):
        search.pq_topk(x, pq, codes, 21)


@pytest.mark.multidevice
def test_queries_split_across_devices():
    # conftest gives 4 CPU devices; ≥ 8 queries per device take the shard_map path.
    assert len(jax.local_devices()) == 4
    rng = np.random.default_rng(7)
    q, db = with_ties(rng, 37, 700, 8, mask=0x0F)
    d, i = search.torus_topk(q, db, 6, chunk=256, query_block=4)
    ref_d, ref_i = naive_topk(torus_numpy(q, db, 1), 6)
    np.testing.assert_array_equal(np.asarray(d), ref_d)
    np.testing.assert_array_equal(np.asarray(i), ref_i)
    d, i = search.hamming_topk(q, db, 6, chunk=256, query_block=4)
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), 6)
    np.testing.assert_array_equal(np.asarray(d), ref_d)
    np.testing.assert_array_equal(np.asarray(i), ref_i)


def test_use_cpu_cores_before_and_after_start():
    code = (
        "import jax\nfrom geojax import search\nprint(search.use_cpu_cores(3), jax.device_count())\n"
        "try:\n    search.use_cpu_cores(2)\nexcept RuntimeError:\n    print('late')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"} | {"JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["3", "3", "late"]


def test_wide_squared_l2_codes_rank_int32_keys_through_float32_top_k():
    # 1,100 8-bit coordinates by squared L2: distances up to 1,100 · 128² > 2^24, past float32's exact
    # integers, so the scan ranks int32 keys, passed to lax.top_k as float32 bit patterns on a CPU (no int32
    # top_k, which sorts) and still exact, ties to the lower index: by groups of rows (k = 7) and by single
    # rows over several sub-chunks (k = 40, chunk 64).
    width = 1100
    assert scan._torus_bound(width, 8, 2) > 1 << 24
    rng = np.random.default_rng(7)
    q, db = with_ties(rng, 3, 1200, width)
    db[5] = q[1] ^ 0x80  # every coordinate half a turn away: the largest distance, 1,100 · 128²
    dist = torus_numpy(q, db, 2)
    for k, chunk in ((7, 16384), (40, 64), (1200, 512)):
        ref_d, ref_i = naive_topk(dist, k)
        d, i = search.torus_topk(q, db, k, p=2, chunk=chunk)
        np.testing.assert_array_equal(np.asarray(d), ref_d)
        np.testing.assert_array_equal(np.asarray(i), ref_i)
    assert int(d[1, -1]) == width * 128**2
    for k, chunk in ((7, 16384), (40, 64)):
        lowered = jax.jit(lambda a, b, k=k, c=chunk: search.torus_topk(a, b, k, p=2, chunk=c)).lower(q, db)
        ops = [line for line in lowered.as_text().splitlines() if "top_k" in line]
        assert ops and not any(re.search(r"top_k\(.*\) : \(?tensor<[^>]*xi32>", line) for line in ops)
