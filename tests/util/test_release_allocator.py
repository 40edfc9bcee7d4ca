"""traincast.util.allocator.release_memory: freed memory handed back to the operating system."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from traincast.util.allocator import _malloc_trim, release_memory


def _rss_mib() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux") or _malloc_trim() is None,
                    reason="glibc's malloc_trim is Linux/glibc only")
def test_freed_heap_goes_back_to_the_os() -> None:
    # 4,000 arrays of 64 KiB sit on the C heap (below glibc's mmap threshold); keeping every
    # 50th pins the heap's top, so freeing the others does not shrink it by itself
    arrays = [np.ones(8000) for _ in range(4000)]
    kept = arrays[::50]
    del arrays
    before = _rss_mib()
    release_memory()
    after = _rss_mib()
    assert before - after > 100, (before, after)  # ~250 MiB were freed but resident
    assert all(float(a[0]) == 1.0 for a in kept)  # what is in use is untouched


def test_release_memory_is_safe_to_call_repeatedly() -> None:
    for _ in range(3):
        assert release_memory() is None


def test_small_pages_restores_numpy_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    import traincast.util.allocator as mem

    state = {"on": True}
    calls: list[bool] = []

    def toggle(enabled: bool) -> bool:
        calls.append(enabled)
        previous, state["on"] = state["on"], enabled
        return previous

    monkeypatch.setattr(mem, "_hugepage_toggle", lambda: toggle)
    with mem.small_pages():
        assert state["on"] is False
        with mem.small_pages():  # nested: still off, then back to off
            assert state["on"] is False
        assert state["on"] is False
    assert state["on"] is True and calls == [False, False, False, True]
    with pytest.raises(RuntimeError), mem.small_pages():
        raise RuntimeError("restored on errors too")
    assert state["on"] is True


def test_small_pages_follows_the_kernel_setting(tmp_path, monkeypatch: pytest.MonkeyPatch
                                                ) -> None:
    import traincast.util.allocator as mem

    for text, stalls in (("always defer defer+madvise [madvise] never\n", True),
                         ("always [defer] defer+madvise madvise never\n", False),
                         ("[always] defer defer+madvise madvise never\n", True),
                         ("always defer defer+madvise madvise [never]\n", False)):
        f = tmp_path / "defrag"
        f.write_text(text)
        monkeypatch.setattr(mem, "_DEFRAG", f)
        mem._hugepage_toggle.cache_clear()
        assert (mem._hugepage_toggle() is not None) is stalls, text
    monkeypatch.setattr(mem, "_DEFRAG", tmp_path / "missing")
    mem._hugepage_toggle.cache_clear()
    assert mem._hugepage_toggle() is None
    mem._hugepage_toggle.cache_clear()


def test_arrow_small_pages_sets_mimalloc_thp_off_only_where_faults_stall(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    import traincast.util.allocator as mem

    var = mem.MIMALLOC_THP_VAR
    monkeypatch.delenv(var, raising=False)
    monkeypatch.delitem(sys.modules, "pyarrow", raising=False)  # (restored after the test)
    f = tmp_path / "defrag"
    monkeypatch.setattr(mem, "_DEFRAG", f)
    f.write_text("always [defer] defer+madvise madvise never\n")  # no stall: nothing set
    assert mem.arrow_small_pages() is False and var not in mem.os.environ
    f.write_text("always defer defer+madvise [madvise] never\n")
    assert mem.arrow_small_pages() is True and mem.os.environ[var] == "0"
    monkeypatch.setenv(var, "1")  # the user's own setting is kept
    assert mem.arrow_small_pages() is False and mem.os.environ[var] == "1"
    monkeypatch.delenv(var)
    monkeypatch.setitem(sys.modules, "pyarrow", object())  # too late: mimalloc has started
    assert mem.arrow_small_pages() is False and var not in mem.os.environ


def test_the_command_starts_arrow_off_huge_pages_where_faults_stall(tmp_path) -> None:
    """``python -m traincast.cli`` (a child process): the variable is set before pyarrow
    starts, exactly where the kernel's setting stalls."""
    import os
    import subprocess

    import traincast.util.allocator as mem

    code = ("import os, sys; from traincast.cli.app import main; "
            "sys.argv = ['traincast', '--version']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('THP=' + os.environ.get('MIMALLOC_ALLOW_THP', '-'))")
    env = {k: v for k, v in os.environ.items() if k != mem.MIMALLOC_THP_VAR}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=tmp_path, check=True).stdout
    assert ("THP=0" if mem.stalling_defrag() else "THP=-") in out


def test_commands_that_run_training_leave_the_environment_alone(tmp_path) -> None:
    """``traincast record`` and ``traincast demo`` start the user's training processes,
    which inherit the command's environment: the switch is not set for them."""
    import os
    import subprocess

    import traincast.util.allocator as mem

    env = {k: v for k, v in os.environ.items() if k != mem.MIMALLOC_THP_VAR}
    for cmd in ("record", "demo"):
        code = ("import os, sys; from traincast.cli.app import main; "
                f"sys.argv = ['traincast', {cmd!r}, '--help']\n"
                "try:\n    main()\nexcept SystemExit:\n    pass\n"
                "print('THP=' + os.environ.get('MIMALLOC_ALLOW_THP', '-'))")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, cwd=tmp_path, check=True).stdout
        assert "THP=-" in out, cmd
