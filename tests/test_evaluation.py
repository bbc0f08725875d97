"""Tests for the robustness evaluator: statistics, suites, policy loading, reproducibility."""

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from locomotion.config import CONFIG_DIR, config_group, load_config, replay_config
from locomotion.evaluation.failure_clips import FailureClips
from locomotion.evaluation.metrics import robustness_margin, wilson_interval
from locomotion.evaluation.policies import Policy, PolicyLoadError, load_policies, load_policy
from locomotion.evaluation.report import markdown
from locomotion.evaluation.robustness import evaluate
from locomotion.evaluation.rollouts import BatchRunner, batch_config
from locomotion.evaluation.suite import Suite, SuiteError, plan_batches
from locomotion.evaluation.video import gif_bytes, webp_bytes
from locomotion.tasks import make_env

ROOT = Path(__file__).resolve().parents[1]
PRETRAINED = ROOT / "robots" / "go1" / "pretrained"
NATIVE = config_group("sim", "native")


def tiny_suite(sweeps: dict, grids: dict | None = None, **settings) -> Suite:
    """The default suite's settings with short episodes, few slots and the given axes."""
    cfg = OmegaConf.load(CONFIG_DIR / "eval" / "default.yaml")
    cfg.merge_with({"episodes_per_level": 16, "episode_length_s": 2.0, "push": {"time_s": 0.5},
                    **settings})
    cfg.sweeps = sweeps
    cfg.grids = grids or {}
    return Suite(cfg)


@pytest.fixture(scope="module")
def standing() -> Policy:
    """Zero actions: the robot holds its default pose (stands) and never steps."""
    return Policy("stand", "scripted", "scripted", "", 48, 12, load_config("env"),
                  lambda obs: torch.zeros(obs.shape[0], 12, device=obs.device))


# ---------------------------------------------------------------------- statistics
@pytest.mark.parametrize("k, n, low, high", [
    (0, 10, 0.0, 0.2775),      # z^2/n / (1 + z^2/n) with z = 1.96
    (10, 10, 0.7225, 1.0),
    (5, 10, 0.2366, 0.7634),   # 0.5 -+ 1.96/1.3841 * sqrt(0.025 + 0.0096)
    (90, 100, 0.8256, 0.9448),
])
def test_wilson_interval_matches_hand_computed_values(k, n, low, high):
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4) and hi == pytest.approx(high, abs=1e-4)


def test_margin_walks_from_nominal_in_the_harder_direction():
    levels = [0.0, 1.0, 2.0, 3.0]
    up = robustness_margin(levels, [1.0, 0.95, 0.5, 0.95], 0.0, "up", 0.9)
    assert up["value"] == 1.0 and not up["beyond"]  # stops at the first failure
    assert robustness_margin(levels, [1.0] * 4, 0.0, "up", 0.9)["beyond"]
    assert robustness_margin(levels, [0.5, 1.0, 1.0, 1.0], 0.0, "up", 0.9)["value"] is None
    both = robustness_margin([0.2, 0.5, 1.0, 1.5], [0.3, 0.95, 1.0, 0.92], 1.0, "both", 0.9)
    assert (both["low"], both["high"], both["high_beyond"]) == (0.5, 1.5, True)
    down = robustness_margin([0.5, 0.8, 1.0], [0.2, 0.9, 1.0], 1.0, "down", 0.9)
    assert down["value"] == 0.8
    no_nominal = robustness_margin([0.5, 1.0, 1.5], [1.0, 0.95, 0.4], None, "up", 0.9)
    assert no_nominal["value"] == 1.0  # from the easy end


# ---------------------------------------------------------------------- errors
def test_unknown_axis_is_a_clear_error():
    with pytest.raises(SuiteError, match=r"unknown axis \['gravity'\].*valid axes: push"):
        tiny_suite({"gravity": [1.0, 2.0]})
    with pytest.raises(SuiteError, match=r"unknown axis \['wind'\].*friction"):
        Suite(tiny_suite({"push": [0.0]}).cfg, only=["wind"])
    with pytest.raises(SuiteError, match="unknown solver profiles"):
        tiny_suite({"solver": ["fast", "accurate"]})
    with pytest.raises(SuiteError, match=r"suite.solver: unknown solver profiles \['exact'\]"):
        tiny_suite({"push": [0.0]}, solver="exact")


