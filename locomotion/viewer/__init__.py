"""Watching a policy: a session that steps it under a user's commands, and the viewers
that show it (MuJoCo's own window, or a browser page)."""

from locomotion.viewer.session import ViewerSession, load_session, viewer_config

__all__ = ["ViewerSession", "load_session", "viewer_config"]
