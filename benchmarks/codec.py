#!/usr/bin/env python3
"""THC codec benchmark; prints one JSON object. Same as ``netco bench codec``."""

import sys

from host.bench.codec import main

if __name__ == "__main__":
    sys.exit(main())
