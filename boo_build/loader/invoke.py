"""Run a compiled kernel (vmfb) in-process through IREE's runtime.

Loader world: stdlib, numpy and iree-base-runtime's native module (imported
lazily, on the first ``open_device``); torch only when handed torch tensors
(never imported here otherwise).

Call path (why each step is the cheapest one: docs/cpu-performance.md, "Measurements behind the code"):

* inputs: ``torch.utils.dlpack.to_dlpack`` (cheaper than ``Tensor.__dlpack__``)
  -> ``HalDevice.from_dlpack_capsule``: the HAL buffer view *wraps the
  tensor's memory* (no copy) and keeps the tensor alive until IREE releases it.
  IREE's heap import needs 64-byte aligned host memory: torch's CPU allocator
  aligns to 64, so ordinary tensors go through without a copy; a misaligned
  view (``x[1:]``), a non-contiguous tensor or a numpy array that happens not
  to be aligned is first copied into an aligned buffer (the fallback copy).
* the synchronous export ``func_name`` is invoked (it runs ``func$async``
  and waits on its own fence; timing both showed no difference worth the
  fence bookkeeping).
* outputs: ``VmVariantList.get_as_object`` (cheaper than
  ``get_as_ref(i).deref``) -> ``HalDevice.create_dlpack_capsule`` ->
  ``torch._C._from_dlpack`` (torch; the public wrapper adds protocol checks)
  or a mapping of the HAL buffer (numpy): no copy either way.
* numpy ``ml_dtypes.bfloat16`` (numpy's DLPack refuses it) is imported as
  uint16 and the buffer view retyped; outputs map back to ``ml_dtypes.bfloat16``.
* GPU devices (hip, cuda, vulkan): device tensors go through DLPack as
  above; CPU tensors and numpy arrays are staged (copied in, results copied
  out through a host-visible staging buffer: ``_download``). Vulkan takes
  host memory only (torch has no Vulkan tensors); the tests run it on Mesa's
  software GPU, and HIP and CUDA have not run here.

The per-call overhead over a bare ``VmContext.invoke`` with pre-imported
arguments is an import per input, a hand-over per output and the runner's
Python (``benchmarks/cpu_vs_eager.py`` measures it).
Inputs that recur call after call (a layer's weight and bias: the positions
``cache_inputs`` names) keep their imported buffer view while the same memory
comes again (same data pointer, shape, dtype, contiguous), saving the import.
The view keeps that tensor's storage alive, so only tensors up to
``CACHED_INPUT_BYTES`` are kept, one per position.

Import cost: the loader talks to the native extension (``native.py``), not
``import iree.runtime``, which imports ``ml_dtypes`` (0.6-1.5 s here).
``ml_dtypes`` is imported only for numpy bfloat16 arrays, and the full
``iree.runtime`` only on the GPU staging path.

Lifetime: outputs point into memory owned by the HAL device, so the device
must outlive them: ``open_device`` (``hal.py``, with the CPU worker threads
and the release at exit) keeps one device per URI until the process ends.
Array and dtype conversion is in ``arrays.py``; both are re-exported here.

Threads: a VM context is thread-compatible, not thread-safe (iree-org/iree
#12948), so a runner keeps a small pool of contexts over one shared module:
a call takes a free context (creating one, under a lock, when all are busy)
and returns it afterwards. Modules, the VM instance and the HAL device are
shared; executable creation is serialized by the same lock.
"""

from __future__ import annotations

import itertools
import math
import re
import sys
from typing import Any

import numpy as np

from .arrays import (
    ALIGNMENT,
    aligned_copy,
    element_type,
    numpy_dtype,
    numpy_from_torch,
    torch_dtype_of,
    torch_from_numpy,
)
from .hal import EXIT, LOAD_LOCK, RuntimeDevice, set_cpu_threads
from .native import runtime as _rt

# What callers import from here (the benchmark, validation, the bundle, tests).
# set_cpu_threads is documented here (docs/loader.md): users call it from invoke
__all__ = ["KernelError", "KernelRunner", "set_cpu_threads"]


CACHED_INPUT_BYTES = 1 << 20  # recurring inputs larger than this are imported every call


class KernelError(RuntimeError):
    """The runtime rejected or failed a kernel call; the message is IREE's."""


def _full_rt():
    import iree.runtime as rt

    return rt


