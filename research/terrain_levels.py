"""Where a terrain run's envs stand on the curriculum: level per terrain type at a checkpoint.

    python -m research.terrain_levels runs/<run>/checkpoints/latest.pt

The curriculum moves an env up a level when it walks more than half a tile from its spawn
point and down when it covers less than half its commanded distance, so the level an env
holds is the difficulty its policy copes with on that terrain type. Prints, per type, the
mean level, the share of envs at or above the middle level, and what that level means
(step height, slope, roughness). The last line is one JSON object.
"""

from __future__ import annotations

import json
import sys

import torch

from locomotion.rl.checkpoint import load_checkpoint
from locomotion.sim.terrain import TerrainGrid

DIFFICULTY_KEYS = ("step_height", "slope", "noise", "height")


def main(path: str) -> None:
    data = load_checkpoint(path)
    cfg = data["config"]
    if not cfg.get("terrain") or cfg["terrain"].get("name", "flat") == "flat":
        sys.exit(f"{path} was trained on flat ground: it has no terrain levels")
    state = data["env"].get("terrain")
    if state is None:
        sys.exit(f"{path} holds no env state (a policy-only export): use the run's latest.pt")
    grid = TerrainGrid(cfg["terrain"])
    levels, columns = state["levels"].cpu(), state["columns"].cpu()
    middle = (grid.levels - 1) // 2 + (grid.levels - 1) % 2
    print(f"{path}: iteration {data['iteration']}, {data['env_steps']:,} env steps; "
          f"levels 0..{grid.levels - 1}, middle = {middle}")
    rows = {}
    for kind in dict.fromkeys(grid.column_types):
        on = torch.tensor([grid.column_types[c] == kind for c in columns.tolist()])
        lv = levels[on].float()
        params = grid.params[kind]
        key = next((k for k in DIFFICULTY_KEYS if k in params), None)
        at_middle = None
        if key is not None:
            low, high = (float(v) for v in params[key])
            at_middle = low + (high - low) * grid.difficulty(middle)
        rows[kind] = {"envs": int(on.sum()), "mean_level": float(lv.mean()),
                      "share_at_or_above_middle": float((lv >= middle).float().mean()),
                      "difficulty_key": key, "middle_level_value": at_middle}
        what = f"{key} {at_middle:.3g} at the middle level" if key else ""
        print(f"{kind:>12}: {rows[kind]['envs']:4d} envs, mean level "
              f"{rows[kind]['mean_level']:.2f}, at or above middle "
              f"{100 * rows[kind]['share_at_or_above_middle']:.0f} %  {what}")
    print(json.dumps({"checkpoint": path, "iteration": data["iteration"],
                      "env_steps": data["env_steps"], "middle_level": middle, "types": rows}))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
