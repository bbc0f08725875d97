"""Symmetry augmentation: the robot spec's mirror, the mirror of observations and actions
checked against the physics (a mirrored robot's observations are the mirror of the
robot's), PPO learning every mini-batch with its mirror, the errors where no mirror
exists, and a resume that turns the mirror on or off."""

import pytest
import torch

from locomotion import tasks
from locomotion.config import load_config
from locomotion.config_checks import ConfigError
from locomotion.rl.ppo import with_mirror
from locomotion.rl.runner import Runner, env_mirror, symmetry_mirror
from locomotion.rl.storage import MiniBatch
from locomotion.sim.robot_spec import RobotSpecError, load_robot_spec, parse_robot_spec


def test_go1_mirror_swaps_sides_and_flips_the_hips():
    spec = load_robot_spec("go1")
    names = [spec.joints[i] for i in spec.mirror_joints]
    assert names[:3] == ["FL_hip_joint", "FL_thigh_joint", "FL_calf_joint"]
    assert names[9:] == ["RR_hip_joint", "RR_thigh_joint", "RR_calf_joint"]
    assert [spec.joints[i] for i, s in enumerate(spec.mirror_signs) if s < 0] == [
        "FR_hip_joint", "FL_hip_joint", "RR_hip_joint", "RL_hip_joint"]
    assert [spec.feet[i] for i in spec.mirror_feet] == ["FL_foot", "FR_foot", "RL_foot",
                                                        "RR_foot"]


def raw_spec(**changes) -> dict:
    raw = {"name": "two", "mjcf": "go1.xml", "base_body": "trunk",
           "joints": ["L_hip", "R_hip"], "default_pose": {"L_hip": 0.1, "R_hip": -0.1},
           "kp": {".*": 1.0}, "kd": {".*": 1.0}, "torque_limits": {".*": 1.0},
           "action_scale": 0.25, "init_height": 0.3, "feet": ["L_foot", "R_foot"],
           "terminate_contacts": [], "mirror": {"swap": {"L_": "R_"}, "negate": ".*_hip"}}
    return {**raw, **changes}


def test_a_mirror_that_does_not_fit_the_robot_is_refused():
    spec_dir = load_robot_spec("go1").mjcf.parent
    assert parse_robot_spec(raw_spec(), spec_dir).mirror_joints == (1, 0)
    with pytest.raises(RobotSpecError, match="default pose .* is not its own mirror"):
        _ = parse_robot_spec(raw_spec(default_pose={"L_hip": 0.1, "R_hip": 0.1}),
                             spec_dir).mirror_joints
    with pytest.raises(RobotSpecError, match="'L_hip' mirrors to 'X_hip', which is not one of"):
        _ = parse_robot_spec(raw_spec(mirror={"swap": {"L_": "X_"}}), spec_dir).mirror_joints
    with pytest.raises(RobotSpecError, match=r"unknown mirror keys \['flip'\]"):
        parse_robot_spec(raw_spec(mirror={"flip": ".*"}), spec_dir)


def mirror_state(qpos: torch.Tensor, qvel: torch.Tensor, joint_qpos, joint_qvel, spec):
    """The robot's state reflected through the world's xz-plane."""
    perm, sign = torch.tensor(spec.mirror_joints), torch.tensor(spec.mirror_signs,
                                                                dtype=qpos.dtype)
    q, v = qpos.clone(), qvel.clone()
    q[:, 1] *= -1                                         # y
    q[:, 4] *= -1                                         # quaternion -> (w, -x, y, -z)
    q[:, 6] *= -1
    v[:, 1] *= -1                                         # world linear velocity y
    v[:, 3] *= -1                                         # body angular velocity x and z
    v[:, 5] *= -1
    q[:, joint_qpos] = qpos[:, joint_qpos][:, perm] * sign
    v[:, joint_qvel] = qvel[:, joint_qvel][:, perm] * sign
    return q, v


@pytest.mark.parametrize("task", ["flat_velocity", "gaits"])
def test_the_mirrored_robot_observes_the_mirror_of_what_the_robot_observes(make_env, task):
    """Env 0 starts moving in every direction (base and joint velocities, joint angles off
    the default pose); env 1 starts as its mirror image, with the mirrored command (and gait
    clock), and gets the mirror of env 0's random actions. For three control steps env 1's
    policy and critic observations are the mirror of env 0's: closer than 0.02 (scaled
    units), where a wrong sign or a swap left out is off by about the size of the values
    (0.3 and more). Later the two drift apart: the Go1 model's mass is not quite symmetric."""
    env = make_env(f"task={task}", "num_envs=2", "task.episode_length_s=5.0")
    mirror = env_mirror(env)
    gen = torch.Generator().manual_seed(0)
    q, v = env.sim.qpos.clone(), env.sim.qvel.clone()
    v[0, :6] = torch.tensor([0.4, 0.3, 0.1, 0.6, -0.5, 0.7], dtype=v.dtype)
    v[0, env.task.joint_qvel] = torch.randn(12, generator=gen, dtype=v.dtype)
    q[0, env.task.joint_qpos] += 0.2 * torch.randn(12, generator=gen, dtype=q.dtype)
    q[1:], v[1:] = mirror_state(q[:1], v[:1], env.task.joint_qpos, env.task.joint_qvel, env.spec)
    env.sim.reset(torch.tensor([0, 1]), q, v)
    cmd = torch.tensor([[0.6, 0.3, 0.5]])
    env.task.set_commands(torch.cat((cmd, cmd * torch.tensor([1.0, -1.0, -1.0]))))
    if env.task.gait is not None:
        # the same gait, half a cycle on where the mirror swaps feet of opposite phase
        # (trot, pace): each of env 1's feet then keeps the clock of env 0's mirror foot
        clock, foot = env.task.gait, env.spec.mirror_feet[0]
        offsets = clock.offsets[clock.gait[0]]
        clock.gait[1], clock.frequency[1] = clock.gait[0], clock.frequency[0]
        clock.phase[1] = (clock.phase[0] + offsets[foot] - offsets[0]) % 1.0
    for step in range(3):
        a = 0.5 * torch.randn(1, env.num_actions, generator=gen)
        obs, *_ = env.step(torch.cat((a, mirror.actions(a))))
        for group in ("policy", "critic"):
            x = obs[group]
            where = f"{group}, step {step}"
            torch.testing.assert_close(x[1:], mirror.observations(group, x[:1]), atol=0.02,
                                       rtol=0.0, msg=lambda m, where=where: f"{where}: {m}")
            wrong = (x[1:] - x[:1]).abs()  # what no mirror at all would be off by
            assert wrong.max() > 0.3


