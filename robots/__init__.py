"""Robot models (MJCF) and their specs, one folder per robot (``locomotion.robots``)."""

from pathlib import Path

from locomotion.config_checks import ConfigError

ROBOTS_DIR = Path(__file__).resolve().parent


PRETRAINED = "pretrained:"


def resolve_policy_path(path: str | Path) -> Path:
    """``pretrained:ROBOT`` names the policy shipped with a robot (its checkpoint.pt, or
    ``pretrained:ROBOT/FILE``), ``pretrained:ROBOT:VARIANT`` another one it ships (the folder
    ``pretrained_VARIANT``, e.g. ``pretrained:go1:multitask``), wherever the package is
    installed; other paths pass through."""
    text = str(path)
    if not text.startswith(PRETRAINED):
        return Path(path)
    name, _, file = text[len(PRETRAINED):].partition("/")
    robot, _, variant = name.partition(":")
    folder = f"pretrained_{variant}" if variant else "pretrained"
    shipped = sorted(f"{PRETRAINED}{p.parent.name}" + (p.name[len("pretrained"):]
                                                         .replace("_", ":", 1))
                     for p in ROBOTS_DIR.glob("*/pretrained*") if p.is_dir())
    if not (ROBOTS_DIR / robot / folder).is_dir():
        raise ConfigError(f"no pretrained policy {text!r}; shipped: {shipped}")
    return ROBOTS_DIR / robot / folder / (file or "checkpoint.pt")
