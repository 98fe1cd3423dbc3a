"""Loader checks on the device: stream ordering, output path, staging, device choice.

    python benchmarks/gpu/check_ordering.py BUNDLE [--out FILE.md] [--device DEVICE]

On a GPU (the bundle opens on a cuda or hip device):

* ordering: torch's current stream is held up (``torch.cuda._sleep``) and
  then writes the input, and the loader is called right after with no
  synchronize; the output is read by torch right after the call. The result
  must equal torch's own layer norm of the input. As a control the same is
  run with the loader's wait switched off (``KernelRunner.sync_inputs``): the
  kernel should then read the stale input, which shows the check can fail.
* which way outputs reach torch (``KernelRunner.output_path``: "dlpack", no
  copy; or "copy", one device-to-device copy per output) and why;
* CPU tensors and numpy arrays on the GPU runner (staged through the host);
* ``open_bundle(device="cuda://0")`` honoured, a missing device refused.

On the CPU, and on a Vulkan device (``--device vulkan``: host memory, staged;
torch has no Vulkan tensors), it checks a call with torch tensors and one with
numpy arrays against torch, and says that stream ordering was not checked.
Exit status 0 when every check passed. Needs the loader's dependencies and
torch, nothing of the build side.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def _pick(bundle):
    """The largest float32 layer-norm forward kernel (the clearest race)."""
    from boo_build.signature import KernelSignature

    sigs = [KernelSignature.parse(k) for k in bundle.keys()]
    cands = [s for s in sigs if s.op == "layer_norm" and s.is_forward and s.dtype == "float32" and s.affine]
    if not cands:
        raise SystemExit(f"{bundle.path}: no float32 layer-norm forward kernel with a weight to check with")
    return max(cands, key=lambda s: (s.rows * s.width, s.key))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--out", type=Path, help="write the results (markdown) here too")
    ap.add_argument("--device", help="open the bundle there (open_bundle's device; default: the best present)")
    ns = ap.parse_args(argv)

    import numpy as np
    import torch

    from boo_build.loader import NoCompatibleDevice, open_bundle

    lines: list[str] = []
    failed: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        print(text, flush=True)

    def check(ok: bool, what: str) -> None:
        say(f"- {'PASS' if ok else 'FAIL'}: {what}")
        if not ok:
            failed.append(what)

    say(f"# Loader checks: {ns.bundle.name}")
    say("")
    try:
        b = open_bundle(ns.bundle, device=ns.device)
    except NoCompatibleDevice as e:
        check(False, f"open_bundle: {e}")
        return _finish(ns, lines, failed)
    say(f"- opened on {b.device.uri} ({b.device.name}, {b.device.arch}), target {b.target.name}")
    sig = _pick(b)
    ns_shape = list(sig.normalized_shape)
    gpu = b.device_type == "cuda"  # torch's GPU tensors (HIP, CUDA); a Vulkan device takes host memory
    dev = f"cuda:{b.device.uri.split('://', 1)[1] or 0}" if gpu else "cpu"
    gen = torch.Generator().manual_seed(0)
    src = torch.randn(sig.input_shape, generator=gen).to(dev)
    w = (1 + 0.1 * torch.randn(sig.normalized_shape, generator=gen)).to(dev)
    bias = (0.1 * torch.randn(sig.normalized_shape, generator=gen)).to(dev) if sig.bias else None
    want = torch.nn.functional.layer_norm(src, ns_shape, w, bias, sig.eps)
    tol = dict(atol=1e-4, rtol=1e-4)

    if not gpu:
        where = "the CPU" if b.target.is_cpu else f"{b.device.uri} (host memory, staged)"
        y, _, _ = b.native_layer_norm(src, ns_shape, w, bias, sig.eps)
        check(torch.allclose(y, want, **tol), f"{sig.key} on {where} matches torch")
        yn, _, _ = b.native_layer_norm(src.numpy(), ns_shape, w.numpy(), None if bias is None else bias.numpy(),
                                       sig.eps)
        check(isinstance(yn, np.ndarray) and np.allclose(yn, want.numpy(), **tol),
              f"{sig.key} with numpy arrays on {where} matches torch")
        say("- stream ordering not checked: no CUDA or HIP GPU")
    else:
        runner = b.load(sig.key)
        x = torch.zeros(sig.input_shape, device=dev)
        torch.cuda.synchronize()

        def race(sync: bool) -> tuple[bool, float]:
            runner.sync_inputs = sync
            x.zero_()
            torch.cuda.synchronize()
            torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time on torch's stream, then the write
            x.copy_(src)
            t0 = time.perf_counter()
            y, _, _ = b.native_layer_norm(x, ns_shape, w, bias, sig.eps)  # no synchronize before
            seen = y * 1.0  # torch reads the output right after the call
            elapsed = time.perf_counter() - t0
            torch.cuda.synchronize()
            return torch.allclose(seen, want, **tol), elapsed

        ok, secs = race(True)
        check(ok, f"ordering: input written on torch's stream right before the call, output read right after "
                  f"({sig.key}; the call waited {secs * 1e3:.0f} ms for torch's stream)")
        stale, _ = race(False)
        runner.sync_inputs = True
        say(f"- control: without the loader's wait the result was {'still right (race not provoked)' if stale else 'wrong, as expected: the check can fail'}")
        say(f"- outputs reach torch by: {runner.output_path}"
            + (f" ({runner.output_path_reason})" if runner.output_path_reason else ""))
        y, _, _ = b.native_layer_norm(src, ns_shape, w, bias, sig.eps)
        check(y.device == src.device and y.is_contiguous(), f"output is a {y.device} tensor")
        # CPU tensors and numpy arrays on the GPU runner: staged through the host
        args = [src.cpu(), w.cpu()] + ([bias.cpu()] if bias is not None else [])
        try:
            outs = runner(*args)
            check(outs[0].device.type == "cpu" and torch.allclose(outs[0], want.cpu(), **tol),
                  "CPU tensors on the GPU kernel are staged and come back as CPU tensors")
        except Exception as e:  # noqa: BLE001
            check(False, f"CPU tensors on the GPU kernel: {type(e).__name__}: {e}")
        try:
            outs = runner(*[a.numpy() for a in args])
            check(isinstance(outs[0], np.ndarray) and np.allclose(outs[0], want.cpu().numpy(), **tol),
                  "numpy arrays on the GPU kernel are staged and come back as numpy arrays")
        except Exception as e:  # noqa: BLE001
            check(False, f"numpy arrays on the GPU kernel: {type(e).__name__}: {e}")
        # explicit devices: honoured, or refused with the reason
        b0 = open_bundle(ns.bundle, device=b.device.uri)
        check(b0.device.uri == b.device.uri, f"open_bundle(device={b.device.uri!r}) honoured")
        try:
            open_bundle(ns.bundle, device="cuda://99")
            check(False, "open_bundle(device='cuda://99') should be refused")
        except NoCompatibleDevice as e:
            check("cuda://99" in str(e), f"open_bundle(device='cuda://99') refused: {str(e).splitlines()[0]}")
        # steady-state cost of one call (events on torch's stream bracket the synchronous call)
        for _ in range(10):
            b.native_layer_norm(src, ns_shape, w, bias, sig.eps)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(100):
            b.native_layer_norm(src, ns_shape, w, bias, sig.eps)
        end.record()
        end.synchronize()
        say(f"- {sig.key}: {start.elapsed_time(end) * 10:.1f} us per loader call (mean of 100)")
    return _finish(ns, lines, failed)


def _finish(ns, lines: list[str], failed: list[str]) -> int:
    lines += ["", "all checks passed" if not failed else f"{len(failed)} check(s) FAILED"]
    print("\n".join(lines[-2:]))
    if ns.out:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
