"""Every trainer example of the README's "Using the env from other trainers" runs as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "## Using the env from other trainers"


def examples() -> dict[str, str]:
    """The section's Python blocks, by the trainer each imports first."""
    text = README.read_text()
    start = text.index(SECTION)
    section = text[start:text.index("\n## ", start + len(SECTION))]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    return {re.search(r"(?:from|import) (\w+)", b).group(1): b for b in blocks}


def test_the_section_has_an_example_per_trainer():
    assert set(examples()) == {"stable_baselines3", "gymnasium", "rsl_rl"}


@pytest.mark.subprocess
@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["stable_baselines3", "gymnasium", "rsl_rl"])
def test_readme_example_runs(trainer, tmp_path):
    pytest.importorskip(trainer)
    env = {**os.environ, "SB3_LOGDIR": str(tmp_path / "sb3")}  # not a folder in the temp dir
    run = subprocess.run([sys.executable, "-c", examples()[trainer]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-4000:]
    assert "Traceback" not in run.stderr
