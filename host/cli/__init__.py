"""The ``netco`` command line (see :mod:`host.cli.main`)."""
