"""The warm-up's states table: zero actions settle the robots, random ones keep them moving."""

from research import warmup_states
from research.study import load_config


def rows_of(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and line[2].isdigit()]


def test_zero_actions_settle_the_later_groups_and_random_ones_do_not():
    common = ["num_envs=16", "task.episode_length_s=4.0", "sim.nthread=1",
              "bins_s=[0.0,1.0,2.0,4.0]"]
    zero = rows_of(warmup_states.state_table(load_config("warmup_states", common)))
    assert [r[0] for r in zero] == ["0-1", "1-2", "2-4"]
    assert abs(sum(float(r[1].rstrip("%")) for r in zero) - 100.0) < 0.5
    first_speed, last_speed = float(zero[0][4]), float(zero[-1][4])
    assert last_speed < first_speed / 5      # the later groups stand still
    assert zero[-1][-1] == "100.0%" and zero[0][-1] != "100.0%"
    random = rows_of(warmup_states.state_table(
        load_config("warmup_states", [*common, "reset.warmup=random"])))
    assert all(r[-1] == "0.0%" for r in random)   # random actions keep every robot moving
