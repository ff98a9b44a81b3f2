"""What a run's process inherits that can change its numbers: environment variables and installed packages
(docs/config_check.md#what-a-pack-holds). Framework-free; the framework facts come from the framework half.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from importlib import metadata

# Variables known to change results or their reproducibility (threads, determinism, math libraries,
# collective algorithms, allocator and precision switches), on CPU, GPU and NPU.
NUMERIC_VARIABLES = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "MKL_CBWR",
    "KMP_DETERMINISTIC_REDUCTION", "PYTHONHASHSEED", "CUBLAS_WORKSPACE_CONFIG", "CUDA_LAUNCH_BLOCKING",
    "CUDA_VISIBLE_DEVICES", "NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NCCL_ALGO",
    "NCCL_PROTO", "NCCL_DETERMINISTIC", "TF_CUDNN_DETERMINISTIC", "PYTORCH_CUDA_ALLOC_CONF",
    "TORCH_DETERMINISTIC", "ASCEND_LAUNCH_BLOCKING", "ASCEND_RT_VISIBLE_DEVICES", "HCCL_DETERMINISTIC",
    "HCCL_ALGO", "HCCL_INTRA_ROCE_ENABLE", "HCCL_INTRA_PCIE_ENABLE", "CLOSE_MATMUL_K_SHIFT",
    "INF_NAN_MODE_ENABLE", "ACLNN_CACHE_LIMIT", "MS_DEV_JIT_SYNTAX_LEVEL", "MS_DEV_ENABLE_KERNEL_PACKET",
    "MS_COMM_COMPILER_OPT", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS", "DNNL_DEFAULT_FPMATH_MODE",
    "ONEDNN_DEFAULT_FPMATH_MODE", "ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA",
)
NUMERIC_PREFIXES = ("NCCL_", "HCCL_", "CUBLAS", "CUDNN", "MKL_", "OMP_", "KMP_", "ASCEND_", "MS_", "TORCH_")
# names whose values are secrets in common set-ups: recorded as set, never with their value
_SECRET = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|_KEY$|^KEY$|AUTH)", re.IGNORECASE)
HIDDEN = "<set, value not recorded>"


def check_pattern(pattern: str | None) -> re.Pattern | None:
    """The user's extra variable pattern (a regular expression on the name), or a one-line error."""
    if pattern is None:
        return None
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"env_pattern {pattern!r} is not a regular expression: {error}") from None


def environment(environ: Mapping[str, str] | None = None, pattern: re.Pattern | None = None) -> dict[str, str]:
    """The set variables of the list, of the listed prefixes and matching ``pattern``; secrets hidden."""
    environ = os.environ if environ is None else environ
    chosen = {}
    for name, value in environ.items():
        wanted = name in NUMERIC_VARIABLES or name.startswith(NUMERIC_PREFIXES) or (
            pattern is not None and pattern.search(name) is not None)
        if wanted:
            chosen[name] = HIDDEN if _SECRET.search(name) else value
    return chosen


def packages() -> dict[str, str]:
    """Every installed distribution → its version (names normalised as pip does: lower case, ``-``)."""
    found = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found[re.sub(r"[-_.]+", "-", name).lower()] = dist.version
    return found
