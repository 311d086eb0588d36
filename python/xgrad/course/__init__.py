"""The course: six assignments with stubs for students and a grader (course/README.md for instructors).

    python3 -m xgrad.course new DIR                    # copies the assignments' stubs into DIR
    python3 -m xgrad.course check DIR [--exercise N]   # one line per task, then "N passed, M failed"

``check`` imports DIR's a1_functions.py .. a6_experiment.py and runs each task's checks against the
library: the op's value and the divergence report naming the first wrong node (in backward order), a
gradcheck, the numbers of xgrad.optim and xgrad.train. It exits 0 iff every task passes. From Python:
``xgrad.course.check(DIR, exercise=None)`` returns the list of TaskResult.
"""

from .grader import TaskResult, check, new, main

__all__ = ["TaskResult", "check", "new", "main"]