def test_ppo_learns_each_mini_batch_with_its_mirror_image(make_env):
    """with_mirror doubles a mini-batch: the first half as it was, the second mirrored
    (observations, actions, the rollout policy's means and stds), the rest repeated; its
    mirror's mirror is the batch itself."""
    env = make_env("num_envs=4")
    assert symmetry_mirror(env, False) is None
    mirror = symmetry_mirror(env, "auto")  # the default: go1 on flat ground has a mirror
    assert mirror is not None
    gen = torch.Generator().manual_seed(1)
    n, sizes = 6, env.observation_sizes
    batch = MiniBatch(obs=torch.randn(n, sizes["policy"], generator=gen),
                      critic_obs=torch.randn(n, sizes["critic"], generator=gen),
                      actions=torch.randn(n, 12, generator=gen), values=torch.randn(n, 1),
                      returns=torch.randn(n, 1), advantages=torch.randn(n, 1),
                      log_probs=torch.randn(n), action_mean=torch.randn(n, 12, generator=gen),
                      action_std=torch.rand(n, 12, generator=gen) + 0.1)
    both = with_mirror(batch, mirror)
    assert both.obs.shape == (2 * n, sizes["policy"])
    torch.testing.assert_close(both.obs[:n], batch.obs)
    torch.testing.assert_close(both.advantages[n:], batch.advantages)
    assert (both.action_std > 0).all()
    mirrored = {k: getattr(both, k)[n:] for k in MiniBatch.__dataclass_fields__}
    twice = with_mirror(MiniBatch(**mirrored), mirror)
    for k in ("obs", "critic_obs", "actions", "action_mean", "action_std"):
        torch.testing.assert_close(getattr(twice, k)[n:], getattr(batch, k))
    # a Gaussian's log-density is the same at the mirrored action under the mirrored policy
    dist = torch.distributions.Normal(batch.action_mean, batch.action_std)
    mirrored = torch.distributions.Normal(both.action_mean[n:], both.action_std[n:])
    torch.testing.assert_close(mirrored.log_prob(both.actions[n:]).sum(-1),
                               dist.log_prob(batch.actions).sum(-1))
    # without the critic's mirror (algo.ppo.mirror_critic=false) the actor's half is the
    # same and the critic keeps the rollout's samples alone
    actor_only = with_mirror(batch, mirror, critic=False)
    for k in ("obs", "actions", "advantages", "log_probs", "action_mean", "action_std"):
        torch.testing.assert_close(getattr(actor_only, k), getattr(both, k))
    for k in ("critic_obs", "values", "returns"):
        torch.testing.assert_close(getattr(actor_only, k), getattr(batch, k))


def test_symmetry_without_a_mirror_rule_is_refused_with_the_terms(make_env, capsys):
    """algo.symmetry=true refuses a task whose terms cannot be mirrored; the default (auto)
    trains it without the mirror and says why."""
    env = make_env("task=rough", "num_envs=2")
    with pytest.raises(ConfigError, match=r"\['height_scan'\] have no mirror rule"):
        symmetry_mirror(env, True)
    assert symmetry_mirror(env, "auto") is None
    assert "symmetry: off (observation terms ['height_scan']" in capsys.readouterr().out


def test_a_resume_that_changes_the_mirror_says_so(tmp_path):
    """A run resumed with another algo.symmetry than it trained with (a checkpoint from
    before the mirror was on by default) continues, and says how to learn as it did."""
    small = ["num_envs=8", "algo.num_steps=8", "task.episode_length_s=0.5", "reset=sync",
             "algo.policy.actor_hidden_dims=[32]", "algo.policy.critic_hidden_dims=[32]",
             "logging.tensorboard=false"]

    def runner(folder: str, *overrides: str) -> Runner:
        cfg = load_config("train", [*small, *overrides])
        return Runner(tasks.make_env(cfg), cfg, log_dir=tmp_path / folder)

    first = runner("a", "algo.symmetry=false")
    first.train_iteration()
    path = first.save()
    first.env.close()
    same, changed = runner("b", "algo.symmetry=false"), runner("c")
    same.load(path)
    changed.load(path)
    assert same.resume_notes == []
    assert changed.resume_notes == [
        "the checkpoint was trained with algo.symmetry=false, this run has "
        "algo.symmetry=auto; pass algo.symmetry=false to learn as it did"]
    assert changed.train_iteration()["iteration"] == 2
    same.env.close()
    changed.env.close()
