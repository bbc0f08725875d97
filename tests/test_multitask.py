"""Tests for subtasks in the env: adoption at reset, per-subtask setup, gaits, errors."""

from types import SimpleNamespace

import pytest
import torch

from locomotion.config import load_config
from locomotion.multitask import SchedulerDriver, training_hooks
from locomotion.tasks import make_env, subtasks_of
from locomotion.tasks.gaits import FREE
from locomotion.tasks.rewards import REWARD_TERMS

SMALL = ("task=multitask", "num_envs=32", "reset=sync", "terrain.levels=4",
         "terrain.curriculum.max_init_level=1", "task.episode_length_s=0.2")


@pytest.fixture
def env_with(env_from_cfg):
    """Factory ``env_with(*overrides)``: a small multitask env on the terrain grid, reset."""
    return lambda *overrides: env_from_cfg(load_config("env", [*SMALL, *overrides]))


def test_subtasks_set_terrain_commands_gait_and_pushes(env_with):
    env = env_with()
    mt, names = subtasks_of(env), subtasks_of(env).names
    sub = mt.slots.current
    counts = torch.bincount(sub, minlength=len(names))
    assert counts.sum() == env.num_envs and counts.max() - counts.min() <= 1  # an even split
    kinds = [env.terrain.column_types[c] for c in env.curriculum.columns.tolist()]
    for i, k in enumerate(sub.tolist()):
        assert kinds[i] in mt.subtasks[k].terrain
        want = FREE if mt.subtasks[k].gait == "free" else env.task.gait.index(mt.subtasks[k].gait)
        assert env.task.gait.gait[i] == want
        assert torch.equal(env.task.command_range[i], mt.subtasks[k].commands)
        assert env.randomizer.enabled["push"][i] == mt.subtasks[k].push
    cols = env.task.observation_layout(env.task.world(env.sim), env.actions)["policy"]
    onehot = env.obs["policy"][:, cols["subtask"]]
    assert onehot.shape[1] == len(names) and torch.equal(onehot.argmax(1), sub)


def test_air_time_reward_leaves_gait_envs_to_their_schedule(env_with):
    env = env_with()
    task = env.task
    task.commands[:, 0] = 0.8  # every env moving
    task.air_time.fill_(0.2)
    ctx = SimpleNamespace(task=task, first_contact=torch.ones_like(task.air_time, dtype=torch.bool))
    reward = REWARD_TERMS["feet_air_time"](ctx)
    free = task.gait.gait == FREE
    assert free.any() and (~free).any()
    assert torch.allclose(reward[free], torch.tensor(4 * (0.2 - task.air_time_target)))
    assert (reward[~free] == 0).all()


def test_env_switches_subtask_only_at_its_reset(env_with):
    env = env_with("reset=random_counter")
    before = subtasks_of(env).slots.current.clone()
    counts = torch.zeros(len(subtasks_of(env).names), dtype=torch.long)
    counts[0], counts[1] = 16, 16
    subtasks_of(env).slots.retarget(counts)
    changed = subtasks_of(env).slots.target != before
    switched = torch.zeros(env.num_envs, dtype=torch.bool)
    for _ in range(3):
        _, _, term, trunc, _ = env.step(torch.zeros(env.num_envs, env.num_actions))
        done = term | trunc
        now = subtasks_of(env).slots.current != before
        assert not (now & ~(done | switched)).any()  # nobody switched without a reset
        switched |= done & changed
    assert switched.any()


