"""Target catalogue: target name -> iree-compile flags and the runtime driver.

Pure Python: the loader reads it to match devices to bundle targets.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from typing import Mapping

from .errors import UnknownTarget

# IREE's CPU runtime drivers, the one list of them: local-task runs a kernel on
# a pool of worker threads (CPU targets are built for and measured with it);
# local-sync runs the same code on the calling thread.
LOCAL_TASK, LOCAL_SYNC = "local-task", "local-sync"
CPU_DRIVERS = (LOCAL_TASK, LOCAL_SYNC)


@dataclass(frozen=True)
class Target:
    name: str
    driver: str  # IREE runtime driver that runs it: local-task, hip, cuda, vulkan
    flags: tuple[str, ...]
    arch: str  # gfx arch for GPUs; CPU level (x86-64-v3, ...) for CPUs; a Vulkan device class (VULKAN_ARCHS)

    @property
    def is_cpu(self) -> bool:
        return self.driver in CPU_DRIVERS

    @property
    def torch_device_type(self) -> str:
        """torch's device type of the tensors its kernels take: "cpu" for CPU targets and
        Vulkan ones (torch has no Vulkan tensors: the loader stages host memory), else
        "cuda" (HIP and CUDA alike)."""
        return "cpu" if self.is_cpu or self.driver == "vulkan" else "cuda"


# Flags iree-turbine's BOO runtime passes for HIP (kernel/boo/runtime/launch.py),
# less the conv-specific preprocessing pipeline that does nothing for norms.
_HIP_OPT = (
    "--iree-opt-level=O3",
    "--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops",
    "--iree-dispatch-creation-enable-split-reduction",
)
GFX_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")

# Added for kernels with dynamic dims on CPU targets (static kernels keep their
# flags: these change nothing measurable there; docs/cpu-performance.md, "Measurements behind the code"):
# * peel the vector loops, so that the full tiles of an unknown row count
#   vectorize as a static shape's do (without it a dynamic forward is over 2x slower);
# * a 128 KiB stack bound: a row tile of unknown size is bounded, and a fused row
#   reduction of width 768 asks more than the default 32 KiB ("exceeded stack
#   allocation limit": the manual layer-norm input gradient did not compile);
#   CPU worker threads have MiBs of stack.
STACK_LIMIT = "--iree-llvmcpu-stack-allocation-limit=131072"  # also the CPU fallback variant `stack` (candidates)
DYNAMIC_CPU_FLAGS = ("--iree-llvmcpu-vector-pproc-strategy=peel", STACK_LIMIT)


def arch_free(target: "Target", flags) -> tuple[str, ...]:
    """``flags`` without the one that names ``target``'s GPU architecture: what
    iree-compile's output up to executable sources depends on. Dispatch formation
    comes before code generation, so GPUs of one driver whose other flags are the
    same get the same dispatches and bytes (the traffic model of every module of
    the default manifest is identical on gfx90a, gfx942 and gfx950, and on gfx1100
    and gfx1201): the build models them once (``build/creators.py``)."""
    own = (f"--iree-rocm-target={target.arch}", f"--iree-cuda-target={target.arch}")
    return (f"--iree-hal-target-device={target.driver}",) + tuple(
        f for f in flags if f not in own and not f.startswith("--iree-vulkan-target="))


def dynamic_flags(target: "Target", dynamic: bool) -> tuple[str, ...]:
    """Flags a kernel with dynamic dims adds to ``target``'s."""
    return DYNAMIC_CPU_FLAGS if dynamic and target.is_cpu else ()


def _cpu(name: str, cpu: str, triple: str) -> Target:
    # A named baseline, never "host": a bundle runs on other machines.
    return Target(
        name=name,
        driver=LOCAL_TASK,
        flags=(
            "--iree-hal-target-device=local",
            "--iree-hal-local-target-device-backends=llvm-cpu",
            f"--iree-llvmcpu-target-triple={triple}",
            f"--iree-llvmcpu-target-cpu={cpu}",
            "--iree-opt-level=O3",
        ),
        arch=cpu,
    )


