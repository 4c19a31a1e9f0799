"""geojax keeps XLA:CPU off YNNPACK's convolutions (slower) and, in jaxlib ≥ 0.11, off its element-wise and
reduction fusions (they miscompute bfloat16 programs)."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import jaxlib.version
import numpy as np
import pytest

from geojax import _xla_cpu

VERSION = jaxlib.version.__version__
CONV = "-individual_convolution"
ALL = "-individual_convolution,-reduce,-eltwise"
NAME = _xla_cpu.FLAG_NAME


@pytest.mark.parametrize(
    ("flags", "version", "expected"),
    [
        ("", "0.10.2", f"--{NAME}={CONV}"),
        (
            "--xla_force_host_platform_device_count=4",
            "0.10.9",
            f"--xla_force_host_platform_device_count=4 --{NAME}={CONV}",
        ),
        ("", "0.11.2", f"--{NAME}={ALL}"),
        ("", "0.12.0.1", f"--{NAME}={ALL}"),
        ("--a=1", "1.0.0.dev20270101", f"--a=1 --{NAME}={ALL}"),
        # the user's own setting wins, whatever its value
        (f"--{NAME}=+reduce", "0.12.0", f"--{NAME}=+reduce"),
        (f"--{NAME}=", "0.10.2", f"--{NAME}="),
    ],
)
def test_the_flag_removes_slow_convolutions_and_miscompiling_fusions_unless_the_user_set_it(
    flags, version, expected
):
    assert _xla_cpu.with_ynn_fusion_flag(flags, version) == expected


def test_a_version_without_major_minor_is_refused():
    with pytest.raises(ValueError, match="version must start with MAJOR.MINOR"):
        _xla_cpu.parse_version("nightly")


def test_this_process_got_the_flag():
    # conftest imports geojax before JAX starts its backends
    assert _xla_cpu.ynn_fusion_flag(VERSION) in os.environ["XLA_FLAGS"].split()


def test_a_late_import_warns_instead_of_setting_a_flag_that_can_no_longer_act():
    code = "import jax.numpy as jnp; jnp.ones(1).block_until_ready(); import geojax"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert ("could not set XLA_FLAGS" in out.stderr) == _xla_cpu.miscompiles(VERSION)


def test_bfloat16_fusion_of_two_relus_and_a_sum_is_computed_right_under_jit():
    """The smallest program jaxlib 0.11–0.12's YNNPACK fusions got wrong (every output entry, most as huge
    numbers or NaN); compared with a float32 NumPy sum of the same bfloat16 values."""
    f = jax.jit(lambda y: jax.nn.relu(jax.nn.relu(y)).astype(jnp.float32).sum(0))
    for rows in (128, 512, 4096):
        y = jnp.asarray(np.random.default_rng(rows).standard_normal((rows, 32)), jnp.bfloat16)
        expected = np.maximum(np.asarray(y, np.float32), 0).sum(0)
        np.testing.assert_allclose(np.asarray(f(y)), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA:CPU's fusions")
def test_convolutions_compile_to_xla_own_kernels():
    x, k = jnp.ones((8, 14, 14, 32)), jnp.ones((3, 3, 32, 64))

    def conv(x, k):
        return jax.lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))

    assert "__ynn_fusion" not in jax.jit(conv).lower(x, k).compile().as_text()
