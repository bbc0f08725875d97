"""Robot models (MJCF) and their specs, one folder per robot (``locomotion.robots``)."""

from pathlib import Path

ROBOTS_DIR = Path(__file__).resolve().parent