# Split reduction makes iree-compile 3.13 fail ("failed to distribute") on the
# RDNA targets for layer-norm backward kernels of width 768; CDNA keeps it.
_NO_SPLIT_REDUCTION = ("gfx1100", "gfx1201")


def _hip(arch: str) -> Target:
    opt = tuple(f for f in _HIP_OPT if not (arch in _NO_SPLIT_REDUCTION and "split-reduction" in f))
    return Target(
        name=arch,
        driver="hip",
        flags=("--iree-hal-target-device=hip", f"--iree-rocm-target={arch}") + opt,
        arch=arch,
    )


# NVIDIA: iree-compile embeds PTX (no --iree-cuda-use-ptxas), which the driver
# compiles for the GPU at load, so sm_80 code runs on every GPU from Ampere on
# (Ada, Hopper...). iree-compile 3.13 has no Hopper entry (sm_90 fails), and a
# newer target is only worth adding where it measures faster.
CUDA_ARCHS = ("sm_80",)
# O3 lets dispatch formation fuse the backwards' elementwise producers into their
# consumers: the traffic model reads 4 dispatches instead of 6 for a layer-norm
# mask-14 backward at 8x128x768, and 2.67x the minimal traffic instead of 5.33x for
# its fused variant (docs/gpu-traffic.md); the HIP targets have it already.
_CUDA_OPT = ("--iree-opt-level=O3",)


def _cuda(arch: str) -> Target:
    return Target(
        name=arch,
        driver="cuda",
        flags=("--iree-hal-target-device=cuda", f"--iree-cuda-target={arch}") + _CUDA_OPT,
        arch=arch,
    )


# Vulkan (IREE's vulkan-spirv backend, the ``vulkan`` runtime driver). A Vulkan
# executable is code for its target's subgroup size: run on a device whose
# subgroups are another size, it computes wrong results without an error (a layer
# norm compiled for rdna3 or ampere, subgroup 32, ran on lavapipe's 8 off by 6.6).
# So each named target runs only on devices of its vendor whose subgroup sizes
# take it (``loader/devices.py`` ``vulkan_can_run``), and the portable one uses no
# subgroup operation at all.
@dataclass(frozen=True)
class VulkanArch:
    """A Vulkan target's device class: what its code assumes of the device."""

    iree: str  # --iree-vulkan-target (iree-compile 3.13's known Vulkan targets)
    vendors: tuple[int, ...]  # Vulkan vendor ids it runs on; () any
    subgroups: tuple[int, ...]  # subgroup sizes its code may be built for (one must fit); () none used
    half: bool  # 16-bit arithmetic and storage: float16 and bfloat16 kernels build
    software: bool = False  # a device on the CPU (timings are the CPU's)
    what: str = ""  # the devices, for users


# vendor ids (Khronos' registry): AMD, NVIDIA, Intel, Mesa (its software drivers)
VULKAN_VENDORS = {0x1002: "AMD", 0x10DE: "NVIDIA", 0x8086: "Intel", 0x10005: "Mesa"}
VULKAN_ARCHS = {
    # Android's 2022 baseline profile: Vulkan 1.1, float32 and int32 only, no subgroup operations,
    # 128 threads and 16 KiB of workgroup memory: every Vulkan GPU (Intel's included: iree-compile
    # 3.13 knows no Intel Vulkan target) and lavapipe run its code. Half-precision kernels do not
    # build for it (no 16-bit types), nor ones needing 64-bit integers.
    "vulkan": VulkanArch("vp_android_baseline_2022", (), (), False, what="any Vulkan 1.1 device"),
    # Mesa's lavapipe (llvmpipe): Vulkan 1.3 on the CPU, subgroups of 8, 16-bit types
    "llvmpipe": VulkanArch("llvmpipe", (0x10005,), (8,), True, software=True,
                           what="Mesa's lavapipe, a software GPU on the CPU"),
    "ampere": VulkanArch("ampere", (0x10DE,), (32,), True, what="NVIDIA GPUs from Ampere on (subgroups of 32)"),
    "rdna3": VulkanArch("rdna3", (0x1002,), (32, 64), True,
                        what="AMD RDNA3 GPUs (RX 7000; subgroups of 32 or 64)"),
}
VULKAN_TARGETS = {"vulkan": "vulkan", "vulkan-llvmpipe": "llvmpipe", "vulkan-ampere": "ampere",
                  "vulkan-rdna3": "rdna3"}


