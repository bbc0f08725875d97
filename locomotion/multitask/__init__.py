"""Multitask training: subtasks, their env slots, and the scheduler that sizes them."""

from locomotion.multitask.scheduler import Scheduler, SchedulerConfig, split_across_ranks
from locomotion.multitask.slots import SubtaskSlots

__all__ = ["Scheduler", "SchedulerConfig", "SubtaskSlots", "split_across_ranks"]
