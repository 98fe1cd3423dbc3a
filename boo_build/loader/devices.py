"""Which devices this machine has, and which bundle targets they can run.

Loader world: stdlib only here (IREE's runtime is imported lazily, and only
when a GPU might exist), plus the pure-Python ``boo_build.targets``.

``discover()`` is cheap and keeps no state: the CPU comes from
``/proc/cpuinfo``; GPUs come from IREE's ``hip`` and ``cuda`` drivers, probed
only when the device nodes they need exist (``/dev/kfd``, ``/dev/nvidia*``) so
a CPU-only machine never pays for importing IREE's runtime; Vulkan devices
from IREE's ``vulkan`` driver, only for callers running Vulkan targets and
where a Vulkan driver manifest exists, with what a Vulkan target's code
assumes of the device (vendor, subgroup sizes, 16-bit types:
``vulkan_can_run``). Every GPU probe is guarded: a driver that fails to load
means "no such GPU", never an error. Callers keep the result.

NVIDIA compute capability: IREE's cuda driver dumps no device details (its
``dump_device_info`` is empty in 3.13), so it comes from the CUDA driver
library itself (``libcuda``'s ``cuDeviceGetAttribute`` through ctypes, by
device ordinal, the order IREE enumerates in), else from ``nvidia-smi``
(by GPU UUID, which IREE reports as the device path). Never from torch.
A CUDA target runs on every GPU of at least its compute capability (PTX is
compiled forward by the driver), except architecture-specific ones
(``sm_90a``), which run on exactly theirs.
"""

from __future__ import annotations

import glob
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Iterable

from ..targets import VULKAN_VENDORS, Target, cuda_arch, cuda_capability, vulkan_arch


@dataclass(frozen=True)
class DeviceInfo:
    driver: str  # IREE runtime driver: local-task, hip, cuda, vulkan
    uri: str  # device URI for iree.runtime: "local-task", "hip://0", "cuda://0", "vulkan://GPU-<uuid>"
    # gfx arch ("gfx942"), CUDA "sm_90", CPU level ("x86-64-v3", "generic"); a Vulkan
    # device's driver for a software one ("llvmpipe"), else its vendor ("nvidia", "amd", "intel")
    arch: str
    name: str  # human-readable model name
    # Vulkan devices (what a Vulkan target's code assumes: targets.VulkanArch): the vendor id,
    # the subgroup sizes it runs (min, max), whether it has 16-bit arithmetic and storage
    vendor: int = 0
    subgroups: tuple[int, int] = (0, 0)
    half: bool = False
    software: bool = False  # on the CPU (Vulkan's device type "cpu": lavapipe): no GPU's timings

    @property
    def is_cpu(self) -> bool:
        return self.driver in ("local-task", "local-sync")


