"""netco control plane: P4Runtime controller, ScaleAcross Explorer, FIELDING."""
