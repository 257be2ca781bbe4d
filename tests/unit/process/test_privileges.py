"""process/privileges.py: whether serve gives root up, decided without root (the uid and the
account are injected; readability comes from real files' mode bits)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from fixtures import machine

from llm_byoc.process.privileges import SERVICE_UID, Account, allows, decide, first_unreadable


def stat_result(mode: int, uid: int, gid: int) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, gid, 0, 0, 0, 0))


@pytest.fixture
def me() -> Account:
    return Account("me", os.geteuid(), os.getegid(), "/home/me")


@pytest.fixture
def stranger() -> Account:
    """Owns nothing here and shares no group with the files (what llmbyoc is to root's files)."""
    return Account("llmbyoc", 54321, 54321, "/home/llmbyoc")


@pytest.fixture
def model():
    """A model folder whose files and folders are readable by all, in /tmp (pytest's own folders are 0700)."""
    base = Path(tempfile.mkdtemp())
    folder = base / "model"
    (folder / "adapters" / "a").mkdir(parents=True)
    for name in ("config.json", "model.safetensors", "adapters/a/adapter_model.safetensors"):
        (folder / name).write_text("{}")
    for path in [base, *base.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield folder
    shutil.rmtree(base)


def test_the_owner_group_or_other_bits_apply_to_the_matching_class(stranger):
    assert allows(stat_result(stat.S_IFREG | 0o400, stranger.uid, 0), stranger, 4)
    assert not allows(stat_result(stat.S_IFREG | 0o044, stranger.uid, stranger.gid), stranger, 4)  # owner bits win
    assert allows(stat_result(stat.S_IFREG | 0o040, 0, stranger.gid), stranger, 4)
    assert not allows(stat_result(stat.S_IFREG | 0o600, 0, 0), stranger, 4)  # root's 0600: what SageMaker gives
    assert allows(stat_result(stat.S_IFDIR | 0o755, 0, 0), stranger, 5)
    assert not allows(stat_result(stat.S_IFDIR | 0o744, 0, 0), stranger, 5)  # listable, not enterable


def test_a_readable_folder_drops_root(model, stranger):
    assert first_unreadable([str(model)], stranger) is None
    assert decide([str(model), str(model / "adapters")], 0, stranger).account == stranger


def test_a_0600_file_keeps_root_and_says_which_and_how(model, stranger):
    weights = model / "adapters" / "a" / "adapter_model.safetensors"
    weights.chmod(0o600)
    found = first_unreadable([str(model)], stranger)
    assert found.path == str(weights) and stat.S_IMODE(found.mode) == 0o600 and found.uid == os.geteuid()
    decision = decide([str(model)], 0, stranger)
    assert decision.account is None
    assert str(weights) in decision.reason and "-rw-------" in decision.reason
    assert "chmod -R a+rX" in decision.reason and "--mode=a+rX" in decision.reason
    assert decide([str(model)], 0, Account("me", os.geteuid(), 0, "/")).account is not None  # its owner may


def test_a_folder_it_cannot_enter_or_a_parent_it_cannot_cross_keeps_root(model, stranger):
    (model / "adapters").chmod(0o700)
    assert first_unreadable([str(model)], stranger).path == str(model / "adapters")
    (model / "adapters").chmod(0o755)
    model.parent.chmod(0o700)  # as pytest's own tmp folders are: the model is out of reach
    assert first_unreadable([str(model / "adapters")], stranger).path == str(model.parent)


def test_missing_paths_and_dangling_links_are_skipped(model, stranger):
    (model / "gone").symlink_to(model / "nowhere")
    assert first_unreadable([str(model / "no-such-dir"), str(model)], stranger) is None


def test_not_root_decides_nothing_and_no_user_keeps_root(model, stranger):
    (model / "model.safetensors").chmod(0o600)
    assert decide([str(model)], SERVICE_UID, stranger) == decide([str(model)], 1000, None)
    assert decide([str(model)], 1000, None).account is None and decide([str(model)], 1000, None).reason == ""
    kept = decide([str(model)], 0, None)
    assert kept.account is None and str(SERVICE_UID) in kept.reason


@pytest.mark.skipif(os.geteuid() != 0, reason=machine.lacks("root, which becoming another user needs"))
def test_become_gives_root_up_for_good(tmp_path):
    """In a fresh process: groups, gid, uid and HOME are the account's, and root does not come back."""
    script = (
        "import os\n"
        "from llm_byoc.process.privileges import Account, become\n"
        f"become(Account('nobody', 65534, 65534, {str(tmp_path)!r}))\n"
        "print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups(), os.environ['HOME'])\n"
        "try:\n    os.setuid(0)\nexcept PermissionError:\n    print('no way back')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split("\n")[:2] == [f"65534 65534 65534 [] {tmp_path}", "no way back"]
