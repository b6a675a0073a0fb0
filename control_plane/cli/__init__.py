"""The ``netco`` command line (see :mod:`control_plane.cli.main`)."""
