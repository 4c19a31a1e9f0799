"""train.app.data: loaders (digits, npz, tfds mocked), samplers and jnp augmentations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from train.app import data
from train.app.data import _augment


def test_digits_split_is_fixed_stratified_and_scaled():
    a, b = data.load("digits"), data.load("digits", test_fraction=0.25)
    assert a.train_x.shape == (1347, 8, 8, 1) and a.test_x.shape == (450, 8, 8, 1)
    np.testing.assert_array_equal(a.test_y, b.test_y)
    assert a.train_x.dtype == np.float32 and 0 <= a.train_x.min() and a.train_x.max() == 1.0
    # stratified: every class holds ~25 % of its members in the test split
    for c in range(10):
        frac = np.sum(a.test_y == c) / (np.sum(a.test_y == c) + np.sum(a.train_y == c))
        assert abs(frac - 0.25) < 0.02


def test_npz_loader_and_its_errors(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(40, 6, 5), dtype=np.uint8)
    labels = np.repeat(np.arange(4), 10)
    np.savez(tmp_path / "d.npz", images=images, labels=labels)
    ds = data.load(f"npz:{tmp_path / 'd.npz'}", test_fraction=0.25)
    assert ds.train_x.shape == (30, 6, 5, 1) and ds.test_x.shape == (10, 6, 5, 1)
    assert ds.num_classes == 4
    all_x = np.concatenate([ds.train_x, ds.test_x]).reshape(40, -1)
    want = np.sort((images.reshape(40, -1) / 255.0).astype(np.float32), axis=0)
    np.testing.assert_allclose(np.sort(all_x, axis=0), want)  # uint8 → [0, 1], nothing dropped
    with pytest.raises(ValueError, match="no such file"):
        data.load(f"npz:{tmp_path / 'missing.npz'}")
    np.savez(tmp_path / "bad.npz", pixels=images, labels=labels)
    with pytest.raises(ValueError, match="images"):
        data.load(f"npz:{tmp_path / 'bad.npz'}")
    with pytest.raises(ValueError, match="dataset"):
        data.load("imagenet")


def test_tfds_mnist_through_mock_data():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=12):
        ds = data.load("mnist")
    assert ds.train_x.shape == (12, 28, 28, 1) and ds.test_x.shape == (12, 28, 28, 1)
    assert ds.train_x.dtype == np.float32 and 0 <= ds.train_x.min() and ds.train_x.max() <= 1
    assert ds.train_y.dtype == np.int32 and ds.train_y.max() < 10


def test_any_tfds_name_loads_and_8_bit_images_compact_to_uint8():
    tfds = pytest.importorskip("tensorflow_datasets")
    with tfds.testing.mock_data(num_examples=10):
        ds = data.load("tfds:cifar100")
        named = data.load("cifar100")
    assert ds.name == "tfds:cifar100" and ds.train_x.shape == (10, 32, 32, 3) and ds.train_y.max() < 100
    np.testing.assert_array_equal(ds.train_y, named.train_y)
    codes = data.compact(ds.train_x)
    assert codes.dtype == np.uint8  # decoded 8-bit data: a quarter of the bytes on the devices
    np.testing.assert_array_equal(np.asarray(jax.jit(data.to_unit)(codes)), ds.train_x)  # the same floats
    digits = data.load("digits").train_x  # k/16, not k/255: kept as float32
    assert data.compact(digits) is digits
    for bad in ("tfds:", "npz:", "imagenet"):
        with pytest.raises(ValueError, match="tfds:NAME"):
            data.check_dataset_name(bad)


def test_training_on_a_tfds_set_holds_its_uint8_images_on_the_devices(tmp_path):
    tfds = pytest.importorskip("tensorflow_datasets")
    from train.app import config, loop

    kw = dict(dataset="cifar10", width=8, dim=4, batch_size=8, steps=2, progress=False, devices=2, lr=1e-2)
    with tfds.testing.mock_data(num_examples=24):
        held = loop.train(config.make(workdir=str(tmp_path / "device"), **kw))
        fed = loop.train(config.make(workdir=str(tmp_path / "host"), feed="host", **kw))
    assert held.dataset.image_shape == (32, 32, 3)
    assert (held.timing["feed"], held.timing["feed_dtype"]) == ("device", "uint8")
    for a, b in zip(jax.tree.leaves(held.state), jax.tree.leaves(fed.state), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)  # uint8 codes → the loader's floats, exactly


def test_tfds_not_prepared_says_how_to_prepare(tmp_path):
    pytest.importorskip("tensorflow_datasets")
    with pytest.raises(ValueError, match="tfds build cifar10 --file_format=array_record"):
        data.load("cifar10", data_dir=str(tmp_path))


_sample = jax.jit(data.sample, static_argnames=("kind", "batch", "m_per_class", "class_fraction"))


def _draw(labels, step, **kw):
    tables = data.label_tables(np.asarray(labels))
    return np.asarray(_sample(jax.random.key(step), tables, **kw))


def test_samplers_follow_their_recipes_and_are_functions_of_the_key():
    labels = np.repeat(np.arange(10), 30)
    idx = _draw(labels, 7, kind="random", batch=64)
    assert len(np.unique(idx)) == 64 and idx.min() >= 0 and idx.max() < 300  # without replacement
    np.testing.assert_array_equal(idx, _draw(labels, 7, kind="random", batch=64))
    assert not np.array_equal(idx, _draw(labels, 8, kind="random", batch=64))
    more = _draw(labels[:20], 7, kind="random", batch=50)  # more than there is: with replacement
    assert len(more) == 50 and more.max() < 20
    mpc = _draw(labels, 7, kind="m_per_class", batch=32, m_per_class=4)
    classes, counts = np.unique(labels[mpc], return_counts=True)
    assert len(classes) == 8 and np.all(counts == 4) and len(np.unique(mpc)) == 32  # MTriplet: 8 classes × 4
    sub = _draw(labels, 7, kind="class_subsampled", batch=50, class_fraction=0.4)
    assert len(np.unique(labels[sub])) <= 4 and len(np.unique(sub)) == 50  # SimO: fewer than half the classes
    # 4 classes of 30 hold 120 rows: 200 rows come with replacement, from those classes only
    sub = _draw(labels, 7, kind="class_subsampled", batch=200, class_fraction=0.4)
    assert len(np.unique(labels[sub])) == 4 and len(np.unique(sub)) <= 120
    small = np.array([0, 0, 1, 1, 1, 1, 1])  # class 0 has 2 < m = 4 members: drawn with replacement
    mpc = _draw(small, 3, kind="m_per_class", batch=8, m_per_class=4)
    assert sorted(small[mpc]) == [0] * 4 + [1] * 4 and len(np.unique(mpc[small[mpc] == 1])) == 4
    with pytest.raises(ValueError, match="sampler"):
        _draw(labels, 0, kind="shuffled", batch=8)


def _chi2_ok(counts, expected):
    """Pearson's χ² of counts against expected ones, below its mean + 6 standard deviations."""
    dof = len(counts) - 1
    chi2 = float(np.sum((counts - expected) ** 2 / expected))
    return chi2 < dof + 6 * np.sqrt(2 * dof)


