"""How long the data path's loops poll before they sleep.

A loop that finds nothing to receive (a worker's slot window, ``host/transport/_slotloop.c``;
the software target, ``host/softswitch/_swloop.c``; the kernel-limit echo,
``host/transport/kecho.c``) keeps asking its sockets for :data:`SPIN_US` microseconds, giving
its CPU to anything else runnable between the tries (``sched_yield``), before it blocks in
``poll``. A sleeping receiver costs its sender a wake-up on every train; on a virtual machine
that wake-up is an inter-processor interrupt through the hypervisor, and the halted CPU may be
handed to another guest. Measured on the 2-core reference VM (docs/transport.md, "Poll a
little before sleeping"): the wake-ups were a third of the switch's and workers' CPU, and
polling 100 µs first raised the goodput of n = 2 workers by 1.2-1.9x. The C echo that
measures the kernel's limit waits the same way, so the two stay comparable.
"""

from __future__ import annotations

#: Microseconds a receive loop keeps polling (yielding between tries) before it sleeps; 0: it
#: sleeps at once. The software target's ``--spin-us`` overrides it.
SPIN_US = 100

__all__ = ["SPIN_US"]
