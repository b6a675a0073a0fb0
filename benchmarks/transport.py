#!/usr/bin/env python3
"""Transport benchmark (THC through the software target vs the socket limit); prints JSON."""

import sys

from host.bench.transport import main

if __name__ == "__main__":
    sys.exit(main())
