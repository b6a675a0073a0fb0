"""FIELDING's ServerApp and ClientApp (defined in control_plane.fielding.deploy)."""

from control_plane.fielding.deploy import client_app, server_app

__all__ = ["client_app", "server_app"]
