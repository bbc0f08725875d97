"""Policy evaluation: episode metrics now; robustness sweeps and reports build on them."""

from locomotion.evaluation.episodes import evaluate_episodes, walks

__all__ = ["evaluate_episodes", "walks"]
