"""A Go1 MJCF as a robot team would write it: its own IMU site and actuators, other names."""

from __future__ import annotations

from pathlib import Path

import mujoco

from locomotion.robots import ROBOTS_DIR

GO1_XML = ROBOTS_DIR / "go1" / "go1.xml"
LEGS = ("FR", "FL", "RR", "RL")


def team_go1(path: Path, actuators: str = "position", damping: float | None = None,
             frictionloss: float | None = None, armature: float | None = None,
             foot_solref: tuple[float, float] | None = None, integrator: str | None = None,
             ) -> Path:
    """Write a copy of ``robots/go1/go1.xml`` to ``path`` with a floor, an ``imu`` site and a
    ``FL_foot_site`` of its own, a sensor, and ``actuators``: "position" (kp 30, kv 0.8,
    named ``<leg>_<part>_servo``), "motor" (``<leg>_<part>_motor``) or "none"; optionally
    other joint dynamics, foot contact time constant and damping ratio, and integrator."""
    spec = mujoco.MjSpec.from_file(str(GO1_XML))
    spec.worldbody.add_geom(name="floor", type=mujoco.mjtGeom.mjGEOM_PLANE, size=[0, 0, 0.05])
    trunk = spec.body("trunk")
    trunk.add_site(name="imu", pos=[-0.02, 0.0, 0.03])
    spec.body("FL_calf").add_site(name="FL_foot_site", pos=[0, 0, -0.213])
    spec.add_sensor(name="team_gyro", type=mujoco.mjtSensor.mjSENS_GYRO,
                    objtype=mujoco.mjtObj.mjOBJ_SITE, objname="imu")
    for joint in spec.joints:
        if joint.type != mujoco.mjtJoint.mjJNT_HINGE:
            continue
        leg, part = joint.name.split("_")[:2]
        limit = 35.55 if part == "calf" else 23.7
        if actuators == "position":
            act = spec.add_actuator(name=f"{leg}_{part}_servo", target=joint.name,
                                    trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.set_to_position(kp=30.0, kv=0.8)
        elif actuators == "motor":
            act = spec.add_actuator(name=f"{leg}_{part}_motor", target=joint.name,
                                    trntype=mujoco.mjtTrn.mjTRN_JOINT)
            act.set_to_motor()
        if actuators != "none":
            act.forcelimited = mujoco.mjtLimited.mjLIMITED_TRUE
            act.forcerange = [-limit, limit]
        if damping is not None:
            joint.damping = [damping, *list(joint.damping)[1:]]  # [damping, polynomial terms]
        for field, value in (("frictionloss", frictionloss), ("armature", armature)):
            if value is not None:
                setattr(joint, field, value)
    if foot_solref is not None:
        for leg in LEGS:
            spec.geom(f"{leg}_foot").solref = list(foot_solref)
    if integrator is not None:
        spec.option.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{integrator.upper()}")
    path.write_text(spec.to_xml())
    return path
