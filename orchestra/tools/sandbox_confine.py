"""Linux confinement for the code sandbox (ctypes, stdlib only): namespaces, mounts, Landlock, seccomp.

This module is loaded by the sandbox worker process before it drops privileges, so it must not import
anything outside the standard library.
"""

from __future__ import annotations

import ctypes
import os
import stat
import struct

# --- namespaces and mounts -------------------------------------------------------------------------
CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWTIME = 0x00000080
NAMESPACE_FLAGS = (
    CLONE_NEWNS
    | CLONE_NEWUTS
    | CLONE_NEWIPC
    | CLONE_NEWUSER
    | CLONE_NEWPID
    | CLONE_NEWNET
    | CLONE_NEWCGROUP
    | CLONE_NEWTIME
)

MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x2, 0x4, 0x8
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000

PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, PR_SET_CHILD_SUBREAPER = 1, 38, 22, 36
SECCOMP_MODE_FILTER = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
_ULONG = ctypes.c_ulong


def _check(result: int, what: str) -> int:
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return result


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), f"unshare({flags:#x})")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), _ULONG(flags), enc(data)), f"mount {target}")


def prctl(option: int, arg: int = 0) -> None:
    _check(
        _libc.prctl(ctypes.c_int(option), _ULONG(arg), _ULONG(0), _ULONG(0), _ULONG(0)), f"prctl({option})"
    )


def map_current_user(uid: int, gid: int) -> None:
    """Inside a fresh user namespace: map our own uid/gid to themselves (the only mapping allowed)."""
    with open("/proc/self/setgroups", "w") as fh:
        fh.write("deny")
    with open("/proc/self/uid_map", "w") as fh:
        fh.write(f"{uid} {uid} 1")
    with open("/proc/self/gid_map", "w") as fh:
        fh.write(f"{gid} {gid} 1")


def _can_traverse(st: os.stat_result, uid: int, gid: int) -> bool:
    if uid == 0:
        return True
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == gid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def blocked_ancestor(path: str, uid: int, gid: int) -> str | None:
    """The outermost folder above ``path`` that ``uid`` cannot enter (e.g. a 0700 /root), or None."""
    parts = [p for p in path.split("/") if p]
    for i in range(1, len(parts)):
        folder = "/" + "/".join(parts[:i])
        if not _can_traverse(os.stat(folder), uid, gid):
            return folder
    return None


def expose_paths(paths: list[str], uid: int, gid: int) -> list[str]:
    """Make ``paths`` reachable for ``uid`` inside the current (private) mount namespace.

    Every folder above a path that ``uid`` cannot enter is covered by a small read-only-by-mode tmpfs
    (mode 0755) holding only the bind-mounted ``paths``; the rest of that folder's content stays hidden.
    Returns the covered folders. Needs CAP_SYS_ADMIN in the mount namespace's owner.
    """
    paths = sorted({os.path.realpath(p) for p in paths if os.path.exists(p)})
    paths = [p for p in paths if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in paths)]
    blocked: dict[str, list[str]] = {}
    for p in paths:
        top = blocked_ancestor(p, uid, gid)
        if top is not None:
            blocked.setdefault(top, []).append(p)
    tops = sorted(blocked)
    tops = [t for t in tops if not any(t != u and t.startswith(u + "/") for u in tops)]
    for top in tops:
        inner = [p for t, ps in blocked.items() if t == top or t.startswith(top + "/") for p in ps]
        fds = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in inner]
        try:
            mount("tmpfs", top, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=256k")
            for p, fd in fds:
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    os.makedirs(p, mode=0o755, exist_ok=True)
                else:
                    os.makedirs(os.path.dirname(p), mode=0o755, exist_ok=True)
                    open(p, "a").close()
                mount(f"/proc/self/fd/{fd}", p, None, MS_BIND | MS_REC)
        finally:
            for _, fd in fds:
                os.close(fd)
    return tops


def make_mounts_private() -> None:
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def mount_tmpfs(target: str, size_mb: int, uid: int, gid: int) -> None:
    mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, f"mode=0700,size={size_mb}m,uid={uid},gid={gid}")


def drop_capabilities() -> None:
    """Clear the effective, permitted and inheritable capability sets (capset, version 3)."""
    header = struct.pack("Ii", 0x20080522, 0)
    data = bytes(24)
    hbuf, dbuf = ctypes.create_string_buffer(header), ctypes.create_string_buffer(data)
    _check(_libc.capset(hbuf, dbuf), "capset")


