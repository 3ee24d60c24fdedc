"""Accelerators: dense peak FLOP/s per precision and memory, from the vendors' datasheets.

All peaks are *dense* tensor-core numbers (datasheets print "with sparsity"
figures twice as large; no training run uses 2:4 sparsity). `fp32` is the
plain (non-TF32) FP32 rate, what PyTorch uses unless TF32 is enabled. Memory
is the marketed capacity in GiB (an "80GB" H100 reports 80 GiB = 85.9e9 bytes).
`llmtk train` uses `match_device_name` + `peak_flops` for its MFU column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmtk.errors import ConfigError

TFLOPS = 1e12
GIB = 1024**3


@dataclass(frozen=True)
class GPU:
    name: str
    bf16: float | None  # dense peak FLOP/s
    fp16: float | None
    fp8: float | None
    fp32: float
    mem_gib: float
    source: str
    aliases: tuple[str, ...] = ()

    @property
    def mem_bytes(self) -> float:
        return self.mem_gib * GIB


def _g(name, bf16, fp16, fp8, fp32, mem, source, *aliases) -> GPU:
    t = TFLOPS
    return GPU(name, bf16 and bf16 * t, fp16 and fp16 * t, fp8 and fp8 * t, fp32 * t, mem,
               source, aliases)


_H100 = "NVIDIA H100 Tensor Core GPU datasheet (SXM5)"
GPU_LIST: list[GPU] = [
    _g("V100", None, 125, None, 15.7, 32, "NVIDIA V100 datasheet (SXM2 32GB)", "v100-32"),
    _g("A100-40", 312, 312, None, 19.5, 40, "NVIDIA A100 datasheet (SXM4 40GB)",
       "a100-40gb", "a100-sxm4-40gb"),
    _g("A100-80", 312, 312, None, 19.5, 80, "NVIDIA A100 datasheet (SXM4 80GB)",
       "a100", "a100-80gb", "a100-sxm4-80gb"),
    _g("A10G", 70, 70, None, 31.2, 24, "NVIDIA A10G (AWS g5): 70 TFLOPS dense bf16/fp16"),
    _g("L4", 121, 121, 242.5, 30.3, 24, "NVIDIA L4 datasheet"),
    _g("L40S", 362.05, 362.05, 733, 91.6, 48, "NVIDIA L40S datasheet"),
    _g("RTX3090", 71, 71, None, 35.6, 24,
       "NVIDIA Ampere GA102 whitepaper (FP16/BF16 with FP32 accumulate)", "3090"),
    _g("RTX4090", 165.2, 165.2, 330.3, 82.6, 24,
       "NVIDIA Ada whitepaper, RTX 4090 (tensor ops with FP32 accumulate)", "4090"),
    _g("H100", 989.4, 989.4, 1978.9, 66.9, 80, _H100, "h100-sxm", "h100-sxm5", "h100-80"),
    _g("H100-PCIe", 756.5, 756.5, 1513, 51.2, 80, "NVIDIA H100 datasheet (PCIe)"),
    _g("H800", 989.4, 989.4, 1978.9, 66.9, 80,
       "NVIDIA H800 SXM: H100 compute, NVLink cut to 400 GB/s", "h800-sxm"),
    _g("H200", 989.4, 989.4, 1978.9, 66.9, 141, "NVIDIA H200 datasheet (SXM)", "h200-sxm"),
    _g("B200", 2250, 2250, 4500, 75, 180,
       "NVIDIA HGX B200 datasheet (per GPU, dense = half the sparse figure)"),
    _g("MI300X", 1307.4, 1307.4, 2614.9, 163.4, 192, "AMD Instinct MI300X datasheet"),
    _g("TPUv4", 275, None, None, 275 / 8, 32, "Google TPU v4 (Jouppi et al. 2023)", "tpu-v4"),
]
GPUS: dict[str, GPU] = {g.name.lower(): g for g in GPU_LIST}
_ALIASES: dict[str, GPU] = {a: g for g in GPU_LIST for a in (g.name.lower(), *g.aliases)}

PRECISION_PEAK = {"bf16-mixed": "bf16", "fp16-mixed": "fp16", "fp8": "fp8", "fp32": "fp32"}


def gpu(name: str) -> GPU:
    key = name.strip().lower().replace("_", "-")
    if key not in _ALIASES:
        raise ConfigError("gpus", f"unknown GPU {name!r} (known: "
                         f"{', '.join(g.name for g in GPU_LIST)})")
    return _ALIASES[key]


def parse_gpus(spec: str) -> tuple[int, GPU]:
    """'1024xH100' -> (1024, H100); 'H100' -> (1, H100)."""
    m = re.fullmatch(r"\s*(?:(\d+)\s*[x×*]\s*)?([A-Za-z][\w.-]*)\s*", spec)
    if not m:
        raise ConfigError("gpus", f"expected COUNTxNAME such as 1024xH100, got {spec!r}")
    count = int(m.group(1)) if m.group(1) else 1
    if count < 1:
        raise ConfigError("gpus", f"the count must be >= 1, got {spec!r}")
    return count, gpu(m.group(2))


def peak_flops(g: GPU, precision: str) -> float:
    """Dense peak FLOP/s of `g` for a training precision (bf16-mixed, fp16-mixed, fp8, fp32)."""
    kind = PRECISION_PEAK.get(precision)
    if kind is None:
        raise ConfigError("precision", f"expected one of {', '.join(PRECISION_PEAK)}, "
                         f"got {precision!r}")
    value = getattr(g, kind)
    if value is None:
        raise ConfigError("precision", f"{g.name} has no {kind.upper()} tensor cores")
    return value


def match_device_name(device_name: str) -> GPU | None:
    """The table entry for a CUDA device name such as 'NVIDIA H100 80GB HBM3', or None."""
    s = device_name.upper()
    checks = [("H100 PCIE", "h100-pcie"), ("H100", "h100"), ("H800", "h800"), ("H200", "h200"),
              ("B200", "b200"), ("A100", None), ("L40S", "l40s"), ("A10G", "a10g"),
              ("L4", "l4"), ("4090", "rtx4090"), ("3090", "rtx3090"), ("V100", "v100"),
              ("MI300X", "mi300x")]
    for needle, key in checks:
        if needle in s:
            if key is None:  # A100: the 40 GB and 80 GB parts differ only in memory
                key = "a100-40" if "40GB" in s.replace(" ", "") else "a100-80"
            return GPUS[key]
    return None


def device_peak_flops(device_name: str, precision: str = "bf16-mixed") -> float | None:
    """Dense peak FLOP/s for a torch.cuda.get_device_name() string; None when unknown."""
    g = match_device_name(device_name)
    if g is None:
        return None
    kind = PRECISION_PEAK.get(precision, "bf16")
    return getattr(g, kind) or g.fp16


# Links for the layout cost model (`llmtk estimate --solve layout`, docs/estimate.md).
# Per GPU, per direction, to the other GPUs of its node, bytes/s: the datasheet's
# bidirectional NVLink figure halved (H100/H200 SXM: 18 NVLink 4 links, 900 GB/s both
# ways), AMD Infinity Fabric's 7 peer links x 64 GB/s, and PCIe 4/5 x16 for the parts
# without a GPU fabric. A GPU not listed is taken as PCIe 4.
INTRA_NODE = {"V100": 150e9, "A100-40": 300e9, "A100-80": 300e9, "H100": 450e9,
              "H800": 200e9, "H200": 450e9, "B200": 900e9, "MI300X": 448e9,
              "H100-PCIe": 64e9}
PCIE4 = 32e9
# Between nodes: 400 Gb/s of RDMA (InfiniBand or RoCE) per GPU, what DGX H100 and Meta's
# Grand Teton hosts (torchtitan's benchmarks) have.
INTER_NODE = 50e9


def intra_node_bandwidth(g: GPU) -> float:
    """Bytes/s one GPU sends to its node's other GPUs (one direction)."""
    return INTRA_NODE.get(g.name, PCIE4)
