"""Multitask training: the scheduler that sizes the subtasks and the hook that drives it."""

from locomotion.multitask.driver import SchedulerDriver, training_hooks
from locomotion.multitask.scheduler import Scheduler, SchedulerConfig, split_across_ranks

__all__ = ["Scheduler", "SchedulerConfig", "SchedulerDriver", "split_across_ranks",
           "training_hooks"]
