"""Study files: curves and logs read the same plain, xz-compressed or gzipped; a new curve is
written xz-compressed, and a curve kept in any of the three forms is a finished run."""

from __future__ import annotations

import gzip
import json
import lzma
import shutil

import numpy as np
import pytest

from research.study import (
    compressed_as,
    curve_path,
    finished,
    read_csv,
    read_jsonl,
    settings_path,
    stored,
    study_curves,
    write_csv,
    write_curve,
)

ROWS = [{"iteration": 1, "env_steps": 10, "return": 0.5},
        {"iteration": 2, "env_steps": 20, "return": float("nan")}]
# Opened here without the study's helpers, so a file they write or read is checked against
# the format itself. xz is how research/results keeps files now, gzip how it kept them before.
OPENERS = {".xz": lzma.open, ".gz": gzip.open}
XZ_MAGIC = b"\xfd7zXZ\x00"


def compress(path, suffix):
    """Replace ``path`` by ``<path><suffix>`` (``.xz`` or ``.gz``)."""
    copy = path.with_name(path.name + suffix)
    with path.open("rb") as src, OPENERS[suffix](copy, "wb") as out:
        shutil.copyfileobj(src, out)
    path.unlink()
    return copy


def test_plain_xz_and_gzipped_curves_read_the_same(tmp_path):
    curves = tmp_path / "curves"
    for name in ("plain", "xz", "gz"):
        write_csv(curves / f"{name}_s0.csv", ROWS)
    expected = read_csv(curves / "plain_s0.csv")
    assert expected["env_steps"].tolist() == [10.0, 20.0]
    for suffix in OPENERS:
        name = suffix[1:]
        plain = curves / f"{name}_s0.csv"
        kept = compress(plain, suffix)
        assert stored(plain) == kept and stored(kept) == kept
        assert curve_path(tmp_path, f"{name}_s0") == kept
        for path in (kept, plain):  # named either way: the kept file is read
            curve = read_csv(path)
            assert curve.keys() == expected.keys()
            for k in curve:
                np.testing.assert_array_equal(curve[k], expected[k])
    assert curve_path(tmp_path, "plain_s0") == curves / "plain_s0.csv"


def test_a_new_curve_is_written_xz_compressed_with_its_settings(tmp_path):
    path = curve_path(tmp_path, "a_s0")
    assert path == tmp_path / "curves" / "a_s0.csv.xz"
    write_curve(path, ROWS, {"seed": 0})
    assert sorted(p.name for p in (tmp_path / "curves").iterdir()) == [
        "a_s0.csv.xz", "a_s0.settings.json.xz"]
    assert path.read_bytes().startswith(XZ_MAGIC)
    with lzma.open(path, "rt") as f:
        assert f.readline().strip() == "iteration,env_steps,return"
    with lzma.open(tmp_path / "curves" / "a_s0.settings.json.xz", "rt") as f:
        assert json.load(f) == {"seed": 0}


def test_a_study_reads_the_curves_it_shares_where_they_are_kept(tmp_path):
    """A run listed in curves/shared.txt is read, settings and all, from the study that
    keeps it; a run listed nowhere is written to the study's own directory."""
    settings = {"seed": 0}
    kept = curve_path(tmp_path / "base", "uniform_s0")
    write_curve(kept, ROWS, settings)
    write_curve(curve_path(tmp_path / "base", "other_s0"), ROWS, settings)
    study = tmp_path / "variant"
    (study / "curves").mkdir(parents=True)
    (study / "curves" / "shared.txt").write_text(
        "# the uniform run is the base study's\n../../base/curves/uniform_s0.csv.xz\n")
    assert curve_path(study, "uniform_s0").resolve() == kept.resolve()
    assert finished(curve_path(study, "uniform_s0"), "env_steps", 20, "env steps", settings)
    assert curve_path(study, "other_s0") == study / "curves" / "other_s0.csv.xz"
    assert [p.name for p in study_curves(study)] == ["uniform_s0.csv.xz"]


