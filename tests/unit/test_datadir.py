"""One place for data and config, whatever the current directory (issue 19): the nearest
horae.toml upward, HORAE_DATA_DIR, else the working tree's own directory under the per-user
(XDG) data directory (issue 29: two checkouts never share embedded servers)."""

from __future__ import annotations

from pathlib import Path

import pytest

from horae.settings import Settings, load_settings
from scheduler.core.datadir import (
    data_dir_of,
    find_config,
    project_data_dir,
    user_data_dir,
    working_tree,
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """tmp/proj/horae.toml with a namespace, and an empty tmp/proj/src/deep/."""
    root = tmp_path / "proj"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "horae.toml").write_text('namespace = "from-project"\n')
    return root


def test_the_nearest_horae_toml_upward_gives_config_and_data_dir(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for cwd in (project, project / "src", project / "src" / "deep"):
        monkeypatch.chdir(cwd)
        assert find_config() == project / "horae.toml"
        s = load_settings(env={"HOME": str(project.parent / "home")})
        assert (s.namespace, s.data_dir) == ("from-project", str(project / ".horae")), cwd


def test_without_a_project_file_each_working_tree_has_its_own_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    projects = home / ".local" / "share" / "horae" / "projects"
    one, two = (
        tmp_path / "one" / "app",
        tmp_path / "two" / "app",
    )  # two clones of the same repository
    for clone in (one, two):
        (clone / ".git").mkdir(parents=True)
        (clone / "src").mkdir()
    (tmp_path / "wt").mkdir()
    (tmp_path / "wt" / ".git").write_text(
        "gitdir: /elsewhere/.git/worktrees/wt\n"
    )  # a `git worktree`
    seen = {}
    for cwd, tree in (
        (one, one),
        (one / "src", one),
        (two / "src", two),
        (tmp_path / "wt", tmp_path / "wt"),
        (tmp_path, tmp_path),
    ):
        monkeypatch.chdir(cwd)
        assert working_tree() == tree
        data_dir = Path(load_settings(env={"HOME": str(home)}).data_dir)
        assert data_dir == project_data_dir(tree, {"HOME": str(home)}), cwd
        assert data_dir.parent == projects and data_dir.name.startswith(tree.name[:24] + "-"), cwd
        seen.setdefault(tree, set()).add(data_dir)
    assert all(len(dirs) == 1 for dirs in seen.values()), (
        "one directory per tree, from any subdirectory"
    )
    assert len(set.union(*seen.values())) == len(seen), "no two trees share a directory"
    xdg = tmp_path / "xdg"
    monkeypatch.chdir(one)
    assert load_settings(env={"HOME": str(home), "XDG_DATA_HOME": str(xdg)}).data_dir == str(
        project_data_dir(one, {"XDG_DATA_HOME": str(xdg)})
    )
    assert project_data_dir(one, {"XDG_DATA_HOME": str(xdg)}).parent == xdg / "horae" / "projects"
    # a relative XDG_DATA_HOME is invalid per the XDG spec and ignored
    assert (
        user_data_dir({"HOME": str(home), "XDG_DATA_HOME": "rel"})
        == home / ".local" / "share" / "horae"
    )


def test_horae_data_dir_wins_and_relative_values_do_not_follow_later_cwd_changes(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project / "src")
    s = load_settings(env={"HORAE_DATA_DIR": "mine"})
    assert s.data_dir == str(project / "src" / "mine")  # env > file, made absolute at load
    s = load_settings(env={"HORAE_DATA_DIR": str(tmp_path / "elsewhere")})
    assert s.data_dir == str(tmp_path / "elsewhere")


def test_a_data_dir_in_the_file_is_relative_to_the_file(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (project / "horae.toml").write_text('data_dir = "var/horae"\n')
    monkeypatch.chdir(project / "src" / "deep")
    assert load_settings(env={}).data_dir == str(project / "var" / "horae")


def test_an_explicit_config_file_puts_data_next_to_it(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "etc" / "prod.toml"
    other.parent.mkdir()
    other.write_text('namespace = "prod"\n')
    monkeypatch.chdir(project)  # a project file here is not read when another is named
    for s in (load_settings(other, env={}), load_settings(env={"HORAE_CONFIG": str(other)})):
        assert (s.namespace, s.data_dir) == ("prod", str(other.parent / ".horae"))


def test_settings_built_by_hand_resolve_their_data_dir_the_same_way(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project / "src")
    assert data_dir_of(Settings()) == project / ".horae"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert data_dir_of(Settings()) == project_data_dir(
        tmp_path, {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    )
    assert data_dir_of(Settings(data_dir="/srv/horae")) == Path("/srv/horae")
