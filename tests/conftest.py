"""Test set-up: four fake CPU devices, set before JAX initialises its backends.

On an accelerator (JAX's default backend not the CPU) fp32 products run at full precision, as the float64
references expect (XLA's default there passes them through TF32 or bf16), GPU reductions are deterministic
(resumed runs are compared exactly), and the tests marked ``multidevice`` are skipped unless the accelerator
has four devices.
"""

import atexit
import os
import shutil
import tempfile

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

# Many tests compile the same programs in other processes: pytest-xdist's workers, the `python -m train`
# and benchmark subprocesses, the notebooks' kernels, a sweep's seeds. One JAX persistent compilation cache
# for the session, which every one of them inherits from the environment, compiles each program once. The
# process that starts the session makes it (pytest-xdist's controller, before its workers) and removes it on
# exit; a cache folder the caller set is used as it is and kept.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    SESSION_CACHE = tempfile.mkdtemp(prefix="geojax-tests-xla-cache-")
    atexit.register(shutil.rmtree, SESSION_CACHE, ignore_errors=True)
    os.environ["JAX_COMPILATION_CACHE_DIR"] = SESSION_CACHE
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

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
