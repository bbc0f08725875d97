"""Every bad input to a command ends in one line naming it and what to do, and exit code 2.

Each case runs the real command in a child process: ``error: ...`` alone on stderr, no
traceback, and no run folder left behind. One small checkpoint (and its export) serves all.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from locomotion.config import robot_name
from locomotion.robots import ROBOTS_DIR

TRAIN = ["num_envs=16", "max_iterations=1", "algo.num_steps=8", "export=false",
         "logging.tensorboard=false", "torch_threads=1"]
NO_CUDA = torch.version.cuda is None and not torch.cuda.is_available()

# Run the player as if onnxruntime were not installed: its import fails as for a missing one.
WITHOUT_ONNXRUNTIME = ("import runpy, sys\n"
                       "sys.modules['onnxruntime'] = None\n"
                       "sys.argv = {argv!r}\n"
                       "runpy.run_module('locomotion.commands.deploy', run_name='__main__', "
                       "alter_sys=True)\n")


def run(module: str, *args: str, cwd: Path, code: str | None = None):
    command = [sys.executable, "-c", code] if code else [sys.executable, "-m", module, *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """A one-iteration checkpoint (outside any run folder), a broken MJCF and spec, and an
    export with a broken copy per deploy case."""
    tmp = tmp_path_factory.mktemp("bad_input")
    # the checkpoint's robot is named by the path of a copy of go1's spec: the run folder
    # takes the spec's robot name, not the path
    robot = tmp / "my robot" / "spec.yaml"
    robot.parent.mkdir()
    for name in ("spec.yaml", "go1.xml"):
        shutil.copy(ROBOTS_DIR / "go1" / name, robot.parent / name)
    train = run("locomotion.commands.train", *TRAIN, f"robot.spec={robot}", cwd=tmp)
    assert train.returncode == 0, train.stdout + train.stderr
    (run_dir,) = (tmp / "runs").iterdir()
    assert re.fullmatch(r"[\d-]+_[\d-]+_go1_flat_velocity", run_dir.name), run_dir.name
    checkpoint = tmp / "checkpoint.pt"
    shutil.copy(run_dir / "checkpoints" / "latest.pt", checkpoint)

    bad_xml = tmp / "bad_xml" / "spec.yaml"
    shutil.copytree(robot.parent, bad_xml.parent)
    xml = (bad_xml.parent / "go1.xml").read_text().splitlines()
    xml[64] = xml[64].replace(">", " oops>", 1)  # MuJoCo: parse error at line 65
    (bad_xml.parent / "go1.xml").write_text("\n".join(xml))
    bad_spec = tmp / "bad_spec" / "spec.yaml"
    shutil.copytree(robot.parent, bad_spec.parent)
    bad_spec.write_text("name: go1\njoints: [FR_hip_joint,\n")

    paths = {"tmp": tmp, "checkpoint": checkpoint, "bad_xml": bad_xml, "bad_spec": bad_spec}
    try:
        import onnxruntime  # noqa: F401

        from locomotion.export import export_checkpoint
    except ImportError:
        return paths  # the deploy cases skip
    export = export_checkpoint(checkpoint, tmp / "export").out_dir
    paths["export"] = export / "policy.onnx"
    edits = {"corrupt_onnx": None, "no_joints": lambda s: s.pop("joints"),
             "no_observation": lambda s: s.pop("observation"), "bad_json": None,
             "short_joints": lambda s: s.update(joints=s["joints"][:-1])}
    for case, edit in edits.items():
        folder = shutil.copytree(export, tmp / case)
        sidecar = folder / "policy.json"
        if edit is not None:
            data = json.loads(sidecar.read_text())
            edit(data)
            sidecar.write_text(json.dumps(data))
        paths[case] = folder / "policy.onnx"
    (tmp / "corrupt_onnx" / "policy.onnx").write_bytes(b"not a protobuf")
    (tmp / "bad_json" / "policy.json").write_text('{"format": "locomotion-policy",')
    return paths


# case: (command, arguments ({name} is a path of the fixture), what the line must contain)
CASES = {
    "num_envs": ("train", ["num_envs=abc"], ["num_envs='abc'", "num_envs=<int >= 1>"]),
    "seed": ("train", ["seed=abc"], ["seed='abc'", "seed=<int>"]),
    "max_iterations": ("train", ["max_iterations=abc"], ["max_iterations='abc'"]),
    "learning_rate": ("train", ["algo.ppo.learning_rate=abc"],
                      ["algo.ppo.learning_rate='abc'", "<number > 0>"]),
    "save_interval": ("train", ["logging.save_interval=0"], ["logging.save_interval=0"]),
    "negative_iterations": ("train", ["max_iterations=-5"], ["max_iterations=-5"]),
    "cuda": ("train", ["device=cuda"],
             ["device='cuda'", *(["has no CUDA", "pip install torch"] if NO_CUDA else [])]),
    "symmetry": ("train", ["algo.symmetry=maybe"],
                 ["algo.symmetry='maybe'", "algo.symmetry=<true | false | auto>"]),
    "activation": ("train", ["algo.policy.activation=swish"], ["activation 'swish'", "elu"]),
    "resume_randomization": ("train", ["resume={checkpoint}", "randomization=robust"],
                             ["{checkpoint}", "randomization=none"]),
    "resume_sizes": ("train", ["resume={checkpoint}", "algo.policy.actor_hidden_dims=[64,64]"],
                     ["{checkpoint}", "algo.policy.actor_hidden_dims=[128,128,128]"]),
    "bad_mjcf": ("train", ["robot.spec={bad_xml}"], ["go1.xml", "line number=65"]),
    "bad_spec": ("train", ["robot.spec={bad_spec}"], ["{bad_spec}", "not valid yaml"]),
    "play_no_checkpoint": ("play", [], ["checkpoint", "checkpoint=<path>"]),
    "play_missing_checkpoint": ("play", ["checkpoint={tmp}/missing.pt"], ["missing.pt"]),
    "evaluate_missing_policy": ("evaluate", ["policy={tmp}/missing.pt"], ["missing.pt"]),
    "export_bad_check": ("export", ["checkpoint={checkpoint}", "check.num_envs=0"],
                         ["check.num_envs=0"]),
    "deploy_corrupt_onnx": ("deploy", ["{corrupt_onnx}"], ["policy.onnx", "export"]),
    "deploy_no_joints": ("deploy", ["{no_joints}"], ["policy.json", "joints"]),
    "deploy_no_observation": ("deploy", ["{no_observation}"], ["policy.json", "observation"]),
    "deploy_bad_json": ("deploy", ["{bad_json}"], ["policy.json", "not valid json"]),
    "deploy_short_joints": ("deploy", ["{short_joints}"], ["policy.json", "11 joints"]),
    "deploy_without_onnxruntime": ("deploy", ["{export}"], ["pip install onnxruntime"]),
}


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_and_exit_code_2(inputs, case):
    command, args, expected = CASES[case]
    if command == "deploy" and "export" not in inputs:
        pytest.skip("needs onnxruntime and onnx (pip install -e '.[export]')")
    fill = {k: str(v) for k, v in inputs.items()}
    args = [a.format(**fill) for a in args]
    cwd = inputs["tmp"] / f"cwd_{case}"
    cwd.mkdir()
    if command == "deploy":
        code = (WITHOUT_ONNXRUNTIME.format(argv=["locomotion-deploy", *args])
                if case == "deploy_without_onnxruntime" else None)
        done = run("locomotion.commands.deploy", *args, "--episodes", "1", cwd=cwd, code=code)
    else:
        extra = TRAIN if command == "train" else []
        done = run(f"locomotion.commands.{command}", *extra, *args, cwd=cwd)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith("error: "), line
    for text in expected:
        assert text.format(**fill).lower() in line.lower(), line
    assert not any(cwd.iterdir()), f"left behind: {list(cwd.rglob('*'))}"


@pytest.mark.subprocess
@pytest.mark.slow
def test_play_without_a_video_writes_no_folder(inputs):
    cwd = inputs["tmp"] / "play"
    cwd.mkdir()
    done = run("locomotion.commands.play", f"checkpoint={inputs['checkpoint']}", "num_envs=2",
               "video=false", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["episodes"] == 2
    assert not any(cwd.iterdir()), list(cwd.rglob("*"))


def test_run_folders_are_named_by_robot_not_path(tmp_path):
    spec = tmp_path / "a b" / "spec.yaml"
    spec.parent.mkdir()
    spec.write_text("name: my/robot\n")
    assert robot_name(str(spec)) == "my_robot"
    assert robot_name(str(tmp_path / "missing" / "quad v2.yaml")) == "quad_v2"
    assert robot_name("go1") == "go1"
