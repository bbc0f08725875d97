"""Batched environments, reset schedules and adapters to other trainers' interfaces."""

from locomotion.envs.reset_schedule import PhaseHistogram, ResetSchedule
from locomotion.envs.vec_env import LocomotionEnv

__all__ = ["LocomotionEnv", "PhaseHistogram", "ResetSchedule"]