def test_samplers_draw_every_row_of_their_pool_equally_often():
    # uneven classes (5, 7, 12 rows): each of a class's rows must be picked m/count of the times (Floyd's
    # subsets are uniform), each row of the random sampler batch/N of the times
    labels = np.repeat([0, 1, 2], [5, 7, 12])
    tables = data.label_tables(labels)
    draw = jax.jit(jax.vmap(lambda k: data.sample(k, tables, kind="m_per_class", batch=12, m_per_class=4)))
    picks = np.asarray(draw(jax.random.split(jax.random.key(0), 3000))).reshape(-1)
    counts = np.bincount(picks, minlength=24)
    for c in range(3):
        rows = labels == c
        assert _chi2_ok(counts[rows], counts[rows].sum() / rows.sum()), (c, counts[rows])
    draw = jax.jit(jax.vmap(lambda k: data.sample(k, tables, kind="random", batch=10)))
    counts = np.bincount(
        np.asarray(draw(jax.random.split(jax.random.key(1), 3000))).reshape(-1), minlength=24
    )
    assert _chi2_ok(counts, np.full(24, 3000 * 10 / 24)), counts


@pytest.mark.parametrize("instance", [False, True])
def test_batch_rows_split_one_global_batch_by_position(instance):
    labels = np.random.default_rng(0).integers(0, 5, 40)
    tables = data.label_tables(labels)
    batches = data.Batches(kind="random", batch=12, seed=4, instance=instance)
    whole = batches.rows(tables, 9, 0, 12)
    parts = [batches.rows(tables, 9, start, 3) for start in (0, 3, 6, 9)]  # four devices' rows
    for key in ("idx", "y", "pos"):
        np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), whole[key])
    np.testing.assert_array_equal(whole["idx"], batches.indices(tables, 9))
    np.testing.assert_array_equal(whole["pos"], np.arange(12))
    np.testing.assert_array_equal(whole["y"], np.arange(12) if instance else labels[np.asarray(whole["idx"])])
    assert not np.array_equal(whole["idx"], batches.rows(tables, 10, 0, 12)["idx"])  # another step


def test_prefetch_keeps_order_raises_errors_and_stops_its_thread():
    import threading

    assert list(data.prefetch(iter(range(7)), depth=2)) == list(range(7))

    def failing():
        yield 1
        raise KeyError("boom")

    got = data.prefetch(failing())
    assert next(got) == 1
    with pytest.raises(KeyError, match="boom"):
        next(got)
    produced = []

    def endless():
        for i in range(10**9):
            produced.append(i)
            yield i

    stream = data.prefetch(endless(), depth=3)
    assert [next(stream) for _ in range(4)] == [0, 1, 2, 3]
    stream.close()  # the thread stops: at most depth + 2 items beyond what was taken
    assert not any(t.name == "prefetch" for t in threading.enumerate())
    assert len(produced) <= 4 + 3 + 2