# x86-64 micro-architecture levels (psABI), as /proc/cpuinfo spells the flags.
# Each level requires the flags of the levels below it.
X86_LEVELS = ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")
_X86_LEVEL_FLAGS = {
    "x86-64-v2": frozenset({"cx16", "lahf_lm", "popcnt", "pni", "sse4_1", "sse4_2", "ssse3"}),
    # abm is how /proc/cpuinfo names LZCNT (on Intel and AMD alike).
    "x86-64-v3": frozenset({"avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"}),
    "x86-64-v4": frozenset({"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
}


def read_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in a /proc/cpuinfo text
    (``flags`` on x86, ``Features`` on arm)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return frozenset(value.split())
    return frozenset()


def cpu_level(arch: str) -> int:
    """How capable a CPU arch is: 0 for ``generic`` (or anything not x86-64),
    then 1 for ``x86-64`` up to 4 for ``x86-64-v4``."""
    return X86_LEVELS.index(arch) + 1 if arch in X86_LEVELS else 0


def x86_level(flags: Iterable[str]) -> str:
    """The highest x86-64 level whose flags (and those of every lower level) are all present."""
    have = set(flags)
    level = "x86-64"
    for name in X86_LEVELS[1:]:
        if not _X86_LEVEL_FLAGS[name] <= have:
            break
        level = name
    return level


def _model_name(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("model name", "hardware", "cpu model"):
            return value.strip()
    return platform.processor() or platform.machine() or "CPU"


def cpu_device(cpuinfo: str | None = None, machine: str | None = None) -> DeviceInfo:
    """The host CPU as the local-task device, with its x86-64 level (or
    ``generic`` on aarch64, or the machine name on anything else)."""
    machine = (machine or platform.machine()).lower()
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    if machine in ("x86_64", "amd64"):
        arch = x86_level(cpu_flags(text))
    elif machine in ("aarch64", "arm64"):
        arch = "generic"
    else:
        arch = machine
    return DeviceInfo(driver="local-task", uri="local-task", arch=arch, name=_model_name(text))


def _gpu_nodes_present(driver: str) -> bool:
    if not sys.platform.startswith("linux"):
        return True  # no cheap test elsewhere: ask the driver
    if driver == "hip":
        return os.path.exists("/dev/kfd")
    if driver == "cuda":
        return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/nvidiactl")
    if driver == "vulkan":  # an installable client driver (ICD) manifest: the loader's own search path
        return any(glob.glob(os.path.join(d, "vulkan", "icd.d", "*.json")) for d in _VULKAN_DIRS)
    return True


# Where the Vulkan loader looks for driver manifests (Linux; XDG_DATA_DIRS' default)
_VULKAN_DIRS = ("/usr/share", "/usr/local/share", "/etc")


_INFO_LINE = re.compile(r"^\s*-\s*([\w-]+)\s*:\s*(.*?)\s*$", re.M)


def _parse_device_info(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in _INFO_LINE.finditer(text or "")}


def gfx_arch(name: str) -> str:
    """``gfx942:sramecc+:xnack-`` -> ``gfx942`` (IREE targets the bare arch)."""
    return name.split(":", 1)[0].strip()


# IREE's CUDA driver takes kernel results from a stream-ordered pool by
# default (cuMemAllocFromPoolAsync), and its allocator cannot export those
# buffers through DLPack (3.13: "CUDA buffer type is not supported for
# export"); plainly allocated results export, so outputs reach torch without
# a copy. Runtime flags are read when a driver is created (once per process).
# BOO_CUDA_ASYNC_ALLOCATIONS=1 keeps IREE's default (outputs are then copied).
CUDA_DRIVER_FLAGS = ("--cuda_async_allocations=false",)
ASYNC_ALLOCATIONS_ENV = "BOO_CUDA_ASYNC_ALLOCATIONS"


# IREE's CPU heap allocator zero-fills every buffer it allocates: a kernel's
# results and the transients of a multi-dispatch kernel, each call. On
# local-sync that runs on the calling thread, and it can cost more than the
# kernel (docs/cpu-performance.md, "Measurements behind the code"). IREE's caching allocator keeps
# freed buffers and hands one of the same size back, not zeroed again (every
# kernel writes all of its results). Bounded: it keeps a freed buffer while
# its pool holds at most 256 MiB besides (and at most 64 free buffers).
# local-task gained nothing measurable. BOO_LOCAL_SYNC_ALLOCATOR=<IREE
# allocator spec> replaces it, "none" turns it off; read when a device opens.
LOCAL_SYNC_ALLOCATOR = "caching:device_local=*;256mib;64"
ALLOCATOR_ENV = "BOO_LOCAL_SYNC_ALLOCATOR"


def driver_of(uri: str) -> str:
    """The runtime driver of a device URI: "local-sync", "cuda://0" -> "cuda"."""
    return uri.split("://", 1)[0].split("?", 1)[0]


def device_allocators(uri: str) -> list[str] | None:
    """The allocator specs the loader opens ``uri``'s device with (IREE's
    ``--device_allocator`` syntax), None for the driver's own allocator."""
    if driver_of(uri) != "local-sync":
        return None
    spec = os.environ.get(ALLOCATOR_ENV, LOCAL_SYNC_ALLOCATOR).strip()
    return None if spec.lower() in ("", "none") else [spec]


def configure_driver(uri: str) -> None:
    """Set the runtime flags the loader wants for ``uri``'s driver; call before
    the driver is first created. A runtime without the flag is left alone."""
    if driver_of(uri) != "cuda" or os.environ.get(ASYNC_ALLOCATIONS_ENV) == "1":
        return
    from .native import runtime

    try:
        runtime().parse_flags(*CUDA_DRIVER_FLAGS)
    except Exception:  # noqa: BLE001 - an unknown flag in another runtime build
        pass


def gpu_devices(driver_name: str) -> tuple[DeviceInfo, ...]:
    """GPUs of one IREE driver (``hip`` or ``cuda``); empty when the driver
    cannot load or finds nothing. Never raises."""
    try:
        from .native import runtime

        configure_driver(driver_name)
        driver = runtime().get_cached_hal_driver(driver_name)
        infos = driver.query_available_devices()
    except Exception:  # noqa: BLE001 - no library, no device, no permission: no GPU
        return ()
    found = []
    by_ordinal = by_uuid = None  # CUDA compute capabilities, read when needed
    for index, info in enumerate(infos):
        try:
            fields = _parse_device_info(driver.dump_device_info(info["device_id"]))
        except Exception:  # noqa: BLE001
            fields = {}
        name = str(info.get("name") or driver_name)
        if driver_name == "hip":
            arch = gfx_arch(fields.get("gpu-arch-name", ""))
        else:
            cc = fields.get("gpu-compute-capability", "")
            arch = "sm_" + cc.replace(".", "") if cc else ""
            if not arch:
                if by_ordinal is None:
                    by_ordinal = libcuda_capabilities()
                if index in by_ordinal:
                    arch = cuda_arch(*by_ordinal[index])
                else:
                    if by_uuid is None:
                        by_uuid = nvidia_smi_capabilities()
                    cap = by_uuid.get(str(info.get("path", "")).lower())
                    arch = cuda_arch(*cap) if cap else ""
        if not arch:
            arch = "unknown"
        found.append(DeviceInfo(driver=driver_name, uri=f"{driver_name}://{index}", arch=arch, name=name))
    return tuple(found)


def vulkan_devices() -> tuple[DeviceInfo, ...]:
    """Vulkan devices (IREE's ``vulkan`` driver), each with what a Vulkan target's code
    assumes of it (``dump_device_info``: vendor id, device type, subgroup sizes,
    16-bit features); empty when the driver cannot load or finds nothing. Never raises."""
    try:
        from .native import runtime

        driver = runtime().get_cached_hal_driver("vulkan")
        infos = driver.query_available_devices()
    except Exception:  # noqa: BLE001 - no loader, no ICD, no device: no Vulkan device
        return ()
    found = []
    for info in infos:
        try:
            text = driver.dump_device_info(info["device_id"])
        except Exception:  # noqa: BLE001
            text = ""
        path = str(info.get("path") or "")
        found.append(parse_vulkan_info(text, path, str(info.get("name") or "vulkan")))
    return tuple(found)


def parse_vulkan_info(text: str, path: str, name: str) -> DeviceInfo:
    """A Vulkan device from IREE's ``dump_device_info`` text (``vendor_id: 0x10de``,
    ``type: cpu``, ``driver: llvmpipe``, ``subgroup: ... minSubgroupSize=8
    maxSubgroupSize=8``, ``features: ... shaderFloat16=yes storageBuffer16BitAccess=yes``)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith(" "):
            fields.setdefault(key.strip(), value.strip())
    try:
        vendor = int(fields.get("vendor_id", "0"), 0)
    except ValueError:
        vendor = 0
    words = dict(w.split("=", 1) for w in (fields.get("features", "") + " " + fields.get("subgroup", "")).split()
                 if "=" in w)
    size = words.get("size", "0")
    low, high = words.get("minSubgroupSize", size), words.get("maxSubgroupSize", size)
    subgroups = (int(low), int(high)) if low.isdigit() and high.isdigit() else (0, 0)
    half = words.get("shaderFloat16") == "yes" and words.get("storageBuffer16BitAccess") == "yes"
    software = fields.get("type") == "cpu"
    arch = (fields.get("driver") or "software") if software else VULKAN_VENDORS.get(vendor, hex(vendor)).lower()
    # IREE's Vulkan driver names a device by its path (the UUID), not by an ordinal
    return DeviceInfo(driver="vulkan", uri=f"vulkan://{path}" if path else "vulkan", arch=arch,
                      name=fields.get("name") or name, vendor=vendor, subgroups=subgroups, half=half,
                      software=software)


def vulkan_can_run(device: DeviceInfo, target: Target) -> tuple[bool, str]:
    """Whether Vulkan ``device`` runs ``target``'s code (``targets.VulkanArch``: its
    vendor, a subgroup size the device runs, 16-bit types where the target uses
    them); the reason when not. Code built for another subgroup size runs without an
    error and computes wrong results, so a device that does not say is refused."""
    varch = vulkan_arch(target)
    if varch is None or device.driver != "vulkan":
        return False, f"not run: {device.uri} is not a Vulkan device"
    who = f"{device.name} ({device.uri})"
    if varch.vendors and device.vendor not in varch.vendors:
        have = VULKAN_VENDORS.get(device.vendor, f"vendor {device.vendor:#x}")
        return False, f"not run: {who} is {have}'s; {target.name} is built for {varch.what}"
    low, high = device.subgroups
    if varch.subgroups and not any(low <= s <= high for s in varch.subgroups):
        sizes = " or ".join(map(str, varch.subgroups))
        return False, (f"not run: {who} runs subgroups of {low}-{high}, {target.name}'s code those of {sizes}"
                       if high else f"not run: {who} does not say its subgroup size")
    if varch.half and not device.half:
        return False, f"not run: {who} lacks 16-bit arithmetic or storage (shaderFloat16, storageBuffer16BitAccess)"
    return True, ""


# CUdevice_attribute values (cuda.h): they are part of the driver's ABI.
_CU_COMPUTE_CAPABILITY_MAJOR, _CU_COMPUTE_CAPABILITY_MINOR = 75, 76


def libcuda_capabilities(library: str = "libcuda.so.1") -> dict[int, tuple[int, int]]:
    """(major, minor) compute capability per CUDA device ordinal, from the
    CUDA driver library through ctypes; ``{}`` when it cannot load or
    initialize (no driver, no GPU, no permission). Never raises."""
    import ctypes

    try:
        lib = ctypes.CDLL(library)
        if lib.cuInit(0) != 0:
            return {}
        count = ctypes.c_int(0)
        if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return {}
        found = {}
        for ordinal in range(count.value):
            dev, major, minor = ctypes.c_int(0), ctypes.c_int(0), ctypes.c_int(0)
            if (lib.cuDeviceGet(ctypes.byref(dev), ordinal) == 0
                    and lib.cuDeviceGetAttribute(ctypes.byref(major), _CU_COMPUTE_CAPABILITY_MAJOR, dev) == 0
                    and lib.cuDeviceGetAttribute(ctypes.byref(minor), _CU_COMPUTE_CAPABILITY_MINOR, dev) == 0):
                found[ordinal] = (major.value, minor.value)
        return found
    except Exception:  # noqa: BLE001 - no library or a broken one: unknown, not an error
        return {}


def parse_nvidia_smi(text: str) -> dict[str, tuple[int, int]]:
    """``nvidia-smi --query-gpu=uuid,compute_cap --format=csv,noheader`` output
    -> {lower-case "gpu-<uuid>": (major, minor)}; lines it cannot read are skipped."""
    found = {}
    for line in (text or "").splitlines():
        uuid, sep, cap = line.partition(",")
        major, dot, minor = cap.strip().partition(".")
        if sep and dot and major.isdigit() and minor.isdigit() and uuid.strip():
            found[uuid.strip().lower()] = (int(major), int(minor))
    return found


def nvidia_smi_capabilities(timeout_s: float = 10.0) -> dict[str, tuple[int, int]]:
    """Compute capability per GPU UUID from ``nvidia-smi`` (``{}`` without it). Never raises."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return {}
    try:
        out = subprocess.run([exe, "--query-gpu=uuid,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_nvidia_smi(out.stdout) if out.returncode == 0 else {}


GPU_DRIVERS = ("hip", "cuda")


def discover(*, gpus: bool | None = None, vulkan: bool = False) -> tuple[DeviceInfo, ...]:
    """Every device on this machine: the CPU first, then AMD (hip) and NVIDIA
    (cuda) GPUs, then (``vulkan``: asked for by who runs Vulkan targets, as
    probing costs a Vulkan driver) Vulkan devices. ``gpus=None`` probes a driver
    only where its device nodes (Vulkan: its driver manifests) exist; ``True``
    always probes; ``False`` never does."""
    devices = [cpu_device()]
    for driver in GPU_DRIVERS + (("vulkan",) if vulkan else ()):
        if gpus is False or (gpus is None and not _gpu_nodes_present(driver)):
            continue
        devices.extend(vulkan_devices() if driver == "vulkan" else gpu_devices(driver))
    return tuple(devices)


def discover_for(targets: Iterable) -> tuple[DeviceInfo, ...]:
    """``discover()`` for running ``targets`` (anything with a ``driver``): Vulkan
    devices are probed only where one of them is a Vulkan target."""
    return discover(vulkan=any(t.driver == "vulkan" for t in targets))


def cpu_can_run(device_arch: str, target_arch: str) -> tuple[bool, str]:
    """Whether a CPU of ``device_arch`` runs code built for ``target_arch``;
    the reason when not."""
    if target_arch in X86_LEVELS:
        if device_arch not in X86_LEVELS:
            return False, f"not run: CPU is {device_arch}, target needs {target_arch}"
        if X86_LEVELS.index(device_arch) < X86_LEVELS.index(target_arch):
            return False, f"not run: CPU lacks {target_arch} (has {device_arch})"
        return True, ""
    if device_arch == target_arch:
        return True, ""
    return False, f"not run: CPU is {device_arch}, target needs {target_arch}"


def cuda_can_run(device_arch: str, target_arch: str) -> bool:
    """Whether an NVIDIA GPU of ``device_arch`` (``"sm_90"``) runs code built
    for ``target_arch``: PTX runs on its compute capability and every later
    one; an architecture-specific target (``sm_90a``) only on its own."""
    dev, tgt = cuda_capability(device_arch), cuda_capability(target_arch)
    if dev is None or tgt is None:
        return False
    if tgt[2]:
        return dev[:2] == tgt[:2]
    return dev[:2] >= tgt[:2]


def no_device_reason(arch: str) -> str:
    """Why a target of ``arch`` was not run: no device for it. The one wording
    of every "not run" record for it, from a local build and through Dask alike
    (the reason goes into the bundle index, which must not depend on where it ran)."""
    return f"not run: no device ({arch})"


def match_target(target: Target, devices: Iterable[DeviceInfo]) -> tuple[DeviceInfo | None, str]:
    """The first device that can run ``target`` and ``""``; or ``None`` and why
    not (``"not run: no device (gfx942)"``,
    ``"not run: CPU lacks x86-64-v4 (has x86-64-v3)"``)."""
    devices = tuple(devices)
    if target.driver in ("local-task", "local-sync"):
        cpus = [d for d in devices if d.is_cpu]
        if not cpus:
            return None, no_device_reason(target.arch)
        reasons = []
        for d in cpus:
            ok, why = cpu_can_run(d.arch, target.arch)
            if ok:
                return d, ""
            reasons.append(why)
        return None, reasons[0]
    same_driver = [d for d in devices if d.driver == target.driver]
    if target.driver == "vulkan":
        reasons = []
        for d in same_driver:
            ok, why = vulkan_can_run(d, target)
            if ok:
                return d, ""
            reasons.append(why)
        return None, reasons[0] if reasons else no_device_reason(target.arch)
    for d in same_driver:
        if gfx_arch(d.arch) == target.arch or (target.driver == "cuda" and cuda_can_run(d.arch, target.arch)):
            return d, ""
    if same_driver:
        others = ", ".join(sorted({d.arch for d in same_driver}))
        return None, f"{no_device_reason(target.arch)}; found {others}"
    return None, no_device_reason(target.arch)
