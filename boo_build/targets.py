"""Target catalogue: target name -> iree-compile flags and the runtime driver.

Pure Python: the loader reads it to match devices to bundle targets.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    name: str
    driver: str  # IREE runtime driver that runs it: local-task, hip, cuda
    flags: tuple[str, ...]
    arch: str  # gfx arch for GPUs; CPU level (x86-64-v3, ...) for CPUs

    @property
    def is_cpu(self) -> bool:
        return self.driver == "local-task"


# Flags iree-turbine's BOO runtime passes for HIP (kernel/boo/runtime/launch.py),
# less the conv-specific preprocessing pipeline that does nothing for norms.
_HIP_OPT = (
    "--iree-opt-level=O3",
    "--iree-dispatch-creation-enable-fuse-padding-into-linalg-consumer-ops",
    "--iree-dispatch-creation-enable-split-reduction",
)
GFX_ARCHS = ("gfx90a", "gfx942", "gfx950", "gfx1100", "gfx1201")


def _cpu(name: str, cpu: str, triple: str) -> Target:
    # A named baseline, never "host": a bundle runs on other machines.
    return Target(
        name=name,
        driver="local-task",
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
    return targets


class UnknownTarget(ValueError):
    pass


def resolve(names, catalogue_: dict[str, Target] | None = None) -> tuple[Target, ...]:
    """Targets for ``names``; every unknown name is an error before anything runs."""
    cat = catalogue_ if catalogue_ is not None else catalogue()
    unknown = [n for n in names if n not in cat]
    if unknown:
        raise UnknownTarget(
            f"unknown target(s) {', '.join(map(repr, unknown))}: known targets are {', '.join(sorted(cat))}"
        )
    return tuple(cat[n] for n in dict.fromkeys(names))
