"""Host transport: THC all-reduce through a switch over UDP or raw Ethernet (AF_PACKET).

:mod:`host.transport.ports` moves THC datagrams (UDP sockets, or raw frames on an interface);
:mod:`host.transport.slots` runs the reliable self-clocked slot window (SwitchML-style);
:mod:`host.transport.job` turns tensors into slot traffic: norm agreement, then THC data.
"""