def _vulkan(name: str, arch: str) -> Target:
    return Target(
        name=name,
        driver="vulkan",
        flags=("--iree-hal-target-device=vulkan", f"--iree-vulkan-target={VULKAN_ARCHS[arch].iree}"),
        arch=arch,
    )


def vulkan_arch(target: Target) -> VulkanArch | None:
    """A Vulkan target's device class; None for other targets."""
    return VULKAN_ARCHS.get(target.arch) if target.driver == "vulkan" else None


def dtype_problem(target: Target, dtype: str) -> str | None:
    """Why ``target`` builds no kernel of ``dtype``, or None: a Vulkan target without
    16-bit types takes float32 only (iree-compile fails on half-precision code for it)."""
    varch = vulkan_arch(target)
    if varch is None or varch.half or dtype == "float32":
        return None
    others = ", ".join(n for n, a in VULKAN_TARGETS.items() if VULKAN_ARCHS[a].half)
    words = ("" if dtype != "bfloat16" else
             " (bfloat16 builds there as 32-bit words where every bfloat16 dim it passes is even)")
    return (f"{target.name} ({varch.what}) has no 16-bit types, so no {dtype} kernel{words}: "
            f"build {dtype} for {others}")


def cuda_capability(arch: str) -> tuple[int, int, bool] | None:
    """``"sm_80"`` -> ``(8, 0, False)``, ``"sm_90a"`` -> ``(9, 0, True)`` (major,
    minor, architecture-specific: runs on exactly that capability); None for
    anything else. The last digit is the minor version (``sm_100`` is 10.0)."""
    if not arch.startswith("sm_"):
        return None
    digits = arch[3:]
    specific = digits.endswith(("a", "f"))
    if specific:
        digits = digits[:-1]
    if len(digits) < 2 or not digits.isdigit():
        return None
    return int(digits[:-1]), int(digits[-1]), specific


def cuda_arch(major: int, minor: int) -> str:
    """Compute capability 9.0 -> ``"sm_90"``."""
    return f"sm_{int(major)}{int(minor)}"


def catalogue(machine: str | None = None) -> dict[str, Target]:
    """Every target this project can build, for a build machine of ``machine``
    architecture (default: this one's)."""
    machine = (machine or platform.machine()).lower()
    targets: dict[str, Target] = {}
    if machine in ("x86_64", "amd64"):
        targets["cpu"] = _cpu("cpu", "x86-64-v3", "x86_64-unknown-linux-gnu")
        targets["cpu-x86-64-v4"] = _cpu("cpu-x86-64-v4", "x86-64-v4", "x86_64-unknown-linux-gnu")
    elif machine in ("aarch64", "arm64"):
        targets["cpu"] = _cpu("cpu", "generic", "aarch64-unknown-linux-gnu")
    for arch in GFX_ARCHS:
        targets[arch] = _hip(arch)
    for arch in CUDA_ARCHS:
        targets[arch] = _cuda(arch)
    for name, arch in VULKAN_TARGETS.items():
        targets[name] = _vulkan(name, arch)
    return targets



def resolve(names, catalogue_: Mapping[str, Target] | None = None) -> tuple[Target, ...]:
    """Targets for ``names``; every unknown name is an error before anything runs."""
    cat = catalogue_ if catalogue_ is not None else catalogue()
    unknown = [n for n in names if n not in cat]
    if unknown:
        raise UnknownTarget(
            f"unknown target(s) {', '.join(map(repr, unknown))}: known targets are {', '.join(sorted(cat))}"
        )
    return tuple(cat[n] for n in dict.fromkeys(names))
