"""netco control plane: P4Runtime controller, testbeds, ScaleAcross Explorer, FIELDING, and the
``netco`` command line (:mod:`control_plane.cli`)."""
