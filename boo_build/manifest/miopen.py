"""MIOpen / iree-turbine BOO driver command lines -> kernel signatures.

Pure Python. The command names come from the ops (``Op.commands``:
``layernorm``, ``layernormfp16``, ``layernormbfp16``, this project's
``rmsnorm``, ``rmsnormfp16``, ``rmsnormbfp16``, and ``groupnorm``,
``groupnormfp16``, ``groupnormbfp16``), the flags are MIOpen's; the fused
residual form (``KernelSignature.residual``: x + residual, then the norm) of
the ops that have one (``Op.residual_commands``): MIOpen's ``addlayernorm``,
``addlayernormfp16``, ``addlayernormbfp16`` and this project's ``addrmsnorm``,
``addrmsnormfp16``, ``addrmsnormbfp16``, with the flags of the plain command
(``-F 14``: the backward taking grad_h; the plain command's ``-F 14`` is the
one without it). How a command
gives its input shape is the op's (``Op.command_shape``): ``"tensor"``
(layernorm's) or ``"ncdhw"`` (groupnorm's, below).

* ``-X/--input NxCxHxW`` (tensor: required)
* ``-F/--forw`` mask bit set: 1 forward, 2 input, 4 weight, 8 bias grad (default 1)
* ``-m/--mode``: 0 = MIOPEN_ELEMENTWISE_AFFINE, no weight and no bias tensors;
  1 = MIOPEN_WEIGHT_BIAS, weight and bias (the op's ``default_bias``: a weight
  only for rmsnorm) (default 0)
* ``-e/--eps`` (default 1e-5)
* ``-o/--normalized_dim``: normalized_shape = input_shape[o:] (default: last dim)
* ignored, each taking a value: ``-t/--time``, ``-i/--iter``, ``-V/--verify``,
  ``-w/--wall``.

iree-turbine's driver (``iree-boo-driver``, ``op_exports/layer_norm.py``) adds
two flags, taken by every command here:

* ``--use-aten [V]``: restricts the command's kernel to one implementation
  (a manifest entry's ``impls``): ``aten`` with no value or a true one (``1``,
  ``true``, ``yes``, ``on``), ``manual`` with a false one (``0``, ``false``,
  ``no``, ``off``, or empty: ``--use-aten=``). iree-turbine parses it with
  argparse's ``type=bool``, which reads every non-empty value, ``0`` included,
  as true, and it requires a value; this reads the value as the flag means it.
* ``--input-permutation P0 P1 ...`` (space-separated, argparse's ``nargs="*"``;
  with ``=`` one value only): the input's memory layout. Kernels here take
  contiguous inputs (the loader copies any other layout), so only the identity
  (or no value, iree-turbine's default) is accepted; any other permutation is
  refused, naming the flag.

``ncdhw`` (MIOpen's ``driver/groupnorm_driver.hpp``): ``-n/--batchsize``
(default 100), ``-c/--in_channels`` (6), ``-D/--in_d`` (0), ``-H/--in_h`` (32),
``-W/--in_w`` (32), ``-g/--num_groups`` (3); the input is ``[n, c, D, H, W]``
when D, H and W are all non-zero, else ``[n, c, H, W]`` when H and W are, else
``[n, c, W]`` (MIOpen's order of tests); ``-e``, ``-m``, ``-F`` and the ignored
flags as above (MIOpen's groupnorm driver runs only the forward: ``-F`` is
this project's bit set, as for layernorm).

Both ``--flag value`` and ``--flag=value`` work.  (iree-turbine 3.9.0's
driver inverts ``-m`` and always adds a bias; this follows MIOpen.)

Command files: ``.txt`` lines are split as a shell would (``shlex``, ``#``
starts a comment); ``.tsv`` lines as iree-turbine's driver splits them: the line
stripped of surrounding whitespace, then split at every tab, each field one
argument as written (no quoting; an empty field is an empty argument), blank
lines and lines starting with ``#`` skipped, no header (``split_line``).
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

from .. import ops
from ..errors import SignatureError
from ..ops.base import BIAS_GRAD, DEFAULT_EPS, WEIGHT_GRAD
from ..shapes import DEFAULT_MAX_ELEMENTS, dims_from_text, limit_problem
from ..signature import KernelSignature

# flag spelling -> canonical name; every flag takes one value, except those below
FLAGS = {
    "-X": "input", "--input": "input",
    "-F": "forw", "--forw": "forw",
    "-m": "mode", "--mode": "mode",
    "-e": "eps", "--eps": "eps",
    "-o": "normalized_dim", "--normalized_dim": "normalized_dim",
    # timing / verification: accepted and ignored
    "-t": "time", "--time": "time",
    "-i": "iter", "--iter": "iter",
    "-V": "verify", "--verify": "verify",
    "-w": "wall", "--wall": "wall",
    # iree-turbine's driver's own: no value or one, and any number of values
    "--use-aten": "use_aten",
    "--input-permutation": "input_permutation",
}
_IGNORED = {"time", "iter", "verify", "wall"}
_OPTIONAL_VALUE = {"use_aten"}
_LIST_VALUE = {"input_permutation"}

# --use-aten's values, lower case (iree-turbine's type=bool reads all but "" as true)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")

# groupnorm's flags (``ncdhw``): the input's dims and groups instead of -X and -o
NCDHW_FLAGS = {
    "-n": "batchsize", "--batchsize": "batchsize",
    "-c": "in_channels", "--in_channels": "in_channels",
    "-D": "in_d", "--in_d": "in_d",
    "-H": "in_h", "--in_h": "in_h",
    "-W": "in_w", "--in_w": "in_w",
    "-g": "num_groups", "--num_groups": "num_groups",
    **{k: v for k, v in FLAGS.items() if v not in ("input", "normalized_dim")},
}
NCDHW_DEFAULTS = {"batchsize": 100, "in_channels": 6, "in_d": 0, "in_h": 32, "in_w": 32, "num_groups": 3}


def _flag_list(table: dict[str, str]) -> str:
    """``-X/--input, -F/--forw, ...``: each name's spellings, in the table's order."""
    spellings: dict[str, list[str]] = {}
    for flag, name in table.items():
        spellings.setdefault(name, []).append(flag)
    return ", ".join("/".join(flags) for flags in spellings.values())


_FLAG_LIST = _flag_list(FLAGS)
_NCDHW_FLAG_LIST = _flag_list(NCDHW_FLAGS)


def commands() -> dict[str, tuple[str, str]]:
    """command -> (op, dtype), from every registered op (its fused residual form's too)."""
    return {cmd: (op, dtype) for op in ops.names()
            for cmd, dtype in (*ops.get(op).commands, *ops.get(op).residual_commands)}


def residual_command(cmd: str) -> bool:
    """Whether ``cmd`` is a fused residual form's command (``addlayernorm``)."""
    return any(cmd in dict(ops.get(op).residual_commands) for op in ops.names())


def _parse_int(text: str, what: str) -> int:
    try:
        return int(text, 10)
    except ValueError:
        raise SignatureError(f"{what} must be an integer, got {text!r}") from None


def _ncdhw_shape(values: dict[str, tuple[str, str]]) -> tuple[tuple[int, ...], int]:
    """(input shape, groups) of a groupnorm command, as MIOpen's driver reads them."""
    v = {name: _parse_int(values[name][1], f"{values[name][0]}") if name in values else default
         for name, default in NCDHW_DEFAULTS.items()}
    n, c, d, h, w = (v[k] for k in ("batchsize", "in_channels", "in_d", "in_h", "in_w"))
    if n and c and d and h and w:
        shape: tuple[int, ...] = (n, c, d, h, w)
    elif n and c and h and w:
        shape = (n, c, h, w)
    elif n and c and w:
        shape = (n, c, w)
    else:
        raise SignatureError(f"bad input lengths n={n} c={c} D={d} H={h} W={w}: n, c and W must be non-zero "
                             "(MIOpen: [n, c, D, H, W] if D and H are non-zero, [n, c, H, W] if H is, else [n, c, W])")
    if any(x < 0 for x in shape):
        raise SignatureError(f"input lengths must be positive, got {list(shape)}")
    return shape, v["num_groups"]


Values = dict[str, tuple[str, str]]  # canonical flag name -> (spelling, value)
Lists = dict[str, tuple[str, list[str]]]  # a list flag's canonical name -> (spelling, values)

# what argparse takes for a value, not a flag, though it starts with "-" (its _negative_number_matcher)
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _flag_values(cmd: str, args: list[str], flags: dict[str, str] = FLAGS,
                 flag_list: str = _FLAG_LIST) -> tuple[Values, Lists]:
    """The flags' values: one-value and optional-value flags, and list flags."""
    values: Values = {}
    lists: Lists = {}
    i = 0
    while i < len(args):
        tok = args[i]
        flag, eq, value = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        if flag not in flags:
            if tok.startswith("-"):
                raise SignatureError(f"unknown flag {flag!r} for {cmd}: use {flag_list}")
            raise SignatureError(f"unexpected argument {tok!r}: every value follows a flag")
        name = flags[flag]
        i += 1
        items = [value] if eq else []
        if name in _LIST_VALUE:
            # argparse's nargs="*": the arguments up to the next flag; after "=", that value only
            while not eq and i < len(args) and (not args[i].startswith("-") or _NEGATIVE_NUMBER.match(args[i])):
                items.append(args[i])
                i += 1
        elif not eq:
            if name not in _OPTIONAL_VALUE:
                if i >= len(args):
                    raise SignatureError(f"flag {flag} needs a value")
                items.append(args[i])
                i += 1
            elif i < len(args) and not args[i].startswith("-"):
                items.append(args[i])
                i += 1
            else:
                items.append("true")  # a bare --use-aten
        if name in _IGNORED:
            continue
        before = values.get(name) or lists.get(name)
        if before:
            raise SignatureError(f"flag {flag} given twice (as {before[0]} before)")
        if name in _LIST_VALUE:
            lists[name] = (flag, items)
        else:
            values[name] = (flag, items[0])
    return values, lists


def _impls(values: Values, spec) -> tuple[str, ...] | None:
    """The implementations ``--use-aten`` restricts a command to (None without the flag)."""
    if "use_aten" not in values:
        return None
    flag, value = values["use_aten"]
    word = value.strip().lower()
    if word not in _TRUE + _FALSE:
        raise SignatureError(
            f"{flag} {value!r} is neither true nor false: give no value or one of {', '.join(_TRUE)} "
            f"(the aten implementation), or one of {', '.join(v for v in _FALSE if v)} (the manual one)"
        )
    impl = "aten" if word in _TRUE else "manual"
    if impl not in spec.impls:
        raise SignatureError(f"{flag} {value} asks for the {impl} implementation, which {spec.name} does not have "
                             f"(it has {', '.join(spec.impls)})")
    return (impl,)


def _permutation_problem(lists: Lists, shape: tuple[int, ...]) -> str | None:
    """Why ``--input-permutation`` cannot be built (None: absent, empty or the identity)."""
    if "input_permutation" not in lists:
        return None
    flag, items = lists["input_permutation"]
    if not items:  # iree-turbine's default: the identity
        return None
    written = " ".join(items)
    try:
        perm = [int(x, 10) for x in items]
    except ValueError:
        return f"{flag} takes integers, space-separated (e.g. {flag} 0 2 1), got {written!r}"
    identity = list(range(len(shape)))
    if sorted(perm) != identity:
        return (f"{flag} {written} is not a permutation of 0..{len(shape) - 1} for the "
                f"{len(shape)}-d input {'x'.join(map(str, shape))}")
    if perm != identity:
        return (f"{flag} {written} is not supported: boo-build builds kernels for contiguous inputs only "
                "(the loader copies an input of any other layout to a contiguous one); drop the flag, "
                f"or give the identity {' '.join(map(str, identity))}")
    return None


@dataclass(frozen=True)
class Command:
    """A driver command: its kernel signature, and the implementations
    ``--use-aten`` restricts it to (None: the op's own)."""

    signature: KernelSignature
    impls: tuple[str, ...] | None = None


def split_line(text: str, tsv: bool = False) -> list[str]:
    """A command file's line -> its arguments ([] for a blank or comment line):
    as a shell splits it (``#`` starts a comment), or for a ``.tsv`` file as
    iree-turbine's driver does (the stripped line split at every tab)."""
    if tsv:
        line = text.strip()
        # iree-turbine skips lines starting with "#"; an indented one is a comment here too
        if not line or line.startswith("#"):
            return []
        return line.split("\t")
    try:
        return shlex.split(text, comments=True)
    except ValueError as e:
        raise SignatureError(f"cannot split command: {e}") from None


def parse_line(text: str, max_elements: int | None = DEFAULT_MAX_ELEMENTS, tsv: bool = False) -> Command | None:
    """One driver command (a ``.tsv`` file's line with ``tsv``) -> a ``Command``,
    or None for a blank / comment-only line.  Raises ``SignatureError`` (any
    problem, message without location)."""
    tokens = split_line(text, tsv)
    if not tokens:
        return None
    try:
        return parse_args(tokens, max_elements)
    except SignatureError as e:
        spaced = [t for t in tokens if " " in t.strip()]
        if tsv and spaced:  # a space-separated line in a .tsv file: one argument
            raise SignatureError(f"{e} (a .tsv file separates arguments with tabs, and {spaced[0]!r} holds "
                                 "spaces: separate them with tabs, or use a .txt file)") from None
        raise


def parse_command(text: str, max_elements: int | None = DEFAULT_MAX_ELEMENTS) -> KernelSignature | None:
    """One driver command -> its signature, or None for a blank / comment-only
    line (``parse_line`` also gives ``--use-aten``'s implementation).  Raises
    ``SignatureError``.  The input shape is bounded as a manifest's
    (``max_elements`` None: no element bound)."""
    cmd = parse_line(text, max_elements)
    return None if cmd is None else cmd.signature


def parse_args(tokens: list[str], max_elements: int | None = DEFAULT_MAX_ELEMENTS) -> Command:
    """A command's arguments (the command first) -> a ``Command``."""
    if os.path.basename(tokens[0]) == "MIOpenDriver":  # pasted driver invocations
        tokens = tokens[1:]
        if not tokens:
            raise SignatureError("MIOpenDriver without a command")
    cmd, args = tokens[0], tokens[1:]
    known = commands()
    if cmd not in known:
        raise SignatureError(f"unknown command {cmd!r}: use one of {', '.join(known)}")
    op, dtype = known[cmd]
    spec = ops.get(op)
    ncdhw = spec.command_shape == "ncdhw"
    values, lists = _flag_values(cmd, args, *((NCDHW_FLAGS, _NCDHW_FLAG_LIST) if ncdhw else (FLAGS, _FLAG_LIST)))
    if ncdhw:
        shape, groups = _ncdhw_shape(values)
        problem = limit_problem("input", shape, max_elements)
        if problem:
            raise SignatureError(problem)
        normalized: tuple[int, ...] = ()
    else:
        if "input" not in values:
            raise SignatureError(f"{cmd} needs -X/--input, e.g. -X 10x32x42x32")
        text_shape = values["input"][1]
        shape = dims_from_text("-X/--input", text_shape, example="10x32x42x32")
        problem = limit_problem("-X/--input", shape, max_elements)
        if problem:
            raise SignatureError(problem)
        ndim = len(shape)
        norm_dim = _parse_int(values["normalized_dim"][1], "-o/--normalized_dim") \
            if "normalized_dim" in values else ndim - 1
        if not 0 <= norm_dim < ndim:
            raise SignatureError(
                f"-o/--normalized_dim {norm_dim} is out of range for the {ndim}-d input "
                f"{text_shape}: use 0..{ndim - 1}"
            )
        normalized, groups = shape[norm_dim:], None
    problem = _permutation_problem(lists, shape)
    if problem:
        raise SignatureError(problem)
    impls = _impls(values, spec)
    return Command(_signature(cmd, spec, values, shape, normalized, groups), impls)


def _signature(cmd: str, spec, values: dict[str, tuple[str, str]], shape: tuple[int, ...],
               normalized_shape: tuple[int, ...], groups: int | None) -> KernelSignature:
    """The signature of a command's flags -F, -m, -e and its shape parameters."""
    mask = _parse_int(values["forw"][1], "-F/--forw") if "forw" in values else 1
    mode = _parse_int(values["mode"][1], "-m/--mode") if "mode" in values else 0
    if mode not in (0, 1):
        raise SignatureError(
            f"-m/--mode {mode} is invalid: 0 (MIOPEN_ELEMENTWISE_AFFINE, no weight or bias) "
            "or 1 (MIOPEN_WEIGHT_BIAS)"
        )
    affine = mode == 1
    bias = spec.default_bias(affine)
    eps = DEFAULT_EPS
    if "eps" in values:
        try:
            eps = float(values["eps"][1])
        except ValueError:
            raise SignatureError(f"-e/--eps must be a number, got {values['eps'][1]!r}") from None
    try:
        return KernelSignature(
            op=spec.name, input_shape=shape, normalized_shape=normalized_shape, groups=groups,
            dtype=commands()[cmd][1], mask=mask, eps=eps, affine=affine, bias=bias,
            residual=residual_command(cmd),
        )
    except SignatureError as e:
        hint = ""
        if not affine and mask & (WEIGHT_GRAD | BIAS_GRAD):
            hint = " (-m 0 has no weight or bias; use -m 1 for their gradients)"
        elif not spec.has_bias and mask & BIAS_GRAD:
            hint = f" ({cmd} -m 1 has a weight but no bias)"
        raise SignatureError(f"{e}{hint}") from None