@pytest.mark.parametrize("masked", [False, True], ids=["indexed", "masked"])
def test_slot_entering_a_subtask_starts_on_a_level_of_its_own_range(env_with, masked):
    env = env_with("num_envs=64")
    mt, cur = subtasks_of(env), env.curriculum
    for k, s in enumerate(mt.subtasks):  # the first placement: over each range
        low, high = s.levels
        held = cur.levels[mt.slots.current == k]
        assert ((held >= low) & (held <= high)).all()
    assert (cur.levels > 1).any()  # beyond the grid's initial levels (max_init_level=1)
    stairs, flat = mt.names.index("stairs"), mt.names.index("flat")
    assert mt.subtasks[stairs].levels == (0, 1) and mt.subtasks[flat].levels == (0, 3)
    counts = mt.slots.counts(num_subtasks=len(mt.names))
    counts[stairs] += counts[flat]
    counts[flat] = 0
    mt.slots.retarget(counts)
    entering = mt.slots.target != mt.slots.current
    cur.levels.fill_(3)  # the top of the grid, as flat-ground slots reach by walking
    if masked:
        mt.before_reset_where(torch.ones(env.num_envs, dtype=torch.bool))
    else:
        mt.before_reset(torch.arange(env.num_envs))
    assert entering.sum() >= 7
    moved_in = cur.levels[entering]
    assert (moved_in == 0).any() and (moved_in == 1).any()   # not all on stairs' top level
    stayed = ~entering
    tops = torch.tensor([mt.subtasks[k].levels[1] for k in mt.slots.current[stayed].tolist()])
    assert torch.equal(cur.levels[stayed], tops)  # a slot that stays keeps its level, clamped


def test_gait_reward_follows_the_schedule(env_with):
    env = env_with()
    gait = env.task.gait
    trot = subtasks_of(env).names.index("trot")
    ids = (subtasks_of(env).slots.current == trot).nonzero().squeeze(1)
    desired = gait.desired_contact()
    assert torch.equal(gait.contact_match(desired)[ids], torch.ones(len(ids)))
    assert torch.equal(gait.contact_match(~desired)[ids], torch.zeros(len(ids)))
    free = (gait.gait == FREE).nonzero().squeeze(1)
    assert (gait.contact_match(desired)[free] == 0).all()
    # trot: diagonal feet (FR, RL) together, the other pair half a cycle apart
    assert torch.equal(desired[ids, 0], desired[ids, 3]) and torch.equal(
        desired[ids, 0], ~desired[ids, 1])


def test_driver_reallocates_and_logs(env_with):
    env = env_with("multitask.every=2")
    driver = SchedulerDriver(env, env.cfg.multitask)
    logs = []
    for it in range(4):
        for _ in range(10):
            *_, info = env.step(torch.zeros(env.num_envs, env.num_actions))
            if "episode" in info:
                driver.record(info["episode"])
        logs.append(driver.end_iteration(it, rollout_s=1.0))
    assert any(k.startswith("multitask/success/") for k in logs[0])
    assert "multitask/share/flat" in logs[1] and "multitask/share/flat" not in logs[0]
    shares = [logs[1][f"multitask/share/{n}"] for n in subtasks_of(env).names]
    assert sum(shares) == pytest.approx(1.0)
    target = subtasks_of(env).slots.counts("target", len(shares))
    assert int(target.sum()) == env.num_envs and (target >= 2).all()


def test_cost_aware_driver_times_every_subtask_and_allocates_by_it(env_with, monkeypatch):
    env = env_with("multitask.allocation=progress_per_cost", "multitask.every=1")
    driver = SchedulerDriver(env, env.cfg.multitask)
    priced = []
    allocate = driver.scheduler.allocate
    monkeypatch.setattr(driver.scheduler, "allocate", lambda cost: priced.append(cost)
                        or allocate(cost))
    env.step(torch.zeros(env.num_envs, env.num_actions))
    log = driver.end_iteration(0, rollout_s=1.0)
    names = subtasks_of(env).names
    timed = torch.tensor([log[f"multitask/physics_us/{n}"] for n in names])
    assert (timed > 0).all() and torch.allclose(1e6 * priced[0], timed.double())
    assert int(subtasks_of(env).slots.counts("target", len(names)).sum()) == env.num_envs
    plain = SchedulerDriver(env, load_config("env", list(SMALL)).multitask)
    assert plain.physics is None and not any("physics_us" in k for k in
                                             plain.end_iteration(9, rollout_s=1.0))