# ----------------------------------------------------------------- runner
_SIGNATURE = re.compile(r"\((\d*)([a-z]*)_([a-z]*)\)")


def _arity(fn) -> tuple[int | None, int | None]:
    """(argument count, result count) from the VM calling convention in the
    function's repr, e.g. ``(0rrr_rrr)``; None where it cannot be read."""
    m = _SIGNATURE.search(repr(fn))
    if not m:
        return None, None
    return len(m.group(2)), len(m.group(3))


# ----------------------------------------------------------------- runner
class KernelRunner:
    """One kernel function of a vmfb, callable with torch tensors or numpy arrays.

    ``runner(*tensors)`` returns a tuple of outputs of the same kind (torch in,
    torch out; numpy in, numpy out). Safe to call from several threads.
    """

    def __init__(self, device: RuntimeDevice, vmfb: bytes, func_name: str):
        rt = _rt()
        self.device = device
        self.func_name = func_name
        with LOAD_LOCK:
            self._module = rt.VmModule.copy_buffer(device.vm_instance, vmfb)
        names = list(self._module.function_names)
        if func_name not in names:
            raise KeyError(f"vmfb has no function {func_name!r}; it has {', '.join(sorted(names))}")
        fn = self._module.lookup_function(func_name)
        self.num_args, self.num_results = _arity(fn)
        self._pool: list = []  # free (context, function) pairs
        self._pool.append(self._new_context())
        # Bound once: attribute lookups are a measurable part of a small kernel's call.
        hal = device.hal_device
        self._from_capsule = hal.from_dlpack_capsule
        self._to_capsule = hal.create_dlpack_capsule
        self._VariantList = rt.VmVariantList
        self._BufferView = rt.HalBufferView
        self._bf16 = int(rt.HalElementType.BFLOAT_16)
        self._numpy_dtypes: dict[int, np.dtype] = {}
        # (torch, Tensor, to_dlpack, from_dlpack), bound on the first torch call
        self._torch: tuple[Any, Any, Any, Any] | None = None
        self._fast = None  # torch.Tensor once bound on a CPU device (the hot path), None after close()
        self._n_out = self.num_results or 4  # result list capacity
        self._no_slots = itertools.repeat(None)  # zip's partner when no input is kept (any length)
        self._cpu = device.is_cpu
        self._slots: tuple = ()  # per input position: None, or [(key, buffer view) | None] (cache_inputs)
        self._dl_code, self._dl_index = device.dlpack_device
        # GPUs: how outputs reach torch ("dlpack" or "copy", None until the first
        # call) and why not by DLPack; whether a call first waits for torch's
        # current stream (always, but for a check that proves the wait matters).
        self.output_path: str | None = None
        self.output_path_reason = ""
        self.sync_inputs = True
        self._closed = False
        EXIT.runners.add(self)

    def close(self) -> None:
        """Drop the runtime objects (contexts, functions, module, device): at
        exit (``_Exit``); a call afterwards raises ``KernelError``."""
        self._closed = True
        self._fast = None
        self._pool.clear()
        self._slots = ()  # the kept imports (cache_inputs)
        # a call afterwards is refused (_closed) before it reads any of these
        self._module = self.device = self._from_capsule = self._to_capsule = None  # type: ignore[assignment]

    def _new_context(self):
        rt = _rt()
        with LOAD_LOCK:
            ctx = rt.VmContext(self.device.vm_instance, modules=[self.device.hal_module, self._module])
            fn = self._module.lookup_function(self.func_name)
        return ctx, fn

    def cache_inputs(self, positions) -> None:
        """Keep the imported buffer view of the CPU torch inputs at ``positions``
        (those that recur: weights, biases) for as long as the same memory comes again."""
        n = self.num_args or (max(positions, default=-1) + 1)
        self._slots = tuple([None] if i in set(positions) else None for i in range(n))

    # -- calling --------------------------------------------------------
    def __call__(self, *args):
        if self._fast is not None and len(args) == self.num_args and type(args[0]) is self._fast:
            return self._call_torch_cpu(args)  # the hot path, straight: CPU torch tensors
        if self._closed:
            raise KernelError(f"{self.func_name}: the runtime was released at interpreter exit")
        if self.num_args is not None and len(args) != self.num_args:
            raise TypeError(f"{self.func_name} takes {self.num_args} arguments, got {len(args)}")
        if args and isinstance(args[0], np.ndarray):
            return self._call_numpy(args)
        return self._call_torch(args)

    def _invoke(self, arg_list):
        pool = self._pool
        try:
            ctx, fn = pool.pop()
        except IndexError:  # every context is busy in another thread
            ctx, fn = self._new_context()
        try:
            ret_list = self._VariantList(self._n_out)
            try:
                ctx.invoke(fn, arg_list, ret_list)
            except Exception as e:  # noqa: BLE001 - IREE raises plain RuntimeError/ValueError
                raise KernelError(f"{self.func_name}: {e}") from e
            return ret_list
        finally:
            pool.append((ctx, fn))

    def _bind_torch(self):
        torch = sys.modules.get("torch")
        if torch is None:
            return None
        to_dlpack = torch.utils.dlpack.to_dlpack
        # torch.utils.dlpack.from_dlpack is a Python wrapper (protocol checks)
        # around this; calling it directly saves them per output.
        from_dlpack = getattr(torch._C, "_from_dlpack", None) or torch.utils.dlpack.from_dlpack
        self._torch = (torch, torch.Tensor, to_dlpack, from_dlpack)
        if self._cpu and not self._closed:
            self._fast = torch.Tensor  # __call__'s test for the hot path
        return self._torch

    def _call_torch(self, args):
        bound = self._torch or self._bind_torch()
        if bound is None:
            raise TypeError(f"{self.func_name}: pass torch tensors or numpy arrays")
        if self._cpu:
            return self._call_torch_cpu(args)
        torch, Tensor, to_dlpack, from_dlpack = bound
        from_capsule = self._from_capsule
        arg_list = self._VariantList(len(args))
        keep = []  # copies made on the fallback path live until the call returns
        cpu = self._cpu
        for t in args:
            if not isinstance(t, Tensor):
                raise TypeError(f"{self.func_name}: pass all torch tensors or all numpy arrays, "
                                f"got {type(t).__name__} among tensors")
            if t.requires_grad:
                t = t.detach()
            if not cpu and t.device.type != "cuda":
                if all(isinstance(a, Tensor) and a.device.type == "cpu" for a in args):
                    return self._call_torch_via_host(args, torch)  # staged: copied in and out
                where = ", ".join(sorted({str(a.device) for a in args if isinstance(a, Tensor)}))
                raise ValueError(f"{self.func_name}: arguments are on {where}; this kernel runs on "
                                 f"{self.device.uri}: pass every tensor on that device, or all on the CPU")
            if not cpu and (t.device.index or 0) != self._dl_index:
                raise ValueError(f"{self.func_name}: an argument is on {t.device}, but this kernel runs on "
                                 f"{self.device.uri} (torch device cuda:{self._dl_index}): move it there")
            if cpu and (t.data_ptr() % ALIGNMENT or not t.is_contiguous()):
                t = t.clone(memory_format=torch.contiguous_format)  # CPU allocator aligns to 64
                keep.append(t)
            elif not cpu and not t.is_contiguous():
                t = t.contiguous()
                keep.append(t)
            try:
                bv = from_capsule(to_dlpack(t))
            except Exception:  # noqa: BLE001 - a layout DLPack or IREE refuses: copy
                t = t.clone(memory_format=torch.contiguous_format)
                keep.append(t)
                bv = from_capsule(to_dlpack(t))
            arg_list.push_ref(bv)
        if not cpu:
            # IREE runs on its own stream: wait until torch's current stream has
            # written the inputs (the simple, synchronous ordering; the call
            # itself returns only once the kernel finished, so torch may read
            # the outputs right away).
            if self.sync_inputs:
                torch.cuda.current_stream(args[0].device).synchronize()
            return self._gpu_outputs(self._invoke(arg_list), torch, from_dlpack, args[0].device)
        rets = self._invoke(arg_list)
        to_capsule, BV, code, index = self._to_capsule, self._BufferView, self._dl_code, self._dl_index
        get = rets.get_as_ref
        return tuple([from_dlpack(to_capsule(get(i).deref(BV), code, index)) for i in range(rets.size)])

    def _call_torch_cpu(self, args):
        """CPU tensors in place (DLPack both ways): the hot path, kept lean (the
        context pool and the outputs inline: each Python call saved shows)."""
        # bound: _call_torch binds it first, and _fast is set only with it
        torch, Tensor, to_dlpack, from_dlpack = self._torch  # type: ignore[misc]
        from_capsule = self._from_capsule
        arg_list = self._VariantList(len(args))
        push = arg_list.push_ref
        keep = []  # copies made on the fallback path live until the call returns
        for t, slot in zip(args, self._slots or self._no_slots):
            if type(t) is not Tensor and not isinstance(t, Tensor):
                raise TypeError(f"{self.func_name}: pass all torch tensors or all numpy arrays, "
                                f"got {type(t).__name__} among tensors")
            if slot is not None:
                # the memory the cached view was imported from, still held by it: the same bytes
                key = (t.data_ptr(), t.shape, t.dtype)
                hit = slot[0]
                if hit is not None and hit[0] == key and t.is_contiguous():
                    push(hit[1])
                    continue
            if t.requires_grad:
                t = t.detach()
            if t.data_ptr() % ALIGNMENT or not t.is_contiguous():
                t = t.clone(memory_format=torch.contiguous_format)  # CPU allocator aligns to 64
                keep.append(t)
                slot = None
            try:
                bv = from_capsule(to_dlpack(t))
            except Exception:  # noqa: BLE001 - a layout DLPack or IREE refuses: copy
                t = t.clone(memory_format=torch.contiguous_format)
                keep.append(t)
                slot = None
                bv = from_capsule(to_dlpack(t))
            push(bv)
            if slot is not None:
                slot[0] = (key, bv) if t.nbytes <= CACHED_INPUT_BYTES else None
        rets = self._invoke(arg_list)
        to_capsule, BV, code, index = self._to_capsule, self._BufferView, self._dl_code, self._dl_index
        get = rets.get_as_object  # one call instead of get_as_ref(i).deref(BV)
        n = rets.size
        if n == 3:  # unrolled (the norms' forward and full backward): a loop costs more
            return (from_dlpack(to_capsule(get(0, BV), code, index)), from_dlpack(to_capsule(get(1, BV), code, index)),
                    from_dlpack(to_capsule(get(2, BV), code, index)))
        out = []
        for i in range(n):  # a loop: a comprehension costs a function call on 3.11
            out.append(from_dlpack(to_capsule(get(i, BV), code, index)))
        return tuple(out)

    def _gpu_outputs(self, rets, torch, from_dlpack, tdev):
        """A GPU call's results as torch tensors on ``tdev``: the runtime's own
        buffers through DLPack (no copy) where its allocator exports them, else
        one device-to-device copy each into tensors torch allocates (the first
        refusal switches this runner to copies; ``output_path`` says which)."""
        BV = self._BufferView
        views = [rets.get_as_ref(i).deref(BV) for i in range(rets.size)]
        if self.output_path != "copy":
            try:
                outs = tuple([from_dlpack(self._to_capsule(bv, self._dl_code, self._dl_index)) for bv in views])
                self.output_path = "dlpack"
                return outs
            except Exception as e:  # noqa: BLE001 - the allocator cannot export these buffers
                if self.output_path == "dlpack":  # it could before: a real failure
                    raise KernelError(f"{self.func_name}: exporting an output failed: {e}") from e
                self.output_path, self.output_path_reason = "copy", str(e).strip().splitlines()[0][:300]
        return self._copy_out(views, torch, tdev)

    def _copy_out(self, views, torch, tdev):
        """Copy each result on the device into a torch tensor (uint8 storage of the
        buffer's byte length, then viewed: a result buffer may be padded)."""
        # bound: only _call_torch's GPU path gets here
        hal, to_dlpack = self.device.hal_device, self._torch[2]  # type: ignore[index]
        outs, waits = [], []
        for bv in views:
            src = bv.get_buffer()
            raw = torch.empty(src.byte_length(), dtype=torch.uint8, device=tdev)
            dtype = torch_dtype_of(torch, bv.element_type)
            shape = tuple(bv.shape)
            nbytes = math.prod(shape) * dtype.itemsize
            if nbytes:
                sem = hal.create_semaphore(0)
                hal.queue_copy(src, self._from_capsule(to_dlpack(raw)).get_buffer(), [], [(sem, 1)])
                waits.append(sem)
            outs.append(raw[:nbytes].view(dtype).reshape(shape))
        for sem in waits:
            sem.wait(1)
        return tuple(outs)


    def _call_numpy(self, args):
        if not self._cpu:
            return self._call_host(args)
        from_capsule = self._from_capsule
        arg_list = self._VariantList(len(args))
        for a in args:
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{self.func_name}: pass all torch tensors or all numpy arrays, got {type(a).__name__}")
            if not a.flags.c_contiguous or a.ctypes.data % ALIGNMENT or not a.flags.writeable:
                a = aligned_copy(a)  # also readonly arrays: DLPack 0.x cannot mark them
            if a.dtype.kind == "V" or a.dtype.name == "bfloat16":
                # numpy's DLPack refuses ml_dtypes.bfloat16: import the bits as
                # uint16 and retype the buffer view.
                raw = from_capsule(a.view(np.uint16).__dlpack__())
                bv = self._BufferView(raw.get_buffer(), list(a.shape), self._bf16)
            else:
                bv = from_capsule(a.__dlpack__())
            arg_list.push_ref(bv)
        rets = self._invoke(arg_list)
        out = []
        BV = self._BufferView
        for i in range(rets.size):
            bv = rets.get_as_ref(i).deref(BV)
            # the mapping keeps the buffer (and the device memory) alive
            out.append(bv.map().asarray(bv.shape, self._numpy_dtype(bv.element_type)))
        return tuple(out)

    def _call_host(self, arrays):
        """numpy arrays on a GPU: copy in (host staging), run, copy out."""
        rt = _full_rt()
        hal = self.device.hal_device
        arg_list = self._VariantList(len(arrays))
        for a in arrays:
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{self.func_name}: pass all torch tensors or all numpy arrays, got {type(a).__name__}")
            a = np.ascontiguousarray(a)
            if a.dtype.name == "bfloat16":
                a, et = a.view(np.uint16), self._bf16
            else:
                et = element_type(a.dtype)
            bv = hal.allocator.allocate_buffer_copy(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
                device=hal, buffer=a, element_type=et)
            arg_list.push_ref(bv)
        rets = self._invoke(arg_list)
        views = [rets.get_as_ref(i).deref(self._BufferView) for i in range(rets.size)]
        return self._download(views, rt)

    def _download(self, views, rt) -> tuple:
        """Device results as numpy arrays: each copied into a host-visible staging
        buffer (``queue_copy``, all in flight together), then mapped and copied out.
        ``DeviceArray.to_host`` imports host memory instead, which a device refuses
        below its import alignment (lavapipe: "minImportedHostPointerAlignment
        4096"), and a device-local result cannot be mapped ("PERMISSION_DENIED ...
        MAPPING_SCOPED"): the CUDA and HIP paths stage the same way."""
        hal = self.device.hal_device
        memory = rt.MemoryType.HOST_LOCAL | rt.MemoryType.DEVICE_VISIBLE
        usage = rt.BufferUsage.TRANSFER | rt.BufferUsage.MAPPING
        staged, waits = [], []
        for bv in views:
            src = bv.get_buffer()
            n = src.byte_length()
            staging = hal.allocator.allocate_buffer(memory_type=memory, allowed_usage=usage,
                                                    allocation_size=n) if n else None  # nothing to copy
            if staging is not None:
                sem = hal.create_semaphore(0)
                hal.queue_copy(src, staging, [], [(sem, 1)])
                waits.append(sem)
            staged.append((bv, staging))
        for sem in waits:
            sem.wait(1)
        out = []
        for bv, staging in staged:
            shape, dtype = list(bv.shape), self._numpy_dtype(bv.element_type)
            if staging is None:
                out.append(np.empty(shape, dtype))
                continue
            host = self._BufferView(staging, shape, bv.element_type).map().asarray(shape, dtype)
            out.append(np.array(host, copy=True))  # the mapping is released with the staging buffer
        return tuple(out)

    def _call_torch_via_host(self, args, torch):
        return tuple(torch_from_numpy(a) for a in self._call_host([numpy_from_torch(t) for t in args]))

    def _numpy_dtype(self, element_type: int) -> np.dtype:
        dt = self._numpy_dtypes.get(element_type)
        if dt is None:
            dt = numpy_dtype(element_type)
            self._numpy_dtypes[element_type] = dt
        return dt

    def __repr__(self) -> str:
        return f"KernelRunner({self.func_name!r} on {self.device.uri})"
