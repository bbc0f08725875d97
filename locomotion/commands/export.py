"""Export a checkpoint for deployment: ``locomotion-export checkpoint=PATH [out=DIR]``.

Writes policy.onnx, policy.pt (TorchScript), policy.json (the sidecar) and robot.xml to
``<run>/exported/`` (or ``out``; ``exported_<robot>`` for a shipped ``pretrained:<robot>``),
after checking the graphs against the torch policy.
Run the result without the training code: ``locomotion-deploy <dir>/policy.onnx``.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from locomotion.commands.errors import run_app, user_errors
from locomotion.export import export_checkpoint
from locomotion.robots import PRETRAINED, resolve_policy_path


@hydra.main(config_path="pkg://locomotion.configs", config_name="export", version_base="1.3")
@user_errors
def export(cfg: DictConfig) -> None:
    checkpoint, out = str(cfg.checkpoint), cfg.out
    if checkpoint.startswith(PRETRAINED) and out is None:  # never write into the package
        out = f"exported_{checkpoint[len(PRETRAINED):].split('/')[0]}"
    print(export_checkpoint(resolve_policy_path(checkpoint), out, cfg.check).summary())


def main() -> None:
    run_app(export)


if __name__ == "__main__":
    main()