def _translations(x, pad=1):
    """The (2·pad + 1)² zero-filled translations of x [H, W, C] by up to ``pad`` pixels each way."""
    h, w, _ = x.shape
    p = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    return [p[dy : dy + h, dx : dx + w] for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)]


def test_shift_is_a_one_pixel_translation_times_a_contrast_factor():
    x = np.random.default_rng(0).uniform(0, 0.8, size=(5, 8, 8, 1)).astype(np.float32)
    out = np.asarray(data.views(jax.random.key(0), jnp.asarray(x), jnp.arange(5), n_views=2, kind="shift"))
    assert out.shape == (10, 8, 8, 1)
    for i, v in enumerate(out):
        fits = []
        for t in _translations(x[i % 5]):
            s = float(np.sum(v * t) / max(np.sum(t * t), 1e-12))  # least-squares contrast factor
            fits.append((np.max(np.abs(v - s * t)), s))
        err, s = min(fits)
        assert err < 1e-5 and 0.8 <= s <= 1.2


def test_crop_flip_is_a_two_pixel_translation_then_maybe_a_mirror_image():
    x = np.random.default_rng(3).uniform(size=(64, 7, 9, 1)).astype(np.float32)
    out = np.asarray(
        data.views(jax.random.key(1), jnp.asarray(x), jnp.arange(64), n_views=1, kind="crop_flip")
    )
    flips, offsets = [], set()
    for v, image in zip(out, x, strict=True):
        candidates = [(t, False) for t in _translations(image, 2)] + [
            (t[:, ::-1], True) for t in _translations(image, 2)
        ]
        matches = [(i % 25, flip) for i, (t, flip) in enumerate(candidates) if np.array_equal(v, t)]
        assert len(matches) == 1
        offsets.add(matches[0][0])
        flips.append(matches[0][1])
    assert 16 <= sum(flips) <= 48  # p = 0.5 over 64 draws
    assert len(offsets) > 12  # the offsets vary (25 possible)


def test_views_do_not_depend_on_how_the_batch_is_split():
    x = jnp.asarray(np.random.default_rng(1).uniform(size=(6, 8, 8, 3)).astype(np.float32))
    key = jax.random.key(5)
    views = jax.jit(data.views, static_argnames=("n_views", "kind"))
    whole = views(key, x, jnp.arange(6), n_views=2, kind="simclr")
    # the same images at other places of the batch (as on other devices), with their global positions
    perm = np.array([3, 5, 0, 4, 1, 2])
    moved = views(key, x[perm], jnp.asarray(perm), n_views=2, kind="simclr")
    # view-major layout: [view 0 of the rows; view 1 of the rows]
    np.testing.assert_allclose(moved[:6], whole[:6][perm], atol=1e-6)
    np.testing.assert_allclose(moved[6:], whole[6:][perm], atol=1e-6)
    assert not np.allclose(whole[:6], whole[6:])  # the two views differ
    assert float(whole.min()) >= 0 and float(whole.max()) <= 1


@pytest.mark.parametrize("kind, flips", [("crop_jitter_gray", False), ("simclr", True)])
def test_korman_views_never_flip_and_simclr_views_do(kind, flips):
    """A left-to-right ramp stays non-decreasing through any crop (a bilinear resize of a linear ramp) and
    colour jitter (positive brightness and contrast factors); only a horizontal flip reverses it."""
    ramp = jnp.broadcast_to(jnp.linspace(0.1, 0.9, 16)[None, :, None], (16, 16, 1))
    images = jnp.broadcast_to(ramp, (64, 16, 16, 1))
    out = np.asarray(data.views(jax.random.key(3), images, jnp.arange(64), n_views=1, kind=kind))[..., 0]
    steps = np.diff(out, axis=2)
    rising = np.all(steps >= -1e-6, axis=(1, 2))
    falling = np.all(steps <= 1e-6, axis=(1, 2)) & ~np.all(np.abs(steps) <= 1e-6, axis=(1, 2))
    assert np.all(rising | falling)
    assert falling.any() == flips and rising.any()


def test_random_resized_crop_full_box_is_identity_and_grayscale_is_luma():
    x = jnp.asarray(np.random.default_rng(2).uniform(size=(8, 8, 3)).astype(np.float32))
    same = data.random_resized_crop(jax.random.key(0), x, scale=(1.0, 1.0), ratio=(1.0, 1.0))
    np.testing.assert_allclose(same, x, atol=1e-5)
    crop = data.random_resized_crop(jax.random.key(1), x, scale=(0.25, 0.25), ratio=(1.0, 1.0))
    assert crop.shape == x.shape and not np.allclose(crop, x)
    g = np.asarray(_augment._gray(x))
    np.testing.assert_allclose(g[..., 0], np.asarray(x) @ np.array([0.299, 0.587, 0.114]), rtol=1e-5)
    np.testing.assert_allclose(g[..., 0], g[..., 2])