@pytest.mark.parametrize("suffix", [".xz", ".gz"], ids=["new", "older_code"])
def test_a_compressed_curve_is_a_finished_run_with_its_settings(tmp_path, suffix):
    """Also one an older study wrote gzipped, as a grid started before the switch goes on."""
    settings = {"seed": 0, "algo": {"gamma": 0.99}}
    curve = tmp_path / "curves" / f"a_s0.csv{suffix}"
    write_curve(curve, ROWS, settings)
    kept = tmp_path / "curves" / f"a_s0.settings.json{suffix}"  # compressed as the curve is
    assert settings_path(curve) == tmp_path / "curves" / "a_s0.settings.json"
    assert compressed_as(settings_path(curve), curve) == kept and kept.exists()
    path = curve_path(tmp_path, "a_s0")
    assert path == curve
    assert finished(path, "env_steps", 20, "env steps", settings)
    assert not finished(curve_path(tmp_path, "b_s0"), "env_steps", 20, "env steps", settings)
    other = {"seed": 0, "algo": {"gamma": 0.9}}
    match = rf"a_s0.csv{suffix} was trained with other \['algo.gamma'\]"
    with pytest.raises(ValueError, match=match):
        finished(path, "env_steps", 20, "env steps", other)
    with pytest.raises(ValueError, match="ran 20 env steps, the study asks 30"):
        finished(path, "env_steps", 30, "env steps", settings)
    # a setting added since matches a run saved without it at its do-nothing value only
    assert finished(path, "env_steps", 20, "env steps",
                    {"seed": 0, "algo": {"gamma": 0.99, "symmetry": False}})
    with pytest.raises(ValueError, match=r"other \['algo.symmetry'\]"):
        finished(path, "env_steps", 20, "env steps",
                 {"seed": 0, "algo": {"gamma": 0.99, "symmetry": True}})
    with OPENERS[suffix](kept, "rt") as f:  # plain, as studies wrote them before: still checked
        settings_path(curve).write_text(f.read())
    kept.unlink()
    with pytest.raises(ValueError, match=match):
        finished(path, "env_steps", 20, "env steps", other)
    assert finished(path, "env_steps", 20, "env steps", settings)


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_write_csv_compresses_where_the_name_says_so(tmp_path, suffix):
    path = tmp_path / f"c.csv{suffix}"
    write_csv(path, ROWS)
    with OPENERS[suffix](path, "rt") as f:
        assert f.readline().strip() == "iteration,env_steps,return"
    assert read_csv(path)["env_steps"].tolist() == [10.0, 20.0]


@pytest.mark.parametrize("suffix", [".xz", ".gz"])
def test_progress_logs_read_plain_or_compressed(tmp_path, suffix):
    rows = [{"iteration": 1, "Episode/return": 1.5}, {"iteration": 2, "Episode/return": 2.0}]
    plain = tmp_path / "progress.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert read_jsonl(plain) == rows
    kept = compress(plain, suffix)
    assert read_jsonl(plain) == rows == read_jsonl(kept)


def test_a_run_kept_before_the_fallen_term_counts_only_with_the_term_off(tmp_path):
    """Runs trained before the ``fallen`` reward term and ``fall_tilt`` existed read the
    tilt as their termination's 1.0 rad and pay nothing for a fall."""
    old = {"seed": 0, "task": {"rewards": {"weights": {"track": 1.0}}}}
    curve = tmp_path / "curves" / "a_s0.csv.xz"
    write_curve(curve, ROWS, old)

    def now(fall_tilt, fallen):
        return {"seed": 0, "task": {"rewards": {"fall_tilt": fall_tilt,
                                                "weights": {"track": 1.0, "fallen": fallen}}}}

    assert finished(curve, "env_steps", 20, "env steps", now(1.0, 0.0))
    with pytest.raises(ValueError, match=r"other \['task.rewards.weights.fallen'\]"):
        finished(curve, "env_steps", 20, "env steps", now(1.0, -5.0))
    with pytest.raises(ValueError, match=r"other \['task.rewards.fall_tilt'\]"):
        finished(curve, "env_steps", 20, "env steps", now(0.8, 0.0))
