"""The scan behind the top-k functions of geojax.search.scan against naive numpy scans: sub-chunks, selection
blocks and their boundaries, ties to the lower index, the per-device split and the jit-wrapped call."""

import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from geojax import quantize, search
from geojax.search import _kernels, _select, scan


def naive_topk(dist: np.ndarray, k: int):
    order = np.argsort(dist, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(dist, order, axis=1), order


def hamming_numpy(a, b):
    return np.unpackbits(a[:, None, :] ^ b[None], axis=-1).sum(-1)


def torus_numpy(a, b):
    diff = (a[:, None, :].astype(np.int64) - b[None].astype(np.int64)) % 256
    return np.minimum(diff, 256 - diff).sum(-1)


def pq_numpy(queries, codebooks, codes):
    """ADC by Jégou et al. 2011 eq. 13 in float64: per-sub-space tables, then one table entry per code."""
    m, _, ds = codebooks.shape
    sub = queries.reshape(len(queries), m, ds).astype(np.float64)
    tables = ((sub[:, :, None, :] - codebooks[None].astype(np.float64)) ** 2).sum(-1)  # [Q, m, K]
    return sum(tables[:, j, codes[:, j]] for j in range(m))


def tied(rng, nq, n, width, pairs, mask=0xFF):
    """Random codes where database row b copies row a for each (a, b) in pairs, and query i is row a_i."""
    q = rng.integers(0, 256, (nq, width), dtype=np.uint8) & mask
    db = rng.integers(0, 256, (n, width), dtype=np.uint8) & mask
    for i, (a, b) in enumerate(pairs):
        db[b] = db[a]
        q[i % nq] = db[a]
    return q, db


def check(found, ref_d, ref_i, rtol=0.0):
    d, i = (np.asarray(x) for x in found)
    if rtol:
        np.testing.assert_allclose(d, ref_d, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(d, ref_d)
    np.testing.assert_array_equal(i, ref_i)


# select: group minima per query block between selections (small values force many selection blocks).
SELECTS = [None, 64, 200]


@pytest.mark.parametrize("select", SELECTS)
@pytest.mark.parametrize("n", [4096, 4097, 5000])
def test_hamming_blocks_and_boundaries(monkeypatch, select, n):
    if select is not None:
        monkeypatch.setattr(scan, "SELECT", select)
    c, s, group, blocks = scan.plan(n, 3, 512, 5, scan.SELECT, 8)
    assert group == _select._GROUP and (select is None or blocks > 1)
    step = c * s  # rows per selection block: exact ties straddle its boundaries and those of sub-chunks
    pairs = [(a, b) for a, b in [(step - 1, step), (c - 1, c), (0, n - 1), (step + 1, 2 * step + 1)] if b < n]
    rng = np.random.default_rng(n)
    q, db = tied(rng, 5, n, 6, pairs, mask=0x33)
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), 3)
    check(search.hamming_topk(q, db, 3, chunk=512, query_block=5), ref_d, ref_i)


@pytest.mark.parametrize("select", SELECTS)
def test_single_rows_when_k_is_large(monkeypatch, select):
    # k·_GROUP·4 above the sub-chunk: groups of one row, ranked directly, over several blocks.
    if select is not None:
        monkeypatch.setattr(scan, "SELECT", select)
    n, k = 3000, 40
    assert scan.plan(n, k, 1024, 4, scan.SELECT, 8)[2] == 1
    rng = np.random.default_rng(1)
    q, db = tied(rng, 7, n, 5, [(1, 1500), (1024, 1025), (2047, 2048)], mask=0x0F)
    ref_d, ref_i = naive_topk(torus_numpy(q, db), k)
    check(search.torus_topk(q, db, k, chunk=1024, query_block=4), ref_d, ref_i)


@pytest.mark.parametrize("select", SELECTS)
@pytest.mark.parametrize("n", [2048, 3001])
def test_pq_equals_numpy_adc(monkeypatch, select, n):
    if select is not None:
        monkeypatch.setattr(scan, "SELECT", select)
    rng = np.random.default_rng(n)
    m, ks, ds = 8, 256, 2
    codebooks = rng.normal(size=(m, ks, ds)).astype(np.float32)
    pq = quantize.PQ(codebooks=codebooks, objective=np.zeros((m, 0)))
    codes = rng.integers(0, ks, (n, m)).astype(np.uint8)
    for a, b in [(5, 1030), (1023, 1024), (0, n - 1)]:
        codes[b] = codes[a]
    queries = rng.normal(size=(11, m * ds)).astype(np.float32)
    # query 0 sits on row 5's reconstruction: its nearest rows are the exact tie 5 and 1030, in that order
    queries[0] = np.asarray(quantize.pq_decode(pq, codes[5:6]))[0]
    ref = pq_numpy(queries, codebooks, codes)
    ref_d, ref_i = naive_topk(ref, 6)
    assert scan.plan(n, 6, 1024, 4, scan.SELECT, 8)[2] == _select._GROUP
    found = search.pq_topk(queries, pq, codes, 6, chunk=1024, query_block=4)
    check(found, ref_d, ref_i, rtol=1e-5)
    assert list(np.asarray(found[1])[0, :2]) == [5, 1030]
    np.testing.assert_allclose(search.pq_distances(queries, pq, codes), ref, rtol=1e-5, atol=1e-5)


