"""``python3 -m xgrad.course new DIR`` / ``check DIR [--exercise N]`` (see xgrad.course)."""

import sys

from .grader import main

sys.exit(main(sys.argv[1:]))
