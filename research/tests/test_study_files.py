"""Study files: curves and logs read the same plain or gzipped, and a gzipped curve is a
finished run."""

from __future__ import annotations

import gzip
import json
import shutil

import numpy as np
import pytest

from research.study import (
    curve_path,
    finished,
    read_csv,
    read_jsonl,
    settings_path,
    stored,
    write_csv,
    write_curve,
)

ROWS = [{"iteration": 1, "env_steps": 10, "return": 0.5},
        {"iteration": 2, "env_steps": 20, "return": float("nan")}]


def gzip_file(path):
    """Replace ``path`` by ``<path>.gz``, as research/results keeps curves."""
    gz = path.with_name(path.name + ".gz")
    with path.open("rb") as src, gzip.open(gz, "wb") as out:
        shutil.copyfileobj(src, out)
    path.unlink()
    return gz


def test_a_gzipped_curve_reads_as_the_plain_one(tmp_path):
    plain = tmp_path / "curves" / "a_s0.csv"
    write_csv(plain, ROWS)
    expected = read_csv(plain)
    gz = gzip_file(plain)
    assert not plain.exists()
    for path in (gz, plain):  # named either way: the kept file is read
        curve = read_csv(path)
        assert curve.keys() == expected.keys()
        for k in curve:
            np.testing.assert_array_equal(curve[k], expected[k])
    assert stored(plain) == gz and stored(gz) == gz
    assert curve_path(tmp_path, "a_s0") == gz


def test_a_new_curve_is_written_gzipped_and_an_old_plain_one_still_found(tmp_path):
    write_curve(curve_path(tmp_path, "a_s0"), ROWS, {"seed": 0})
    assert sorted(p.name for p in (tmp_path / "curves").iterdir()) == [
        "a_s0.csv.gz", "a_s0.settings.json"]
    with gzip.open(tmp_path / "curves" / "a_s0.csv.gz", "rt") as f:
        assert f.readline().strip() == "iteration,env_steps,return"
    write_csv(tmp_path / "curves" / "b_s0.csv", ROWS)
    assert curve_path(tmp_path, "b_s0") == tmp_path / "curves" / "b_s0.csv"


def test_a_gzipped_curve_is_a_finished_run_with_its_settings(tmp_path):
    settings = {"seed": 0, "algo": {"gamma": 0.99}}
    write_curve(curve_path(tmp_path, "a_s0"), ROWS, settings)
    gz = tmp_path / "curves" / "a_s0.csv.gz"
    assert settings_path(gz) == tmp_path / "curves" / "a_s0.settings.json"
    path = curve_path(tmp_path, "a_s0")
    assert finished(path, "env_steps", 20, "env steps", settings)
    assert not finished(curve_path(tmp_path, "b_s0"), "env_steps", 20, "env steps", settings)
    with pytest.raises(ValueError, match=r"a_s0.csv.gz was trained with other \['algo.gamma'\]"):
        finished(path, "env_steps", 20, "env steps", {"seed": 0, "algo": {"gamma": 0.9}})
    with pytest.raises(ValueError, match="ran 20 env steps, the study asks 30"):
        finished(path, "env_steps", 30, "env steps", settings)
    # a setting added since matches a run saved without it at its do-nothing value only
    assert finished(path, "env_steps", 20, "env steps",
                    {"seed": 0, "algo": {"gamma": 0.99, "symmetry": False}})
    with pytest.raises(ValueError, match=r"other \['algo.symmetry'\]"):
        finished(path, "env_steps", 20, "env steps",
                 {"seed": 0, "algo": {"gamma": 0.99, "symmetry": True}})


def test_write_csv_gzips_where_the_name_says_so(tmp_path):
    path = tmp_path / "c.csv.gz"
    write_csv(path, ROWS)
    with gzip.open(path, "rt") as f:
        assert f.readline().strip() == "iteration,env_steps,return"
    assert read_csv(path)["env_steps"].tolist() == [10.0, 20.0]


def test_progress_logs_read_plain_or_gzipped(tmp_path):
    rows = [{"iteration": 1, "Episode/return": 1.5}, {"iteration": 2, "Episode/return": 2.0}]
    plain = tmp_path / "progress.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_jsonl(plain) == rows
    gzip_file(plain)
    assert read_jsonl(plain) == rows == read_jsonl(tmp_path / "progress.jsonl.gz")
