"""Where a path a user wrote is read from (nas.files.paths): in a file, relative to it; recorded, absolute."""

from __future__ import annotations

from pathlib import Path

import pytest

from nas.errors import ConfigError
from nas.files.paths import in_file, recorded


def test_a_path_in_a_file_is_relative_to_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "configs").mkdir()
    (tmp_path / "data.txt").write_text("x")
    spec = tmp_path / "configs" / "s.yaml"
    monkeypatch.chdir(tmp_path / "configs")
    assert in_file("../data.txt", "s.yaml", "data.corpus") == str(tmp_path / "data.txt")
    monkeypatch.chdir("/")
    assert in_file("../data.txt", spec, "data.corpus") == str(tmp_path / "data.txt")
    # not there at all: the file-relative path, which reading names as not found
    assert in_file("nope/", spec, "data.corpus") == str(tmp_path / "configs" / "nope")
    # names and absolute paths are what they say; ~ is the home directory
    for value in ("shakespeare", "shakespeare-reversed", None, "/abs/x.txt"):
        assert in_file(value, spec, "data.corpus") == value
    monkeypatch.setenv("HOME", str(tmp_path))
    assert in_file("~/data.txt", spec, "data.corpus") == str(tmp_path / "data.txt")


def test_a_path_written_for_the_working_directory_is_refused(tmp_path: Path, monkeypatch) -> None:
    """It was read from the working directory; read from the file's it would name nothing: never guessed."""
    (tmp_path / "configs").mkdir()
    (tmp_path / "books").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        in_file("books/", "configs/s.yaml", "data.corpus")
    text = str(info.value)
    assert text.startswith("configs/s.yaml: data.corpus: books/ is read relative to this file's directory")
    assert str(tmp_path / "configs" / "books") in text and str(tmp_path / "books") in text
    assert "write ../books" in text and "\n" not in text


def test_both_places_exist_the_file_wins_and_says_so(tmp_path: Path, monkeypatch, capsys) -> None:
    for d in ("configs/books", "books"):
        (tmp_path / d).mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert in_file("books", "configs/s.yaml", "data.corpus") == str(tmp_path / "configs" / "books")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"(not the working directory's {tmp_path / 'books'})" in err
    monkeypatch.chdir(tmp_path / "configs")  # one place seen two ways: nothing to say
    assert in_file("books", "s.yaml", "data.corpus") == str(tmp_path / "configs" / "books")
    assert capsys.readouterr().err == ""


def test_a_recorded_path_is_absolute(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "t.txt").write_text("x")
    monkeypatch.chdir(tmp_path)
    assert recorded("t.txt") == str(tmp_path / "t.txt")
    assert recorded("shakespeare") == "shakespeare" and recorded(None) is None
