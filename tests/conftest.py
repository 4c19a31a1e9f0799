"""Test set-up: four fake CPU devices, set before JAX initialises its backends.

On an accelerator (JAX's default backend not the CPU) fp32 products run at full precision, as the float64
references expect (XLA's default there passes them through TF32 or bf16), GPU reductions are deterministic
(resumed runs are compared exactly), and the tests marked ``multidevice`` are skipped unless the accelerator
has four devices.
"""

import os

# Most tests' time is XLA compiling small programs: the CPU backend's cheaper LLVM passes (the same programs,
# less optimised machine code) cut it by a quarter to a third.
FLAGS = " ".join(
    [
        "--xla_force_host_platform_device_count=4",
        "--xla_gpu_deterministic_ops=true",
        "--xla_backend_optimization_level=0",
        "--xla_llvm_disable_expensive_passes=true",
    ]
)
os.environ.setdefault("XLA_FLAGS", FLAGS)
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # pytest-xdist's workers share a GPU

import jax  # noqa: E402
import pytest  # noqa: E402

import geojax  # noqa: E402, F401  (before JAX starts its backends: it sets XLA's CPU fusions, geojax._xla_cpu)

jax.config.update("jax_num_cpu_devices", 4)
if jax.default_backend() != "cpu":
    jax.config.update("jax_default_matmul_precision", "highest")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if jax.device_count() >= 4:
        return
    skip = pytest.mark.skip(reason=f"needs 4 devices; {jax.default_backend()} has {jax.device_count()}")
    for item in items:
        if "multidevice" in item.keywords:
            item.add_marker(skip)
