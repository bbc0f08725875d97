"""Robot models (MJCF) and their specs, one folder per robot (``locomotion.robots``)."""

from pathlib import Path

from locomotion.config_checks import ConfigError

ROBOTS_DIR = Path(__file__).resolve().parent


PRETRAINED = "pretrained:"


def resolve_policy_path(path: str | Path) -> Path:
    """``pretrained:ROBOT`` names the policy shipped with a robot (its checkpoint.pt, or
    ``pretrained:ROBOT/FILE``), wherever the package is installed; other paths pass through."""
    text = str(path)
    if not text.startswith(PRETRAINED):
        return Path(path)
    robot, _, file = text[len(PRETRAINED):].partition("/")
    shipped = sorted(p.parent.name for p in ROBOTS_DIR.glob("*/pretrained"))
    if robot not in shipped:
        raise ConfigError(f"no pretrained policy for robot {robot!r} ({text}); shipped: "
                          f"{[PRETRAINED + r for r in shipped]}")
    return ROBOTS_DIR / robot / "pretrained" / (file or "checkpoint.pt")
