"""Registered task terms: a new reward term is picked up by name from config; names are unique."""

import pytest
import torch

from locomotion.config import load_config
from locomotion.tasks import make_env
from locomotion.tasks.observations import observation_term
from locomotion.tasks.rewards import REWARD_TERMS, reward_term
from locomotion.tasks.terminations import termination_term


def test_a_registered_reward_term_is_weighted_and_logged():
    @reward_term("base_height_test")
    def base_height_test(c):
        return c.w.base_pos[:, 2]

    try:
        env = make_env(load_config("env", ["num_envs=4", "reset=sync",
                                           "+task.rewards.weights.base_height_test=2.0"]))
        env.reset()
        height = env.sim.qpos[:, 2].float()
        _, _, _, _, _ = env.step(torch.zeros(4, env.num_actions))
        _, terms = env.task.rewards(env.task.world(env.sim), env.actions, env.actions)
        expected = 2.0 * env.control_dt * env.sim.qpos[:, 2].float()
        torch.testing.assert_close(terms["base_height_test"], expected)
        assert (height > 0).all()
        env.close()
    finally:
        del REWARD_TERMS["base_height_test"]


@pytest.mark.parametrize("register, name", [(reward_term, "torques"),
                                            (observation_term, "joint_pos"),
                                            (termination_term, "tilt")])
def test_a_name_registered_twice_is_an_error(register, name):
    with pytest.raises(ValueError, match=f"term '{name}' is already registered"):
        register(name)(lambda *args: None)


def test_task_modules_are_imported_before_the_env_is_built(tmp_path, monkeypatch):
    """A user's terms live in their own module; the config names it, so replays find it."""
    (tmp_path / "my_terms.py").write_text(
        "from locomotion.tasks.rewards import reward_term\n"
        "@reward_term('my_upright')\n"
        "def my_upright(c):\n"
        "    return -c.w.gravity[:, 2]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        env = make_env(load_config("env", ["num_envs=4", "+task.modules=[my_terms]",
                                           "+task.rewards.weights.my_upright=1.0"]))
        assert "my_upright" in env.task.reward_weights
        env.close()
    finally:
        REWARD_TERMS.pop("my_upright", None)
    with pytest.raises(ValueError, match="task.modules: cannot import 'no_such_module'"):
        make_env(load_config("env", ["num_envs=4", "+task.modules=[no_such_module]"]))


def test_a_robot_on_its_back_reads_fallen_where_orientation_reads_upright():
    """Without terminations a robot may lie on its back, where the projected gravity's xy
    part is 0 again: ``fallen`` still reads 1 there, and the clip of negative totals
    leaves it out, so lying down costs its weight whatever the other terms."""
    env = make_env(load_config("env", [
        "num_envs=4", "reset=sync", "task.terminations.base_contact=false",
        "task.terminations.max_tilt=4.0", "task.rewards.weights.fallen=-3.0"]))
    env.reset()
    env.sim.qpos[1, 3:7] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # rolled by pi
    _, _, terminated, _, _ = env.step(torch.zeros(4, env.num_actions))
    assert not terminated.any()
    reward, terms = env.task.rewards(env.task.world(env.sim), env.actions, env.actions)
    fallen = terms["fallen"] / (-3.0 * env.control_dt)
    assert fallen.tolist() == [0.0, 1.0, 0.0, 0.0]
    tipped = terms["orientation"][1] / (env.task.reward_weights["orientation"] * env.control_dt)
    assert tipped < 0.01  # |g_xy|^2 of a robot on its back
    others = sum(t for name, t in terms.items() if name != "fallen")
    torch.testing.assert_close(reward, others.clamp(min=0.0) + terms["fallen"])
    assert reward[1] < 0 and (reward[[0, 2, 3]] > 0).all()
    env.close()
