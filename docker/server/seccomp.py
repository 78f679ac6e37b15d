"""Write (or check) docker/server/seccomp.json: the reward server container's seccomp profile.

The server runs model-written code with the ``local`` backend (bubblewrap) inside its container, and
bubblewrap needs the namespace and mount syscalls (``unshare``, ``clone`` with namespace flags, ``mount``,
``pivot_root``, ``sethostname``) that Docker's default profile refuses to a container without
``CAP_SYS_ADMIN``. Instead of ``seccomp=unconfined`` the container gets this profile:

* **default deny**: a syscall that is not listed fails with ``ENOSYS`` (so libc falls back, as it does on an
  older kernel). A syscall newer than the list is refused until someone adds it on purpose.
* **allow** every syscall of the x86-64 table in ``linux/unistd_64.h`` except the denied ones below.
* **deny** (``EPERM``) what neither the server nor a sandboxed program needs and what widens the kernel's
  attack surface: each name has its reason in ``DENIED``.

Sandboxed jobs inherit the filter, so they get it on top of bubblewrap's namespaces; inside the sandbox
they have no capabilities and cannot make user namespaces (``--disable-userns``), so the allowed namespace
syscalls give them nothing.

Usage: ``python docker/server/seccomp.py [--header PATH] [--check]``; ``--check`` exits 1 when the
committed file differs from what this script makes (the test suite runs it).
"""

from __future__ import annotations

import argparse
import errno
import json
import re
import sys
from pathlib import Path

HEADER = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
PROFILE = Path(__file__).with_name("seccomp.json")

#: Denied syscalls and why. Anything here returns EPERM; the server and every sandboxed job run without them.
DENIED: dict[str, str] = {
    # Change the whole machine: only a host administrator does these.
    "reboot": "machine state",
    "kexec_load": "machine state",
    "kexec_file_load": "machine state",
    "init_module": "kernel modules",
    "finit_module": "kernel modules",
    "delete_module": "kernel modules",
    "create_module": "kernel modules",
    "get_kernel_syms": "kernel modules",
    "query_module": "kernel modules",
    "swapon": "machine state",
    "swapoff": "machine state",
    "acct": "machine state",
    "settimeofday": "clock",
    "clock_settime": "clock",
    "clock_adjtime": "clock",
    "adjtimex": "clock",
    "iopl": "raw I/O ports",
    "ioperm": "raw I/O ports",
    "vhangup": "terminals of others",
    "quotactl": "file system quotas",
    "quotactl_fd": "file system quotas",
    "nfsservctl": "kernel NFS server",
    "syslog": "kernel log (addresses)",
    "lookup_dcookie": "kernel profiling",
    "uselib": "obsolete loader",
    "_sysctl": "obsolete",
    "sysfs": "obsolete",
    "ustat": "obsolete",
    "personality": "turns off address randomisation",
    "modify_ldt": "segment tables, a history of kernel bugs",
    # Reach into other processes or the kernel's internals.
    "ptrace": "other processes' memory",
    "process_vm_readv": "other processes' memory",
    "process_vm_writev": "other processes' memory",
    "kcmp": "other processes' kernel state",
    "pidfd_getfd": "other processes' files",
    "perf_event_open": "kernel profiling, a history of kernel bugs",
    "bpf": "kernel programs",
    "userfaultfd": "page-fault handling, a common exploit aid",
    "io_uring_setup": "a large kernel surface, a history of kernel bugs",
    "io_uring_enter": "a large kernel surface, a history of kernel bugs",
    "io_uring_register": "a large kernel surface, a history of kernel bugs",
    "add_key": "kernel keyrings are not namespaced",
    "request_key": "kernel keyrings are not namespaced",
    "keyctl": "kernel keyrings are not namespaced",
    "open_by_handle_at": "opens files outside the mount namespace by handle",
    "setns": "joining other namespaces (bubblewrap only makes new ones)",
    "fanotify_init": "watches the whole file system",
    "mbind": "NUMA policy of the machine",
    "migrate_pages": "NUMA policy of the machine",
    "move_pages": "NUMA policy of the machine",
    "set_mempolicy": "NUMA policy of the machine",
    "set_mempolicy_home_node": "NUMA policy of the machine",
    # The new mount API: bubblewrap uses mount(2); these only add surface.
    "fsopen": "new mount API",
    "fsconfig": "new mount API",
    "fsmount": "new mount API",
    "fspick": "new mount API",
    "move_mount": "new mount API",
    "open_tree": "new mount API",
    "mount_setattr": "new mount API",
}

#: What bubblewrap needs and Docker's default profile refuses; the tests check these stay allowed.
NEEDED_BY_BWRAP = ("unshare", "clone", "clone3", "mount", "umount2", "pivot_root", "chroot", "sethostname")

_DEFINE = re.compile(r"^#define __NR_(\w+)\s+\d+\s*$")


def syscall_names(header: Path) -> list[str]:
    """Every syscall name of a kernel ``unistd_64.h``, sorted.

    Raises:
        FileNotFoundError: the header is missing (``apt-get install linux-libc-dev``).
        ValueError: the file defines no syscall.
    """
    names = sorted({m.group(1) for line in header.read_text().splitlines() if (m := _DEFINE.match(line))})
    if not names:
        raise ValueError(f"{header} defines no __NR_ syscall numbers")
    return names


def make_profile(names: list[str]) -> dict[str, object]:
    """The profile (Docker's seccomp JSON) that allows ``names`` minus ``DENIED``."""
    missing = [n for n in NEEDED_BY_BWRAP if n not in names]
    if missing:
        raise ValueError(f"the syscall table lacks {missing}, which bubblewrap needs")
    return {
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": errno.ENOSYS,
        # Native 64-bit calls only: no 32-bit (int 0x80) or x32 entry points.
        "archMap": [
            {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []},
            {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []},
        ],
        "syscalls": [
            {
                "comment": "generated by docker/server/seccomp.py: the kernel's syscall table minus the denied set",
                "names": [n for n in names if n not in DENIED],
                "action": "SCMP_ACT_ALLOW",
            },
            {
                "comment": "denied on purpose; reasons in docker/server/seccomp.py",
                "names": sorted(DENIED),
                "action": "SCMP_ACT_ERRNO",
                "errnoRet": errno.EPERM,
            },
        ],
    }


def render(profile: dict[str, object]) -> str:
    return json.dumps(profile, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--header", type=Path, default=HEADER, help="the kernel's unistd_64.h")
    parser.add_argument("--output", type=Path, default=PROFILE, help="where the profile goes")
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs instead of writing it")
    args = parser.parse_args(argv)
    text = render(make_profile(syscall_names(args.header)))
    if args.check:
        if not args.output.exists() or args.output.read_text() != text:
            print(f"{args.output} is stale: run python docker/server/seccomp.py", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