def test_selection_blocks_bounded_in_bytes(monkeypatch):
    # A selection block's codes stay within _BLOCK_BYTES (cache-sized), whatever the minima allow.
    for n, row_bytes in [(1_000_000, 64), (1_000_000, 32), (10_000_000, 8)]:
        c, s, _, _ = scan.plan(n, 10, 16384, 256, scan.SELECT, row_bytes)
        assert s * c * row_bytes <= _select._BLOCK_BYTES
    monkeypatch.setattr(_select, "_BLOCK_BYTES", 4096)
    n = 5000
    c, s, _, blocks = scan.plan(n, 3, 128, 5, scan.SELECT, 8)
    assert s * c * 8 <= 4096 and blocks > 1
    rng = np.random.default_rng(11)
    step = c * s
    q, db = tied(rng, 5, n, 6, [(step - 1, step), (0, n - 1), (2 * step - 1, 2 * step)], mask=0x33)
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), 3)
    check(search.hamming_topk(q, db, 3, chunk=128, query_block=5), ref_d, ref_i)


def test_default_sizes_equal_numpy():
    # The functions' own chunk and query-block defaults, with more rows than one default sub-chunk.
    rng = np.random.default_rng(3)
    q, db = tied(rng, 6, 40_000, 32, [(17, 20_000), (16_383, 16_384)])
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), 10)
    check(search.hamming_topk(q, db, 10), ref_d, ref_i)
    m = 8
    pq = quantize.PQ(codebooks=rng.normal(size=(m, 256, 4)).astype(np.float32), objective=np.zeros((m, 0)))
    codes = rng.integers(0, 256, (40_000, m)).astype(np.uint8)
    codes[39_999] = codes[3]
    queries = rng.normal(size=(5, 32)).astype(np.float32)
    ref_d, ref_i = naive_topk(pq_numpy(queries, np.asarray(pq.codebooks), codes), 10)
    check(search.pq_topk(queries, pq, codes, 10), ref_d, ref_i, rtol=1e-5)


def test_device_split_and_jit_equal_one_device():
    # 40 queries take the four-device path (conftest); a few at a time and a jit-wrapped call take one
    # device; all must give the same distances and indices, equal to numpy.
    assert len(jax.local_devices()) == 4
    rng = np.random.default_rng(9)
    q, db = tied(rng, 40, 6000, 8, [(3, 4000), (100, 101)], mask=0x55)
    ref_d, ref_i = naive_topk(hamming_numpy(q, db), 5)
    check(search.hamming_topk(q, db, 5, chunk=1024), ref_d, ref_i)
    parts = [search.hamming_topk(q[i : i + 7], db, 5, chunk=1024) for i in range(0, 40, 7)]
    check((np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])), ref_d, ref_i)
    check(jax.jit(lambda a, b: search.hamming_topk(a, b, 5, chunk=1024))(q, db), ref_d, ref_i)


def test_pq_tables_do_not_depend_on_the_batch():
    # A query's lookup table must have the same bits alone, in a batch of 7 or of 1,000: the IVF index,
    # its recomputation and the flat scan prepare tables for different batches and must rank alike.
    rng = np.random.default_rng(4)
    codebooks = rng.normal(size=(8, 256, 8)).astype(np.float32)
    queries = rng.normal(size=(1000, 64)).astype(np.float32)
    whole = np.asarray(_kernels.pq_tables(codebooks, queries))
    parts = np.concatenate(
        [np.asarray(_kernels.pq_tables(codebooks, queries[i : i + 7])) for i in range(0, 1000, 7)], 2
    )
    np.testing.assert_array_equal(whole, parts)
    direct = ((queries.reshape(1000, 8, 1, 8) - codebooks[None]) ** 2).sum(-1).transpose(1, 2, 0)
    np.testing.assert_allclose(whole, direct, rtol=1e-5, atol=1e-5)


def check_pq_scan_ranks_by_its_own_tables():
    """The flat scan's PQ distances are the sums, in sub-space order, of the tables ``pq_tables`` gives on
    its own, to the bit: the tables the inverted-file search prepares (once per query, for its whole batch,
    outside its loops) and ranks by."""
    rng = np.random.default_rng(12)
    m, ks, ds, n, k = 8, 256, 8, 3000, 10
    codebooks = rng.normal(size=(m, ks, ds)).astype(np.float32)
    codes = rng.integers(0, ks, (n, m)).astype(np.uint8)
    queries = rng.normal(size=(40, m * ds)).astype(np.float32)
    tables = np.asarray(_kernels.pq_tables(codebooks, queries))  # [m, K, Q]
    ref = tables[0][codes[:, 0]].T
    for j in range(1, m):
        ref = ref + tables[j][codes[:, j]].T  # float32, in sub-space order, as the kernels add
    assert scan.plan(n, k, 4096, 32, scan.SELECT, m)[2] == _select._GROUP  # the grouped path, fused kernels
    pq = quantize.PQ(codebooks=codebooks, objective=np.zeros((m, 0)))
    check(search.pq_topk(queries, pq, codes, k), *naive_topk(ref, k))


def test_pq_scan_ranks_by_the_tables_it_prepares():
    # In a process compiled as a user's is (XLA's default CPU passes, which contract a·a + b into one fused
    # multiply-add; the suite's cheaper passes do not, and would hide a difference). A scan that let XLA fuse
    # the tables' arithmetic into its table reads rounded about a fifth of these distances differently from
    # the tables the inverted-file search prepares (and ran 4.6× slower at 1M rows). That the IVF search at
    # full probe equals the flat scan is tested in tests/test_ivf.py.
    env = {name: value for name, value in os.environ.items() if name != "XLA_FLAGS"}
    code = "import test_search_kernels as t; t.check_pq_scan_ranks_by_its_own_tables()"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=Path(__file__).parent, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