@pytest.mark.parametrize("name, content, match", [
    ("notes.txt", b"hello", "not a policy"),
    ("weights.pt", None, "not a policy"),
    ("policy.onnx", b"\x00\x01", "no sidecar policy.json"),
])
def test_non_policy_file_is_a_clear_error(tmp_path, name, content, match):
    path = tmp_path / name
    if content is None:
        torch.save({"weights": torch.zeros(3)}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(PolicyLoadError, match=match) as err:
        load_policy(path)
    assert name in str(err.value) and "expected" in str(err.value).lower()
    with pytest.raises(PolicyLoadError, match="does not exist"):
        load_policy(tmp_path / "missing.pt")


# ---------------------------------------------------------------------- policies
def test_checkpoint_and_onnx_export_act_the_same():
    ckpt, onnx = load_policies([str(PRETRAINED / "checkpoint.pt"),
                                str(PRETRAINED / "policy.onnx")])
    assert (ckpt.label, onnx.label) == ("pretrained (checkpoint)", "pretrained (onnx)")
    env = make_env(replay_config(ckpt.train_config, 32, 0))
    try:
        frames = [env.reset()["policy"]]
        for _ in range(10):  # realistic observations: the policy's own walk
            obs, *_ = env.step(ckpt.act(frames[-1]))
            frames.append(obs["policy"])
    finally:
        env.close()
    obs = torch.cat(frames)
    assert torch.allclose(ckpt.act(obs), onnx.act(obs), atol=1e-5)
    # the env rebuilt from the sidecar is the checkpoint's env (same observation layout)
    assert onnx.train_config.task.observations.policy == ckpt.train_config.task.observations.policy


# ---------------------------------------------------------------------- runs
def test_standing_policy_survives_no_push_and_falls_under_a_large_one(standing):
    suite = tiny_suite({"push": [0.0, 4.0]})
    report, _ = evaluate([standing], suite, seed=0, sim=NATIVE)
    rows = report["sweeps"]["push"]["policies"]["stand"]["levels"]
    assert rows[0]["survival"] == 1.0 and rows[0]["episodes"] == 16
    assert rows[1]["survival"] <= 0.2
    margin = report["sweeps"]["push"]["policies"]["stand"]["margin"]
    assert margin["value"] == 0.0 and not margin["beyond"]
    assert rows[0]["recovered"] is None  # nothing pushed at 0 m/s


def test_video_keeps_the_seconds_before_each_levels_first_failure(standing):
    """push 4 m/s knocks the standing robot over; push 0 never fails, so it gets no clip."""
    suite = tiny_suite({"push": [0.0, 4.0]})
    got = []
    evaluate([standing], suite, seed=0, sim=NATIVE,
             clips=lambda policy, cond, env, states: got.append((cond, env.model.nq, states)))
    assert [cond for cond, *_ in got] == [(("push", 4.0),)]
    _, nq, states = got[0]
    assert states.shape[1] == nq and 0.5 / 0.02 < len(states) <= 3.0 / 0.02  # after the push
    up = 1 - 2 * (states[:, 4] ** 2 + states[:, 5] ** 2)  # cos(tilt) from the base quaternion
    assert up[0] > 0.99 and up[-1] < 0.8  # upright, then tipping over: the failure


def test_failure_window_is_in_time_order_and_taken_once_per_condition():
    clips = FailureClips(num_envs=4, nq=1, steps=3, condition_of=torch.tensor([0, 0, 1, 1]))
    for t in range(5):
        clips.record(torch.full((4, 1), float(t)) + torch.arange(4)[:, None] * 10)
    clips.failed(torch.tensor([1]))
    clips.failed(torch.tensor([0, 3]))  # condition 0 has its clip already
    assert clips.states[0][:, 0].tolist() == [12.0, 13.0, 14.0]  # env 1, steps 2..4
    assert clips.states[1][:, 0].tolist() == [32.0, 33.0, 34.0]
    assert set(clips.states) == {0, 1}


def test_gif_writer_keeps_every_frame():
    from PIL import Image

    frames = [np.full((24, 32, 3), 20 * i, dtype=np.uint8) for i in range(6)]
    gif = Image.open(io.BytesIO(gif_bytes(frames, fps=10.0)))
    assert gif.n_frames == 6 and gif.size == (32, 24)
    assert gif.info["duration"] == 100


def test_webp_writer_keeps_every_frame_in_colour():
    from PIL import Image

    frames = [np.full((24, 32, 3), (20 * i, 100, 200 - 20 * i), dtype=np.uint8)
              for i in range(6)]
    clip = Image.open(io.BytesIO(webp_bytes(frames, fps=10.0)))
    assert clip.n_frames == 6 and clip.size == (32, 24) and clip.info["loop"] == 0
    clip.seek(3)
    colour = np.asarray(clip.convert("RGB")).mean(axis=(0, 1))  # reading the frame sets info
    assert clip.info["duration"] == 100
    assert np.abs(colour - (60, 100, 140)).max() < 4


def test_same_seed_gives_identical_report(standing, tmp_path):
    """Every event kind in one batch (two rounds), run twice: byte-identical report.json."""
    suite = tiny_suite({"friction": [0.3, 1.0], "payload": [3.0], "strength": [0.7],
                        "latency": [40.0], "noise": [2.0], "command": [0.5]},
                       {"pf": {"push": [0.0, 2.0], "friction": [0.5, 1.0]}},
                       episodes_per_level=6, max_envs=30, episode_length_s=1.0)
    texts = []
    for _ in range(2):
        report, _ = evaluate([standing], suite, seed=3, sim=NATIVE)
        texts.append(json.dumps(report, indent=1))
    assert texts[0] == texts[1]
    report = json.loads(texts[0])
    assert report["sweeps"]["friction"]["policies"]["stand"]["levels"][0]["episodes"] == 6
    assert "stand" in markdown(report)
    other, _ = evaluate([standing], suite, seed=4, sim=NATIVE)
    assert json.dumps(other, indent=1) != texts[0]


@pytest.mark.subprocess
@pytest.mark.slow
def test_command_line_writes_report_and_figures(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "eval"
    cmd = [sys.executable, str(ROOT / "scripts" / "evaluate.py"),
           f"policy=[{PRETRAINED / 'checkpoint.pt'},{PRETRAINED / 'policy.onnx'}]",
           "labels=[torch,onnx]", "suite=default", "axes=[push]", "episodes_per_level=4",
           "suite.episode_length_s=1.0", "suite.push.time_s=0.5", f"out={out}"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "report.json").read_text())
    assert [p["label"] for p in report["policies"]] == ["torch", "onnx"]
    assert str(ROOT) not in (out / "report.json").read_text()  # no machine paths
    assert (out / "sweep_push.png").stat().st_size > 0
    assert "## push speed (m/s)" in (out / "report.md").read_text()
    bad = subprocess.run([*cmd[:2], f"policy={PRETRAINED / 'policy.json'}", f"out={out}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "policy.json is not a policy" in bad.stderr


@pytest.mark.warp
@pytest.mark.slow
def test_warp_backend_runs_the_same_suite(standing):
    """sim=warp (here on Warp's CPU device) takes the same path: pushes topple, none do not."""
    pytest.importorskip("mujoco_warp")
    suite = tiny_suite({"push": [0.0, 4.0]}, episodes_per_level=8, episode_length_s=1.5)
    report, _ = evaluate([standing], suite, seed=0, sim=config_group("sim", "warp"))
    rows = report["sweeps"]["push"]["policies"]["stand"]["levels"]
    assert report["sim"] == {"backend": "warp", "device": "cpu"}
    assert rows[0]["survival"] == 1.0 and rows[1]["survival"] <= 0.25


def test_terrain_axis_spawns_on_the_named_types_and_counts_who_got_far(standing):
    suite = tiny_suite({"terrain": [0, 9]}, episodes_per_level=12, episode_length_s=1.0,
                       terrain_types=["stairs_up"], reach=0.5)
    assert suite.terrain_types == ("stairs_up",) and suite.reach == 0.5
    batch = plan_batches(suite.conditions({}).values(), "fast")[0]
    runner = BatchRunner(standing, batch, suite, 0, NATIVE, "cpu")
    try:
        cur = runner.env.curriculum
        kinds = {cur.terrain.column_types[c] for c in cur.columns.tolist()}
        assert kinds == {"stairs_up"} and set(cur.levels.tolist()) == {0, 9}
    finally:
        runner.close()
    report, _ = evaluate([standing], suite, seed=0, sim=NATIVE)
    rows = report["sweeps"]["terrain"]["policies"]["stand"]["levels"]
    assert [r["reached"] for r in rows] == [0.0, 0.0]  # standing still gets nowhere
    assert "reached ≥ 0.5 m" in markdown(report) and "tiles of stairs_up only" in markdown(report)


def test_unknown_terrain_type_or_bad_reach_is_a_clear_error():
    with pytest.raises(SuiteError, match=r"unknown \['stairs'\]; terrain 'rough' has types"):
        tiny_suite({"terrain": [0]}, terrain_types=["stairs"])
    with pytest.raises(SuiteError, match="suite.reach must be > 0 m"):
        tiny_suite({"terrain": [0]}, reach=-1.0)


def test_suite_commands_hold_for_policies_trained_with_heading_commands():
    cfg = load_config("env", ["task=rough"])
    policy = Policy("rough", "scripted", "scripted", "", 235, 12, cfg,
                    lambda obs: torch.zeros(obs.shape[0], 12, device=obs.device))
    suite = tiny_suite({"command": [0.5]})
    env_cfg = batch_config(policy, plan_batches(suite.conditions({}).values(), "fast")[0],
                           suite, 4, 0, NATIVE, "cpu")
    assert cfg.task.commands.heading and not env_cfg.task.commands.get("heading")


def test_actuator_velocities_follow_tendons_as_well_as_joints():
    """The dm_control quadruped drives 16 joints with 12 actuators, 8 of them on tendons
    coupling several joints: the layout's moment arms give MuJoCo's actuator velocities."""
    import mujoco
    import numpy as np

    env = make_env(load_config("env", ["robot=dmc_quadruped", "num_envs=1"]))
    try:
        model, layout = env.model, env.layout
        assert layout.actuator_moment.shape == (12, model.nv)
        data = mujoco.MjData(model)
        data.qvel[:] = np.random.default_rng(0).normal(size=model.nv)
        mujoco.mj_forward(model, data)
        np.testing.assert_allclose(layout.actuator_moment @ data.qvel,
                                   data.actuator_velocity[layout.actuator_ids], atol=1e-12)
    finally:
        env.close()


def test_evaluates_a_checkpoint_of_a_robot_with_fewer_actuators_than_joints(tmp_path):
    """robot=dmc_quadruped: energy sums actuator force x actuator velocity (12 of each), not
    actuator forces against the 16 joint velocities."""
    from locomotion.rl.runner import Runner

    cfg = load_config("train", [
        "robot=dmc_quadruped", "num_envs=16", "algo.num_steps=8", "reset=sync",
        "task.episode_length_s=0.5", "algo.policy.actor_hidden_dims=[32,32]",
        "algo.policy.critic_hidden_dims=[32,32]", "logging.tensorboard=false"])
    runner = Runner(make_env(cfg), cfg, log_dir=tmp_path / "dmc")
    try:
        runner.learn(1)
    finally:
        runner.env.close()
    policy = load_policy(runner.checkpoint_path, label="dmc")
    suite = tiny_suite({"push": [0.0, 1.0]}, episodes_per_level=4, max_envs=8,
                       episode_length_s=1.0)
    report, _ = evaluate([policy], suite, seed=0, sim=NATIVE)
    rows = report["sweeps"]["push"]["policies"]["dmc"]["levels"]
    assert [r["episodes"] for r in rows] == [4, 4]
    assert all(0 < r["cost_of_transport"] < float("inf") for r in rows)


# ---------------------------------------------------------------------- joint dynamics, models
def test_joint_dynamics_and_contact_axes_set_every_joint_of_their_slots(standing):
    """damping, frictionloss, armature and contact set their level on every joint (or foot
    contact) of their slots and leave the rest at the model's values."""
    suite = tiny_suite({"damping": [0.05, 2.0], "armature": [0.02], "contact": [0.04]},
                       episodes_per_level=4, episode_length_s=1.0)
    nominal = {"damping": 0.05, "armature": None, "contact": 0.02}
    where = suite.conditions(nominal)
    assert where[("damping", 0.05)] == ()  # the model's own damping: nominal, run once
    (batch,) = plan_batches(where.values(), "fast")
    runner = BatchRunner(standing, batch, suite, 0, NATIVE, "cpu")
    try:
        env, models = runner.env, runner.env.sim.models
        dofs = env.layout.joint_qvel
        ground, foot = env.model.geom("ground").id, env.model.geom(env.spec.feet[0]).id
        for i, cond in enumerate(batch.conditions):
            m = models[int(runner._slots(i)[0])]
            levels = dict(cond)
            assert m.dof_damping[dofs] == pytest.approx([levels.get("damping", 0.05)] * 12)
            want = [levels["armature"]] * 12 if "armature" in levels else \
                env.model.dof_armature[dofs]
            assert m.dof_armature[dofs] == pytest.approx(want)
            assert m.dof_frictionloss[dofs] == pytest.approx([0.05] * 12)
            assert m.geom_solref[[ground, foot], 0] == pytest.approx(
                [levels.get("contact", 0.02)] * 2)
    finally:
        runner.close()
    report, _ = evaluate([standing], suite, seed=0, sim=NATIVE)
    assert report["sweeps"]["damping"]["policies"]["stand"]["levels"][1]["survival"] == 1.0


def test_robot_axis_evaluates_another_mjcf_of_the_robot(standing, tmp_path):
    """robot: a team's MJCF with its own names for actuators and sites, and its own joint
    damping, builds in its own batch with joints mapped by name."""
    from tests.team_mjcf import team_go1

    xml = team_go1(tmp_path / "team_go1.xml", damping=2.0, frictionloss=0.2, armature=0.02)
    suite = tiny_suite({"robot": [str(xml)]}, grids={"robot_x_command": {
        "robot": [str(xml)], "command": [0.0, 0.5]}}, episodes_per_level=4,
        episode_length_s=1.0)
    batches = plan_batches(suite.conditions({}).values(), "fast")
    assert [b.robot for b in batches] == [str(xml)]
    runner = BatchRunner(standing, batches[0], suite, 0, NATIVE, "cpu")
    try:
        dofs = runner.env.layout.joint_qvel
        assert runner.env.model.dof_damping[dofs] == pytest.approx([2.0] * 12)
        assert runner.env.model.nu == 12 and runner.env.model.site("imu").id >= 0
    finally:
        runner.close()
    report, _ = evaluate([standing], suite, seed=0, sim=NATIVE)
    rows = report["sweeps"]["robot"]["policies"]["stand"]["levels"]
    assert rows[0]["survival"] == 1.0 and rows[0]["episodes"] == 4
    assert "team_go1.xml" in markdown(report)
    with pytest.raises(SuiteError, match="do not exist"):
        tiny_suite({"robot": [str(tmp_path / "nope.xml")]})
