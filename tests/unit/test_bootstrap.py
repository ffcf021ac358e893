"""Node set-up's bootstrap (nodes/bootstrap.py) places nothing unchecked:
the data's digest is checked before any file is moved into place, and an
archive member whose name leads outside the target folder (absolute, `..`,
through a link) or that is not a plain file stops the set-up with one line."""

from __future__ import annotations

import io
import os
import tarfile

import pytest

from workflow.scripts.nodes import bootstrap, setup


def archive(members: list[tuple[str, bytes | None, str]], mode: str = "w") -> bytes:
    """A tar of (name, content, kind) with kind file, symlink (content = its target) or folder."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, content, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, content.decode()
                tar.addfile(info)
            elif kind == "folder":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


@pytest.mark.parametrize("name, kind", [("../escaped", "file"), ("ok/../../escaped", "file"),
                                        ("/tmp/cpuddp-escaped", "file"), ("link", "symlink")])
def test_a_member_outside_the_folder_stops_the_unpack_before_anything_is_written(tmp_path, name, kind):
    root = tmp_path / "node" / "copy"
    root.mkdir(parents=True)
    data = archive([("first.txt", b"x", "file"), (name, b"/etc/passwd" if kind == "symlink" else b"evil", kind)])
    with pytest.raises(SystemExit) as stop:
        bootstrap.unpack(data, str(root))
    said = str(stop.value.code)
    assert said.startswith("setup: archive member ") and " refused: " in said and "\n" not in said
    assert os.listdir(root) == []  # not even the good member before it
    assert not (tmp_path / "node" / "escaped").exists() and not os.path.exists("/tmp/cpuddp-escaped")


def test_a_link_already_in_the_folder_is_not_followed_out_of_it(tmp_path):
    root, outside = tmp_path / "copy", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "sub").symlink_to(outside)
    with pytest.raises(SystemExit, match="refused"):
        bootstrap.unpack(archive([("sub/planted", b"evil", "file")]), str(root))
    assert not (outside / "planted").exists()


def test_plain_files_and_folders_unpack(tmp_path):
    data = archive([("a", None, "folder"), ("a/b.txt", b"b", "file"), ("c.txt", b"c", "file")])
    assert bootstrap.unpack(data, str(tmp_path)) == 2
    assert (tmp_path / "a/b.txt").read_bytes() == b"b" and (tmp_path / "c.txt").read_bytes() == b"c"
    assert bootstrap.unpack(data, str(tmp_path)) == 0  # unchanged: nothing written


@pytest.fixture
def served(tmp_path):
    """The launch node's data folder, served as setup_nodes serves it; (env of a node, the folder)."""
    source = tmp_path / "launch" / "data"
    (source / "model").mkdir(parents=True)
    (source / "model/weights.bin").write_bytes(bytes(range(256)) * 16)
    (source / "tokens.arrow").write_bytes(b"arrow")
    server, url = setup.serve_once(b"", "127.0.0.1", source)
    node = tmp_path / "node" / "data"
    yield {"CPUDDP_SETUP_URL": url, "CPUDDP_SETUP_DATA": str(node),
           "CPUDDP_SETUP_DATA_SHA256": bootstrap.tree_digest(str(source))}, source
    server.shutdown()


def test_the_data_is_placed_once_its_digest_matches(served):
    env, source = served
    assert bootstrap.copy_data(env) == 2
    node = env["CPUDDP_SETUP_DATA"]
    assert bootstrap.tree_digest(node) == bootstrap.tree_digest(str(source))
    assert os.listdir(os.path.dirname(node)) == ["data"]  # no staging folder left
    assert bootstrap.copy_data(env) == "same"


def test_damaged_data_is_never_placed(served):
    env, _ = served
    node = env["CPUDDP_SETUP_DATA"]
    os.makedirs(os.path.join(node, "model"))
    with open(os.path.join(node, "model/weights.bin"), "wb") as handle:
        handle.write(b"the node's own copy")
    env = {**env, "CPUDDP_SETUP_DATA_SHA256": "0" * 64}  # what arrives is not what was sent
    with pytest.raises(SystemExit) as stop:
        bootstrap.copy_data(env)
    assert stop.value.code == f"setup: the data copy for {node} arrived damaged; nothing was placed"
    with open(os.path.join(node, "model/weights.bin"), "rb") as handle:
        assert handle.read() == b"the node's own copy"
    assert not os.path.exists(os.path.join(node, "tokens.arrow"))
    assert sorted(os.listdir(os.path.dirname(node))) == ["data"]  # the staging folder is gone


def test_a_data_stream_with_a_name_outside_the_folder_is_refused(tmp_path):
    staging, root = tmp_path / "staging", tmp_path / "data"
    staging.mkdir()
    stream = io.BytesIO(archive([("../escaped", b"evil", "file")]))
    with pytest.raises(SystemExit, match="refused"):
        bootstrap.receive(stream, str(staging), str(root))
    assert not (tmp_path / "escaped").exists()


def test_the_program_sent_to_the_nodes_still_compiles():
    compile(bootstrap.standalone_program(), "<setup>", "exec")
