"""Task definitions: commands, observations, rewards and terminations, by config name."""

from tasks.velocity import VelocityTask

TASKS = {"flat_velocity": VelocityTask, "rough": VelocityTask,  # rough: on a terrain grid
         "multitask": VelocityTask}  # rough + gaits + subtask one-hot (configs/multitask)


def task_class(name: str):
    """The task class registered under ``name``; an unknown name lists the valid ones."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid tasks: {sorted(TASKS)}")
    return TASKS[name]