def test_driver_leaves_partial_episodes_out(env_with):
    env = env_with()
    driver = SchedulerDriver(env, env.cfg.multitask)
    # two flat episodes that timed out and tracked: one begun before training, one whole
    driver.record({"subtask": torch.tensor([0, 0]), "success": torch.tensor([1.0, 1.0]),
                   "checks": torch.ones(2, 3), "gait_match": torch.zeros(2),
                   "partial": torch.tensor([1.0, 0.0])})
    log = driver.end_iteration(0, rollout_s=1.0)
    assert log["multitask/episodes/flat"] == 1 and log["multitask/success/flat"] == 1.0


def test_driver_logs_which_check_failed(env_with):
    env = env_with()
    driver = SchedulerDriver(env, env.cfg.multitask)
    trot = subtasks_of(env).names.index("trot")
    # three trot episodes: all survived, two tracked, one kept the gait, none did both
    driver.record({"subtask": torch.full((3,), trot), "success": torch.zeros(3),
                   "checks": torch.tensor([[1.0, 1, 0], [1, 1, 0], [1, 0, 1]]),
                   "gait_match": torch.tensor([0.5, 0.6, 0.9]), "partial": torch.zeros(3)})
    flat = subtasks_of(env).names.index("flat")
    driver.record({"subtask": torch.tensor([flat]), "success": torch.ones(1),
                   "checks": torch.ones(1, 3), "gait_match": torch.zeros(1),
                   "partial": torch.zeros(1)})
    log = driver.end_iteration(0, rollout_s=1.0)
    assert log["multitask/success/trot"] == 0.0 and log["multitask/survived/trot"] == 1.0
    assert log["multitask/tracked/trot"] == pytest.approx(2 / 3)
    assert log["multitask/on_gait/trot"] == pytest.approx(1 / 3)
    assert log["multitask/gait_match/trot"] == pytest.approx(2 / 3)
    assert "multitask/gait_match/flat" not in log  # free gait: no schedule to match
    assert "multitask/tracked/pace" not in log  # no pace episodes this iteration


@pytest.mark.parametrize("override, match", [
    ("+multitask.subtasks.flat.gait=gallop", r"unknown gait 'gallop'.*trot"),
    ("multitask.subtasks.flat.terrain=[lava]", r"unknown terrain \['lava'\].*stairs_up"),
    ("+multitask.subtasks.flat.levels=[0,9]", "levels"),
])
def test_bad_subtask_is_a_clear_error(env_with, override, match):
    with pytest.raises(ValueError, match=match):
        env_with(override)


def test_subtask_observation_needs_subtasks():
    cfg = load_config("env", ["num_envs=4", "+task.observations.policy.subtask=1.0"])
    with pytest.raises(ValueError, match="needs subtasks"):
        make_env(cfg)


@pytest.mark.slow
def test_multitask_training_logs_allocation_and_resumes_exactly(tmp_path):
    from locomotion.rl.runner import Runner

    small = [*SMALL, "num_envs=16", "algo.num_steps=8", "multitask.every=2",
             "algo.policy.actor_hidden_dims=[32,32]", "algo.policy.critic_hidden_dims=[32,32]",
             "logging.tensorboard=false", "logging.save_interval=2", "reset=staggered"]

    def runner(name):
        cfg = load_config("train", small)
        env = make_env(cfg)
        return Runner(env, cfg, log_dir=tmp_path / name, hooks=training_hooks(env, cfg))

    straight = runner("a")
    straight.learn(4)
    first = runner("b")
    first.learn(2)
    resumed = runner("c")
    resumed.load(first.checkpoint_path)
    resumed.learn(2)
    params = [torch.cat([p.flatten() for p in r.policy.parameters()]) for r in (straight, resumed)]
    assert torch.equal(*params)
    assert torch.equal(straight.hooks["scheduler"].scheduler.allocation,
                       resumed.hooks["scheduler"].scheduler.allocation)
    assert torch.equal(subtasks_of(straight.env).slots.target,
                       subtasks_of(resumed.env).slots.target)
    rows = (tmp_path / "a" / "progress.jsonl").read_text().splitlines()
    assert "multitask/share/trot" in rows[1] and "multitask/share/trot" not in rows[0]
