"""Opened IREE devices: one HAL device per URI for the life of the process,
the CPU driver's worker threads, and the release of the runtime's objects at
interpreter exit.

Loader world: stdlib and IREE's native runtime module (``native.py``), imported
on the first ``open_device``; ``iree.runtime`` itself only when the
application already imported it (its device cache is then shared).

Lifetime: outputs point into memory owned by the HAL device, so the device
must outlive them; ``open_device`` keeps one device per URI until the process
ends (iree.runtime's own ``get_device`` cache does the same; when iree.runtime
is already imported, its cache is used so the process has one device per URI,
except for local-sync, which the loader opens with a caching allocator:
``devices.device_allocators``).
At exit the runtime's objects are released in an order IREE accepts
(``_Exit``), so that nanobind reports no leaked instances.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

from ..targets import CPU_DRIVERS, LOCAL_SYNC, LOCAL_TASK
from .native import runtime as _rt


class Closable(Protocol):
    """What ``EXIT`` releases before the devices: ``invoke.KernelRunner`` (which imports
    this module, so it is named here by what it does)."""

    def close(self) -> None: ...

# One lock for every module load / context creation in the process: executable
# creation touches process-wide CPU feature data without synchronization.
LOAD_LOCK = threading.Lock()

# DLPack device type codes (dlpack.h)
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_ROCM = 1, 2, 10
_DLPACK_CODE = {**dict.fromkeys(CPU_DRIVERS, _DLPACK_CPU), "cuda": _DLPACK_CUDA, "hip": _DLPACK_ROCM}


# One HAL device per URI for the life of the process: outputs handed out point
# into device memory, and destroying a device under them crashes at exit.
_DEVICES: dict[str, Any] = {}


def _hal_device(uri: str):
    from .devices import ALLOCATOR_ENV, configure_driver, device_allocators

    configure_driver(uri)
    allocators = device_allocators(uri)
    full = sys.modules.get("iree.runtime")
    # share iree.runtime's cache when the app uses it too, unless the device
    # wants its own allocator (iree.runtime's devices have the driver's)
    if full is not None and allocators is None:
        return full.get_device(uri)
    device = _DEVICES.get(uri)
    if device is None:
        try:
            device = _rt().get_cached_hal_driver(uri).create_device_by_uri(uri, allocators=allocators)
        except Exception as e:  # noqa: BLE001 - IREE's message names the bad part
            if not allocators:
                raise
            raise ValueError(f"cannot open {uri} with allocator {allocators[0]!r} ({ALLOCATOR_ENV}): {e}; "
                             f"set {ALLOCATOR_ENV} to an IREE allocator spec such as 'caching', "
                             f"or 'none'") from None
        _DEVICES[uri] = device
    return device


# ------------------------------------------------------------ CPU threads
def set_cpu_threads(count: int) -> bool:
    """Ask for ``count`` local-task workers (``--task_topology_max_group_count``;
    IREE uses at most one worker per physical core).

    Only a local-task driver created afterwards sees the flag: the driver is
    created once per process, on the first local-task ``open_device``. Returns
    False when workers already exist (the flag is then recorded but too late).
    """
    if count < 1:
        raise ValueError(f"thread count must be positive, got {count}")
    too_late = bool(_worker_threads())
    _rt().parse_flags(f"--task_topology_max_group_count={int(count)}")
    return not too_late


def _worker_threads() -> list[str]:
    names: list[str] = []
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return names
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        if name.startswith("iree-worker"):
            names.append(name)
    return names


def cpu_threads(wait_s: float = 0.2) -> int:
    """How many local-task worker threads this process runs (0 before the first
    local-task device exists). Workers name themselves when they start, so the
    count is read until two reads agree (at most ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    last = len(_worker_threads())
    while time.monotonic() < deadline:
        time.sleep(0.005)
        now = len(_worker_threads())
        if now == last:
            return now
        last = now
    return last


# ---------------------------------------------------------------- devices
@dataclass(eq=False)
class RuntimeDevice:
    """An opened IREE device: its HAL device, VM instance and HAL module."""

    uri: str
    driver: str
    hal_device: Any  # HalDevice
    vm_instance: Any  # VmInstance
    hal_module: Any  # the HAL VmModule every context links
    dlpack_device: tuple[int, int]  # (DLPack device type, index) of its memory

    @property
    def is_cpu(self) -> bool:
        return self.driver in CPU_DRIVERS

    def threads(self) -> int:
        """Worker threads running this device's work (CPU drivers; 0 for GPUs)."""
        if self.driver == LOCAL_SYNC:  # the calling thread
            return 1
        return cpu_threads() if self.driver == LOCAL_TASK else 0

    def close(self) -> None:
        """Drop the runtime objects (at exit, after its runners': ``_Exit``)."""
        self.hal_module = self.vm_instance = self.hal_device = None


def open_device(uri: str = LOCAL_TASK) -> RuntimeDevice:
    """Open the device at ``uri`` ("local-task", "hip://0", "cuda://0").

    Every RuntimeDevice for one URI shares one HAL device, which lives until
    the process ends (outputs handed out point into its memory)."""
    from .devices import driver_of

    rt = _rt()
    driver = driver_of(uri)
    with LOAD_LOCK:
        hal_device = _hal_device(uri)
        instance = rt.VmInstance()
        hal_module = rt.create_hal_module(instance, hal_device)
    index = 0
    tail = uri.split("://", 1)[1] if "://" in uri else ""
    if tail.isdigit():
        index = int(tail)
    device = RuntimeDevice(uri=uri, driver=driver, hal_device=hal_device, vm_instance=instance,
                           hal_module=hal_module, dlpack_device=(_DLPACK_CODE.get(driver, _DLPACK_CPU), index))
    EXIT.opened(device)
    return device


# -------------------------------------------------------------------- exit
class _Exit:
    """Releases the runtime's objects at interpreter exit (``atexit``), in an
    order IREE accepts, whatever the process still holds.

    nanobind reports every runtime object still alive when iree's native
    module is finalized ("nanobind: leaked N instances!", a line per object),
    and a process may hold its bundles to the end in ways Python never frees
    (an autograd graph kept in a global whose nodes hold the model, as
    ``torch.utils.checkpoint`` makes). Checked on iree-base-runtime 3.13:

    * every runner's contexts, functions and module, then every device's HAL
      module and VM instance can go at exit while kernel outputs live on: they
      go (a kernel call afterwards raises ``KernelError``);
    * a HAL device cannot: kernel outputs point into its memory, and reading
      or freeing one after the device is destroyed crashes; and Python does
      not say when the last one goes (torch frees no storage objects during
      interpreter finalization, and module teardown frees ``_DEVICES`` before
      objects garbage-collected later: a checkpointed graph's outputs, freed
      after their device, crashed the process). So each device gets one
      reference that is never dropped (it lives until the process ends, as
      ``_DEVICES`` means it to), and the runtime's leak report, which would
      list it (and its driver), is turned off once the rest is released
      (``disable_leak_checker``, the runtime's own switch; iree-turbine sets
      it at import).
    """

    def __init__(self):
        self.runners: weakref.WeakSet[Closable] = weakref.WeakSet()  # every KernelRunner (invoke.py adds each)
        self.devices: weakref.WeakSet[RuntimeDevice] = weakref.WeakSet()
        self._registered = False

    def opened(self, device: RuntimeDevice) -> None:
        self.devices.add(device)
        if not self._registered:
            self._registered = True
            atexit.register(self.release)

    def release(self) -> None:
        import ctypes

        for r in list(self.runners):
            r.close()
        kept = {}
        for d in list(self.devices):
            kept[id(d.hal_device)] = d.hal_device
            d.close()
        for hal in kept.values():
            if hal is not None:
                ctypes.pythonapi.Py_IncRef(ctypes.py_object(hal))
        _rt().disable_leak_checker()  # what is left: the devices, kept on purpose


EXIT = _Exit()
