#!/usr/bin/env bash
# Train and export the committed pretrained policy (robots/go1/pretrained):
#   1. 800 iterations on the default config under domain randomization (randomization=robust);
#   2. 100 more under the fidelity solver profile, so the policy also walks where contacts
#      are stiffer (elliptic cones, impratio 100, 2 ms steps) than the fast training profile;
#   3. export (ONNX, TorchScript, sidecar, policy-only checkpoint) into robots/go1/pretrained.
# About 30 min on a quiet 2-core CPU for stage 1, 10 min for stage 2.
set -euo pipefail
cd "$(dirname "$0")/.."
python scripts/train.py randomization=robust export=false run_dir=runs/pretrained_robust
python scripts/train.py randomization=robust solver=fidelity max_iterations=900 export=false \
    resume=runs/pretrained_robust/checkpoints/latest.pt run_dir=runs/pretrained_fidelity
python scripts/export.py checkpoint=runs/pretrained_fidelity/checkpoints/latest.pt \
    out=robots/go1/pretrained
