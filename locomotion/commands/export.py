"""Export a checkpoint for deployment: ``locomotion-export checkpoint=PATH [out=DIR]``.

Writes policy.onnx, policy.pt (TorchScript), policy.json (the sidecar) and robot.xml to
``<run>/exported/`` (or ``out``), after checking the graphs against the torch policy.
Run the result without the training code: ``locomotion-deploy <dir>/policy.onnx``.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from locomotion.commands.errors import run_app, user_errors
from locomotion.export import export_checkpoint


@hydra.main(config_path="pkg://locomotion.configs", config_name="export", version_base="1.3")
@user_errors
def export(cfg: DictConfig) -> None:
    print(export_checkpoint(cfg.checkpoint, cfg.out, cfg.check).summary())


def main() -> None:
    run_app(export)


if __name__ == "__main__":
    main()
