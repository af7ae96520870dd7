"""The seccomp filter that keeps a sandbox from making user namespaces.

Every sandbox runs as one host uid, and the kernel counts user namespaces per uid:
a pull request that made them until ``ENOSPC`` left no quota for the next sandbox
(`docs/security.md`). Where bubblewrap makes the sandbox's user namespace itself it
closes that door (``--disable-userns``); where it does not (the ``rootmap`` route,
the ranks that join a claim's namespaces) this filter does: ``clone`` and
``unshare`` with ``CLONE_NEWUSER`` fail with ``EPERM``, ``clone3`` (whose flags lie
behind a pointer a filter cannot read) with ``ENOSYS``, which makes the C library
fall back to ``clone``; everything else is allowed. The launcher hands it to
bubblewrap (``--seccomp FD``), which loads it just before the sandbox's command.

Hand-assembled classic BPF, as flatpak's and bubblewrap's own callers build it:
the launcher runs as a file importing nothing but the standard library
(``python -I -S``), so a binding to libseccomp could not be loaded there, and the
program is a few instructions that a test reads back.

Standard library only.
"""

from __future__ import annotations

import errno
import platform
import struct
import sys
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["CLONE_NEWUSER", "program"]

CLONE_NEWUSER = 0x10000000

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_KILL_PROCESS = 0x80000000

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6].
_NR, _ARCH, _ARG0 = 0, 4, 16
_X32_BIT = 0x40000000
"""x86-64's x32 system calls: the same arch, this bit in the number (none is allowed:
no program of a training run is built for x32)."""


@dataclass(frozen=True, slots=True)
class _Abi:
    arch: int
    """``AUDIT_ARCH_*``"""
    clone: int
    unshare: int
    clone3: int = 435
    x32: bool = False


# The ABIs a process of each machine can call the kernel through (a 64-bit process
# may also use the 32-bit entry): the numbers are the kernel's, per ABI.
_ABIS: dict[str, tuple[_Abi, ...]] = {
    "x86_64": (_Abi(0xC000003E, 56, 272, x32=True), _Abi(0x40000003, 120, 310)),
    "aarch64": (_Abi(0xC00000B7, 220, 97), _Abi(0x40000028, 120, 337)),
}


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def _assemble(lines: Sequence[tuple[object, ...]]) -> bytes:
    """Instructions with forward jumps to labels (``("label", name)``) resolved:
    ``("j", code, k, target)`` jumps to ``target`` when true, else falls through."""
    at: dict[object, int] = {}
    n = 0
    for line in lines:
        if line[0] == "label":
            at[line[1]] = n
        else:
            n += 1
    out, i = [], 0
    for line in lines:
        if line[0] == "label":
            continue
        if line[0] == "j":
            _, code, k, target = line
            out.append(_ins(int(str(code)), int(str(k)), at[target] - (i + 1), 0))
        else:
            _, code, k = line
            out.append(_ins(int(str(code)), int(str(k))))
        i += 1
    return b"".join(out)


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (this one's by default), as bubblewrap's
    ``--seccomp`` reads it (``struct sock_filter`` after another); None for a machine
    whose system call numbers this module does not know."""
    abis = _ABIS.get(machine or platform.machine())
    if abis is None:
        return None
    # The low 32 bits of the first argument (the flags of clone and unshare).
    flags_at = _ARG0 if sys.byteorder == "little" else _ARG0 + 4
    lines: list[tuple[object, ...]] = [("ld", _LD_W_ABS, _ARCH)]
    lines += [("j", _JEQ, abi.arch, f"abi{i}") for i, abi in enumerate(abis)]
    # An ABI this filter does not know: no process of the sandbox uses one.
    lines.append(("ret", _RET, _KILL_PROCESS))
    for i, abi in enumerate(abis):
        lines += [("label", f"abi{i}"), ("ld", _LD_W_ABS, _NR)]
        if abi.x32:
            lines.append(("j", _JGE, _X32_BIT, "deny"))
        lines += [
            ("j", _JEQ, abi.clone3, "enosys"),
            ("j", _JEQ, abi.unshare, "flags"),
            ("j", _JEQ, abi.clone, "flags"),
            ("ret", _RET, _ALLOW),
        ]
    lines += [
        ("label", "flags"),
        ("ld", _LD_W_ABS, flags_at),
        ("j", _JSET, CLONE_NEWUSER, "deny"),
        ("ret", _RET, _ALLOW),
        ("label", "deny"),
        ("ret", _RET, _ERRNO | errno.EPERM),
        ("label", "enosys"),
        ("ret", _RET, _ERRNO | errno.ENOSYS),
    ]
    return _assemble(lines)
