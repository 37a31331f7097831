"""``python -m enzpy.gradbench``: serve the GradBench protocol on stdin/stdout."""
import sys

from .server import main

if __name__ == "__main__":
    sys.exit(main())
