"""Tests for the per-subtask physics cost that progress_per_cost allocates by."""

import copy
import math
from types import SimpleNamespace

import mujoco
import numpy as np
import pytest
import torch

from locomotion.multitask.cost import PhysicsCost
from locomotion.sim.native import NativeBackend

BOX = """<mujoco><worldbody><geom type="plane" size="5 5 .1"/>
<body pos="0 0 .1"><freejoint/><geom type="box" size=".1 .1 .1"/></body></worldbody></mujoco>"""


def test_a_subtask_made_more_expensive_gets_a_higher_cost():
    model = mujoco.MjModel.from_xml_string(BOX)
    sim = NativeBackend(model, 8, nthread=1)
    for _ in range(10):  # the boxes come to rest on the plane: contacts to solve
        sim.step(np.zeros((8, 0)), 4)
    slow = copy.copy(model)  # a solver that always runs all its iterations
    slow.opt.solver, slow.opt.iterations, slow.opt.tolerance = mujoco.mjtSolver.mjSOL_PGS, 200, 0
    sim.models[4:] = [slow] * 4
    state = sim.state.copy()
    probe = PhysicsCost(sim, 3, nsubsteps=4, worlds=3, repeats=3, decay=0.5)
    measured = probe.measure(torch.tensor([0, 0, 0, 0, 1, 1, 1, 1]))  # subtask 2: no slots
    assert measured[1] > 3 * measured[0] > 0 and math.isnan(measured[2])
    np.testing.assert_array_equal(sim.state, state)  # timed on copies: training untouched
    cost = probe.update(measured)
    assert cost[2] == pytest.approx(float(cost[:2].mean()))  # never timed: the others' mean
    sim.close()


def test_measurements_fold_in_with_the_decay_and_gaps_keep_the_estimate():
    probe = PhysicsCost(SimpleNamespace(time_step=None), 3, 4, worlds=1, repeats=1, decay=0.25)
    nan = math.nan
    assert probe.update(torch.tensor([1.0, 2.0, nan], dtype=torch.float64)).tolist() == [
        1.0, 2.0, 1.5]
    assert probe.update(torch.tensor([5.0, nan, 4.0], dtype=torch.float64)).tolist() == [
        2.0, 2.0, 4.0]  # 0.75 x 1 + 0.25 x 5; kept; first measurement taken as it is


def test_physics_cost_needs_a_backend_that_times_worlds_and_sound_knobs():
    with pytest.raises(ValueError, match="sim=native"):
        PhysicsCost(object(), 3, 4, worlds=16, repeats=3, decay=0.5)
    with pytest.raises(ValueError, match="worlds >= 1, repeats >= 1 and 0 < decay <= 1"):
        PhysicsCost(SimpleNamespace(time_step=None), 3, 4, worlds=16, repeats=3, decay=0)
