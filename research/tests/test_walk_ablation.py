"""The walk ablation's summary: each variant is compared, seed by seed, with the variant
it adds one setting to among those that ran, a run that never walked counts as later than
any that did, and wall-clock is compared only between runs of one boot of one machine."""

from __future__ import annotations

from omegaconf import OmegaConf

from research.walk_ablation import baseline, summary

VARIANTS = OmegaConf.create({"default": [], "no_symmetry": ["algo.symmetry=false"],
                             "epochs_2": ["algo.symmetry=false", "epochs=2"]})


def result(variant: str, seed: int, steps: int | None, wall: float | None,
           boot: int | None = None) -> dict:
    return {"variant": variant, "seed": seed, "walked": steps is not None,
            "env_steps_to_walk": steps, "wall_s_to_walk": wall, "env_steps_per_s": 1000.0,
            "learn_fraction": 0.2, "machine_boot": boot}


def test_each_variant_is_paired_with_the_one_it_adds_a_setting_to():
    every = set(VARIANTS)
    assert baseline("default", VARIANTS, every) is None
    assert baseline("no_symmetry", VARIANTS, every) == "default"
    assert baseline("epochs_2", VARIANTS, every) == "no_symmetry"
    # a baseline that never ran gives way to the next one below it
    assert baseline("epochs_2", VARIANTS, {"default", "epochs_2"}) == "default"
    rows = summary([result("default", 0, 100, 10.0), result("default", 1, 100, 10.0),
                    result("no_symmetry", 0, 300, 30.0), result("no_symmetry", 1, 300, 30.0),
                    result("epochs_2", 0, 200, 40.0), result("epochs_2", 1, None, None)],
                   VARIANTS).splitlines()
    assert rows[2].startswith("| default | - | s0:0.00M s1:0.00M |") and "| - |" in rows[2]
    assert "| default: 0/2, 0/2 |" in rows[3]
    # seed 0 sooner in env steps than no_symmetry (not in wall-clock); seed 1 never walked
    assert "| epochs_2 | algo.symmetry=false epochs=2 | s0:0.00M s1:never |" in rows[4]
    assert "| no_symmetry: 1/2, 0/2 |" in rows[4]


def test_wall_clock_is_compared_only_within_one_boot_of_a_machine():
    """A run twice as fast in wall-clock on a faster machine is not counted as sooner."""
    rows = summary([result("default", 0, 300, 300.0, boot=1),
                    result("default", 1, 300, 300.0, boot=2),
                    result("no_symmetry", 0, 200, 100.0, boot=1),
                    result("no_symmetry", 1, 200, 100.0, boot=3)], VARIANTS).splitlines()
    assert "| default: 2/2, 1/1 |" in rows[3]
    rows = summary([result("default", 0, 300, 300.0, boot=1),
                    result("no_symmetry", 0, 200, 100.0, boot=3)], VARIANTS).splitlines()
    assert "| default: 1/1, other sittings |" in rows[3]