# --- Landlock --------------------------------------------------------------------------------------
_SYS_LANDLOCK_CREATE, _SYS_LANDLOCK_ADD, _SYS_LANDLOCK_RESTRICT = 444, 445, 446
FS_EXECUTE, FS_WRITE_FILE, FS_READ_FILE, FS_READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FS_FILE_ONLY = FS_EXECUTE | FS_WRITE_FILE | FS_READ_FILE | (1 << 14) | (1 << 15)  # + truncate, ioctl_dev
NET_BIND_TCP, NET_CONNECT_TCP = 1, 2
SCOPE_ABSTRACT_UNIX, SCOPE_SIGNAL = 1, 2


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 when Landlock is absent or disabled."""
    result = _libc.syscall(_SYS_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(result) if result > 0 else 0


def _fs_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # execute .. make_sym (ABI 1)
    if abi >= 2:
        rights |= 1 << 13  # refer
    if abi >= 3:
        rights |= 1 << 14  # truncate
    if abi >= 5:
        rights |= 1 << 15  # ioctl_dev
    return rights


def apply_landlock(read: list[str], write: list[str], abi: int) -> None:
    """Restrict this process (and its future children) to reading ``read`` and writing ``write``.

    Every filesystem right the ABI knows is handled: anything not granted below is denied. From ABI 4
    TCP bind/connect are denied, from ABI 6 abstract unix sockets and signals outside the sandbox too.
    Requires no_new_privs (or CAP_SYS_ADMIN).
    """
    handled = _fs_rights(abi)
    attr = struct.pack("Q", handled)
    if abi >= 4:
        attr += struct.pack("Q", NET_BIND_TCP | NET_CONNECT_TCP)
    if abi >= 6:
        attr += struct.pack("Q", SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL)
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _check(
        _libc.syscall(_SYS_LANDLOCK_CREATE, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)),
        "landlock_create_ruleset",
    )
    try:
        read_rights = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
        for paths, rights in ((read, read_rights), (write, handled)):
            for path in paths:
                if not os.path.exists(path):
                    continue
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                try:
                    allowed = (
                        rights if stat.S_ISDIR(os.fstat(fd).st_mode) else rights & FS_FILE_ONLY & handled
                    )
                    rule = ctypes.create_string_buffer(struct.pack("=Qi", allowed, fd), 12)
                    _check(
                        _libc.syscall(
                            _SYS_LANDLOCK_ADD,
                            ctypes.c_int(ruleset),
                            ctypes.c_int(1),
                            rule,
                            ctypes.c_uint32(0),
                        ),
                        f"landlock_add_rule {path}",
                    )
                finally:
                    os.close(fd)
        _check(
            _libc.syscall(_SYS_LANDLOCK_RESTRICT, ctypes.c_int(ruleset), ctypes.c_uint32(0)),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


# --- seccomp ---------------------------------------------------------------------------------------
_ARCHES = {
    # machine: (AUDIT_ARCH, {name: syscall number}); x86_64 also refuses the x32 ABI (nr >= 0x40000000).
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "bpf": 321,
            "perf_event_open": 298,
            "keyctl": 250,
            "add_key": 248,
            "request_key": 249,
            "userfaultfd": 323,
            "unshare": 272,
            "setns": 308,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "open_by_handle_at": 304,
            "clone": 56,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "bpf": 280,
            "perf_event_open": 241,
            "keyctl": 219,
            "add_key": 217,
            "request_key": 218,
            "userfaultfd": 282,
            "unshare": 97,
            "setns": 268,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "open_by_handle_at": 265,
            "clone": 220,
        },
    ),
}
# Same number on every architecture (the unified syscall table).
_COMMON_DENY = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}
_CLONE3 = 435
_RET_ALLOW, _RET_ERRNO = 0x7FFF0000, 0x00050000
_EPERM, _ENOSYS = 1, 38


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def seccomp_program(machine: str | None = None) -> bytes:
    """A classic-BPF seccomp filter: socket() (all families), io_uring, ptrace, namespace and mount
    syscalls, kernel keyring/bpf/module loading get EPERM; clone3 gets ENOSYS (libc falls back to clone,
    which is then checked for namespace flags); any foreign architecture or the x32 ABI gets EPERM."""
    machine = machine or os.uname().machine
    if machine not in _ARCHES:
        raise OSError(f"seccomp filter: unsupported architecture {machine!r}")
    arch, table = _ARCHES[machine]
    deny = sorted({n for name, n in table.items() if name != "clone"} | set(_COMMON_DENY.values()))
    ld_w_abs, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    eperm, allow = _RET_ERRNO | _EPERM, _RET_ALLOW
    prog = [
        _insn(ld_w_abs, 0, 0, 4),
        _insn(jeq, 1, 0, arch),
        _insn(ret, 0, 0, eperm),
        _insn(ld_w_abs, 0, 0, 0),
    ]
    if machine == "x86_64":
        prog += [_insn(jge, 0, 1, 0x40000000), _insn(ret, 0, 0, eperm)]
    for n in deny:
        prog += [_insn(jeq, 0, 1, n), _insn(ret, 0, 0, eperm)]
    prog += [
        _insn(jeq, 0, 1, _CLONE3),
        _insn(ret, 0, 0, _RET_ERRNO | _ENOSYS),
        _insn(jeq, 0, 3, table["clone"]),
        _insn(ld_w_abs, 0, 0, 16),
        _insn(jset, 0, 1, NAMESPACE_FLAGS),
        _insn(ret, 0, 0, eperm),
        _insn(ret, 0, 0, allow),
    ]
    return b"".join(prog)


def apply_seccomp() -> None:
    """Install :func:`seccomp_program` on this process (needs no_new_privs first)."""
    code = seccomp_program()
    filt = ctypes.create_string_buffer(code, len(code))
    fprog = struct.pack("HxxxxxxP", len(code) // 8, ctypes.addressof(filt))
    buf = ctypes.create_string_buffer(fprog, len(fprog))
    args = (_ULONG(SECCOMP_MODE_FILTER), _ULONG(ctypes.addressof(buf)), _ULONG(0), _ULONG(0))
    _check(_libc.prctl(ctypes.c_int(PR_SET_SECCOMP), *args), "seccomp")
