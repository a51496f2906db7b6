"""CA bundles as files: one per distinct bundle, whole, in a directory only this user may write."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from capfleet import cafiles

BUNDLE = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
OTHER = "-----BEGIN CERTIFICATE-----\nMIIC\n-----END CERTIFICATE-----\n"


def test_the_same_bundle_is_one_file_however_many_connections_ask(tmp_path: Path) -> None:
    where = tmp_path / "ca"
    paths = {cafiles.ca_file(BUNDLE, where) for _ in range(5)}
    assert len(paths) == 1
    (path,) = paths
    assert Path(path).read_text() == BUNDLE
    assert cafiles.ca_file(OTHER, where) != path
    assert sorted(p.suffix for p in where.iterdir()) == [".pem", ".pem"], "no staging file is left"
    assert os.stat(where).st_mode & 0o777 == 0o700


def test_a_directory_others_may_write_to_is_refused(tmp_path: Path) -> None:
    where = tmp_path / "ca"
    where.mkdir(mode=0o777)
    os.chmod(where, 0o777)
    with pytest.raises(cafiles.UnsafeDirectory):
        cafiles.ca_file(BUNDLE, where)


def test_a_symlink_in_place_of_the_directory_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    (tmp_path / "ca").symlink_to(target)
    with pytest.raises(cafiles.UnsafeDirectory):
        cafiles.ca_file(BUNDLE, tmp_path / "ca")
