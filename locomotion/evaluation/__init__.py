"""Policy evaluation: episode metrics (play) and robustness sweeps with reports.

``scripts/evaluate.py`` runs a suite (configs/eval) through ``robustness.evaluate``:
``suite`` plans conditions and batches, ``rollouts`` runs them, ``metrics`` summarizes,
``report`` and ``plots`` write report.json, report.md and figures.
"""

from locomotion.evaluation.episodes import evaluate_episodes, walks

__all__ = ["evaluate_episodes", "walks"]
