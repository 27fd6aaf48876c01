"""kdiag.core.trust on real trees: owners, modes, sticky directories, links and classpaths (chown needs root)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kdiag.core.trust import why_untrusted, why_untrusted_classpath

NOBODY = 65534
pytestmark = [pytest.mark.integration, pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp_path/opt/kafka/libs/kafka.jar, root's, mode 755/644 (tmp_path lies under the sticky /tmp)."""
    libs = tmp_path / "opt" / "kafka" / "libs"
    libs.mkdir(parents=True)
    for d in (tmp_path / "opt", tmp_path / "opt" / "kafka", libs):
        d.chmod(0o755)
    (libs / "kafka.jar").write_text("jar")
    (libs / "kafka.jar").chmod(0o644)
    return tmp_path


def test_root_owned_files_no_one_else_can_write_are_trusted(tree):
    jar = tree / "opt/kafka/libs/kafka.jar"
    assert why_untrusted(str(jar), {0}) is None
    assert why_untrusted(str(tree / "opt/kafka/libs/absent.jar"), {0}) is None  # only root could create it
    assert why_untrusted(str(tree / "opt/kafka/libs/../libs/./kafka.jar"), {0}) is None


def test_another_users_file_is_trusted_only_when_that_user_is(tree):
    jar = tree / "opt/kafka/libs/kafka.jar"
    os.chown(jar, NOBODY, NOBODY)
    assert why_untrusted(str(jar), {0}) == f"{jar} belongs to uid {NOBODY} (nobody), not to uid 0 (root)"
    assert why_untrusted(str(jar), {0, NOBODY}) is None
    os.chown(tree / "opt/kafka", NOBODY, NOBODY)  # the jar is root's, but nobody may swap the directory above it
    assert why_untrusted(str(jar), {0}).startswith(f"{tree / 'opt/kafka'} belongs to uid {NOBODY}")


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757])
def test_a_directory_others_can_write_is_refused(tree, mode):
    (tree / "opt/kafka/libs").chmod(mode)
    reason = why_untrusted(str(tree / "opt/kafka/libs/kafka.jar"), {0})
    assert reason and reason.startswith(f"{tree / 'opt/kafka/libs'} can be written by others (mode d")


def test_a_sticky_root_directory_passes_only_to_an_entry_of_a_trusted_owner(tree):
    shared = tree / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # as /tmp
    (shared / "mine").mkdir(mode=0o755)
    assert why_untrusted(str(shared / "mine"), {0}) is None
    assert "can be written by others (mode drwxrwxrwt)" in why_untrusted(str(shared), {0})
    assert "can be written by others" in why_untrusted(str(shared / "absent"), {0})  # anyone may create it
    os.chown(shared / "mine", NOBODY, NOBODY)
    assert "belongs to uid 65534" in why_untrusted(str(shared / "mine"), {0})


def test_links_are_followed_and_each_is_checked(tree):
    elsewhere = tree / "home" / "nobody"
    elsewhere.mkdir(parents=True, mode=0o755)
    os.chown(elsewhere, NOBODY, NOBODY)
    link = tree / "opt/kafka/libs/evil.jar"
    link.symlink_to(elsewhere / "evil.jar")
    assert f"{elsewhere} belongs to uid {NOBODY}" in why_untrusted(str(link), {0})
    relative = tree / "opt/kafka/libs/again.jar"
    relative.symlink_to("../libs/kafka.jar")
    assert why_untrusted(str(relative), {0}) is None
    os.lchown(relative, NOBODY, NOBODY)
    assert why_untrusted(str(relative), {0}) == f"{relative} is a link of uid {NOBODY} (nobody), not of uid 0 (root)"
    loop = tree / "opt/kafka/libs/loop"
    loop.symlink_to("loop")
    assert "more than 40 symbolic links" in why_untrusted(str(loop), {0})


def test_a_classpath_is_trusted_entry_by_entry_and_a_wildcard_jar_by_jar(tree):
    libs = tree / "opt/kafka/libs"
    assert why_untrusted_classpath(f"{libs}/*:{libs}/kafka.jar:{tree}/absent/*", {0}) is None
    planted = libs / ".planted.jar"  # Java's dir/* takes hidden jars too
    planted.write_text("jar")
    os.chown(planted, NOBODY, NOBODY)
    assert why_untrusted_classpath(f"{libs}/*", {0}).startswith(f"{planted} belongs to uid {NOBODY}")
    assert why_untrusted_classpath(f"{libs}/kafka.jar", {0}) is None  # the planted jar is not on this one
    assert why_untrusted_classpath(f"{libs}/kafka.jar::", {0}) == "an empty classpath entry stands for the working directory"
    assert why_untrusted_classpath("libs/*", {0}) == "libs/ is not an absolute path"
