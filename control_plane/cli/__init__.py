"""The ``netco`` command line: the application layer (see :mod:`control_plane.cli.main`).

``main.py`` holds the command table; the front ends that orchestrate switch, controller and
training live here (``demo``, ``train``, ``bench``, ``p4``, ``controller``). A subsystem with its
own package keeps its front end beside it as ``<package>/cli.py`` (``host.thc.cli``,
``host.softswitch.cli``, ``control_plane.{testbed,scaleacross,fielding}.cli``). Nothing under
``host`` imports this package (``tests/test_layering.py``).
"""
