"""Who ``serve`` runs as: the image starts as root, and ``serve`` gives root up when it can.

Why the image starts as root. SageMaker extracts ``model.tar.gz`` into
/opt/ml/model as root and keeps the archive's modes; ``save_pretrained``
writes ``model.safetensors`` 0600 (and PEFT writes adapters so), so those files
belong to root and nobody else may read them. An image that starts as an
unprivileged user can then never serve that model, and the operator who packed
it did not choose that. Starting as root, ``serve`` looks before it starts
any child process:

- every file it must serve (the model, its adapters folder, or in multi-model
  mode the models root) is readable by ``llmbyoc`` (uid 10001, the image's
  user): ``serve`` becomes that user (no supplementary groups, its gid, its
  HOME), and the engine, its model worker and gunicorn run unprivileged exactly
  as if the image said ``USER 10001``;
- one is not: ``serve`` stays root and logs one line naming the file, its mode
  and owner, and how to pack the files so that it is not needed. It serves
  rather than fails: the files are the operator's own, and root is what lets
  the endpoint come up at all.

Not started as root (``docker run --user``, Kubernetes ``runAsUser``, a local
run, the tests): nothing here happens; the process serves as whoever it is, and
a file it cannot read fails the load with its name and the fix
(``models/loader.check_readable``).

Readable is decided from the mode bits, as the kernel decides for a process
with uid 10001, gid 10001 and no other groups: a file needs r, a folder r and
x, every folder above x. ACLs are not read: one that grants 10001 more than the
bits show only keeps root; one that takes away what the bits grant leaves
check_readable's error to name the file. Folders reached through a symlink are
not walked into. In multi-model mode the models root is checked as it is at
start-up; a model added later is read by whoever ``serve`` became.

The engine socket still guards against other users either way: ``serve``
decides before it makes the socket's private (0700) directory, so that
directory, the socket and its 0600 key belong to the user every child runs as
(``engine/engine_socket.py``).
"""

from __future__ import annotations

import ctypes
import logging
import os
import pwd
import stat
from collections.abc import Iterable
from dataclasses import dataclass

log = logging.getLogger("llm_byoc.serve")

SERVICE_UID = 10001  # the image's llmbyoc user (Dockerfile); the Kubernetes manifests' runAsUser
_PR_SET_DUMPABLE = 4
_READ, _READ_AND_SEARCH, _SEARCH = 4, 5, 1  # permission bits (r, r+x, x) of one class: owner, group or other
PACKING_HINT = ("make the files readable by all before packing them (chmod -R a+rX DIR, or tar --mode=a+rX; "
                "`python -m llm_byoc.deploy package` does it) and serve runs unprivileged")


@dataclass(frozen=True)
class Account:
    """The unprivileged user ``serve`` becomes."""

    name: str
    uid: int
    gid: int
    home: str

    @classmethod
    def lookup(cls, uid: int = SERVICE_UID) -> "Account | None":
        try:
            entry = pwd.getpwuid(uid)
        except KeyError:
            return None
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir)


@dataclass(frozen=True)
class Unreadable:
    """A path ``Account`` cannot read (or, for a folder, list or enter)."""

    path: str
    mode: int
    uid: int
    gid: int

    def __str__(self) -> str:
        return f"{self.path} ({stat.filemode(self.mode)}, owner {self.uid}:{self.gid})"


@dataclass(frozen=True)
class Decision:
    """``account``: the user to become (None: stay who we are); ``reason``: why root is kept ("" if not)."""

    account: Account | None
    reason: str = ""


def allows(info: os.stat_result, account: Account, bits: int) -> bool:
    """Whether the mode bits of ``info`` grant ``account`` every permission in ``bits`` (r=4, x=1)."""
    if info.st_uid == account.uid:
        granted = info.st_mode >> 6
    elif info.st_gid == account.gid:
        granted = info.st_mode >> 3
    else:
        granted = info.st_mode
    return granted & bits == bits


def first_unreadable(paths: Iterable[str], account: Account) -> Unreadable | None:
    """The first path under ``paths`` that ``account`` could not read; paths that do not exist are skipped."""
    for path in paths:
        path = os.path.abspath(path)
        try:
            os.stat(path)
        except OSError:
            continue
        found = _ancestor_blocking(path, account) or _first_in_tree(path, account)
        if found is not None:
            return found
    return None


def _ancestor_blocking(path: str, account: Account) -> Unreadable | None:
    """A folder above ``path`` that ``account`` may not enter."""
    folder = os.path.dirname(path)
    while True:
        found = _check(folder, account, _SEARCH)
        if found is not None or folder == os.path.dirname(folder):
            return found
        folder = os.path.dirname(folder)


def _first_in_tree(path: str, account: Account) -> Unreadable | None:
    if not os.path.isdir(path):
        return _check(path, account, _READ)
    for folder, _dirs, files in os.walk(path):
        found = _check(folder, account, _READ_AND_SEARCH)
        for name in files:
            found = found or _check(os.path.join(folder, name), account, _READ)
        if found is not None:
            return found
    return None


def _check(path: str, account: Account, bits: int) -> Unreadable | None:
    try:
        info = os.stat(path)  # a symlink counts as what it points to
    except OSError:
        return None  # a dangling link, or gone meanwhile: nothing to read
    if allows(info, account, bits):
        return None
    return Unreadable(path, info.st_mode, info.st_uid, info.st_gid)


def decide(paths: Iterable[str], euid: int, account: Account | None) -> Decision:
    """Whether a process with effective uid ``euid`` that must read ``paths`` should become ``account``."""
    if euid != 0:
        return Decision(None)  # not root: nothing to give up
    if account is None:
        return Decision(None, f"serving as root: there is no user with uid {SERVICE_UID} to serve as")
    blocked = first_unreadable(paths, account)
    if blocked is not None:
        return Decision(None, f"serving as root: {account.name} (uid {account.uid}) cannot read {blocked}; "
                              f"{PACKING_HINT}")
    return Decision(account)


def become(account: Account) -> None:
    """Give up root for good: no supplementary groups, then the group, then the user; HOME follows."""
    os.setgroups([])
    os.setgid(account.gid)
    os.setuid(account.uid)
    os.environ["HOME"] = account.home
    # setuid made this process non-dumpable, so its /proc files would stay root's. It read nothing
    # secret as root: make it what starting as the user gives (the user's own processes may inspect it).
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux


def give_up_root(paths: Iterable[str]) -> Decision:
    """``serve``'s one call, before it starts anything: decide, then become the user or say why not."""
    decision = decide(paths, os.geteuid(), Account.lookup())
    if decision.account is not None:
        try:
            become(decision.account)
        except OSError as exc:  # root without CAP_SETUID/CAP_SETGID (docker run --cap-drop)
            decision = Decision(None, f"serving as root: cannot become {decision.account.name}: {exc.strerror}")
        else:
            log.info("serving as %s (uid %d)", decision.account.name, decision.account.uid)
    if decision.reason:
        log.warning("%s", decision.reason)
    return decision
