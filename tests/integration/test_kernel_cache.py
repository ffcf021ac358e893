"""The compiled-kernel cache on a shared node: created 0700, and a library
is loaded only from a folder and file of this user that nobody else can
write. Anything else is refused in one line, before its constructors run."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess

import pytest

from workflow.scripts.train import kernel_build

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")

ANSWER = "int answer(void) { return 42; }\n"
# A library planted at the cached path: loading it would run this constructor.
PLANTED = """#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void ran(void) { close(open("%s", O_CREAT | O_WRONLY, 0600)); }
int answer(void) { return 7; }
"""


@pytest.fixture
def source(tmp_path):
    path = tmp_path / "answer.c"
    path.write_text(ANSWER)
    return path


def planted(source, cache, ran):
    """A foreign library at the path the cache would load `source` from."""
    target = kernel_build.cached_path(source, ["cc"], cache)
    target.parent.mkdir(parents=True)
    evil = source.parent / "evil.c"
    evil.write_text(PLANTED % ran)
    subprocess.run(["cc", *kernel_build.FLAGS, "-o", str(target), str(evil)], check=True)
    return target


def test_a_build_is_cached_in_folders_of_mode_0700(source, tmp_path):
    cache = tmp_path / "fresh" / "kernels"
    lib, where = kernel_build.compile_and_load(source, "cc", cache)
    assert lib is not None and lib.answer() == 42
    for folder in (cache, cache / os.path.relpath(os.path.dirname(where), cache)):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert not os.stat(where).st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    again, where_again = kernel_build.compile_and_load(source, "cc", cache)  # from the cache
    assert again is not None and where_again == where


def test_a_cache_owned_by_another_user_is_refused_and_never_loaded(source, tmp_path):
    ran = tmp_path / "constructor-ran"
    target = planted(source, tmp_path / "cache", ran)
    if os.geteuid() == 0:
        nobody = 65534
        os.chown(target.parent, nobody, nobody)
        os.chown(target, nobody, nobody)
        said = "belongs to uid 65534"
    else:  # as another user cannot be made here: a folder anyone may write to
        target.parent.chmod(0o777)
        said = "can be written by group or others (mode 777)"
    lib, why = kernel_build.compile_and_load(source, "cc", tmp_path / "cache")
    assert lib is None and said in why and "\n" not in why
    assert why.startswith("answer.so not built or loaded: ")
    assert not ran.exists()


@pytest.mark.parametrize("mode", [0o775, 0o757])
def test_a_folder_that_group_or_others_can_write_is_refused(source, tmp_path, mode):
    ran = tmp_path / "constructor-ran"
    target = planted(source, tmp_path / "cache", ran)
    target.parent.chmod(mode)
    lib, why = kernel_build.compile_and_load(source, "cc", tmp_path / "cache")
    assert lib is None and f"mode {mode:o}" in why and str(target.parent) in why
    assert not ran.exists()


def test_a_library_that_others_can_write_or_that_is_a_link_is_refused(source, tmp_path):
    ran = tmp_path / "constructor-ran"
    target = planted(source, tmp_path / "cache", ran)
    target.chmod(0o777)
    lib, why = kernel_build.compile_and_load(source, "cc", tmp_path / "cache")
    assert lib is None and "can be written by group or others" in why and str(target) in why
    real = tmp_path / "real.so"
    target.rename(real)
    real.chmod(0o700)
    target.symlink_to(real)
    lib, why = kernel_build.compile_and_load(source, "cc", tmp_path / "cache")
    assert lib is None and "is a symbolic link" in why
    assert not ran.exists()


def test_a_build_under_a_loose_umask_is_still_private(source, tmp_path):
    old = os.umask(0o002)
    try:
        lib, where = kernel_build.compile_and_load(source, "cc", tmp_path / "cache")
    finally:
        os.umask(old)
    assert lib is not None, where
    assert kernel_build.private(tmp_path / "cache") is None
