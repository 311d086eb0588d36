"""The grader: loads a student folder's assignment files, runs every task's checks, prints one line per
task and the totals. The tasks themselves are in exercises.py; what they share (a failed check, the
comparison that names the first wrong node) is here."""

import argparse
import importlib
import os
import shutil
import sys
import traceback

MODULES = ["a1_functions", "a2_softmax_norm", "a3_mha", "a4_block", "a5_training", "a6_experiment"]
HERE = os.path.dirname(os.path.abspath(__file__))


class TaskFailed(Exception):
    """A check of a task failed; the message says what is wrong (and where)."""


class TaskResult:
    """One task's outcome: ``task`` ("1.6"), ``name`` ("MatMul"), ``passed``, ``message``."""

    def __init__(self, task, name, passed, message=""):
        self.task, self.name, self.passed, self.message = task, name, passed, message

    def line(self):
        head = "%s %s %s" % ("PASS" if self.passed else "FAIL", self.task, self.name)
        return head if self.passed else "%s: %s" % (head, self.message)

    def __repr__(self):
        return "TaskResult(%r, %r, passed=%r, %r)" % (self.task, self.name, self.passed, self.message)


def stubs_dir():
    """Where the stubs are: next to this package when built or installed, else the source tree's course/."""
    for candidate in (os.path.join(HERE, "assignments"),
                      os.path.join(HERE, "..", "..", "..", "course", "assignments")):
        if os.path.isfile(os.path.join(candidate, "a1_functions.py")):
            return os.path.abspath(candidate)
    raise FileNotFoundError("xgrad.course: the assignments' stubs are not installed next to the package")


def new(directory):
    """Copies the stubs (Python, and the C++ ones under cpp/) into ``directory``, which must not hold
    assignment files already (nothing is overwritten)."""
    source = stubs_dir()
    os.makedirs(directory, exist_ok=True)
    names = sorted(os.listdir(source))
    taken = [n for n in names if os.path.exists(os.path.join(directory, n))]
    if taken:
        raise FileExistsError("xgrad.course new: %s already holds %s; nothing was copied"
                              % (directory, ", ".join(taken)))
    for name in names:
        path = os.path.join(source, name)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(directory, name))
        elif not name.startswith("__"):
            shutil.copy(path, os.path.join(directory, name))
    return [n for n in names if not n.startswith("__")]


def _load(directory, module):
    """Imports DIR/<module>.py afresh (with DIR first on sys.path, so assignments may import each other)."""
    path = os.path.join(directory, module + ".py")
    if not os.path.isfile(path):
        raise TaskFailed("%s is missing (python3 -m xgrad.course new DIR copies the stubs)" % path)
    return importlib.import_module(module)


def _describe(e):
    """An exception raised by the student's code, in one line (its last frame in the student's files)."""
    if isinstance(e, TaskFailed):
        return str(e)
    first_line = (str(e).splitlines() or [""])[0]
    if isinstance(e, NotImplementedError):
        return "not implemented yet (NotImplementedError: %s)" % first_line
    where = ""
    for frame in reversed(traceback.extract_tb(e.__traceback__)):
        if os.path.basename(os.path.dirname(frame.filename)) != "xgrad" and "/xgrad/" not in frame.filename:
            where = " (%s, line %d)" % (os.path.basename(frame.filename), frame.lineno)
            break
    return "raised %s: %s%s" % (type(e).__name__, first_line, where)


def check(directory, exercise=None):
    """Grades DIR: the list of TaskResult of every task (of exercise N only, when given)."""
    from . import exercises

    directory = os.path.abspath(directory)
    if not os.path.isdir(directory):
        raise FileNotFoundError("xgrad.course check: no folder %s" % directory)
    if exercise is not None and exercise not in exercises.EXERCISES:
        raise ValueError("xgrad.course check: --exercise must be 1 .. %d, got %s"
                         % (len(exercises.EXERCISES), exercise))
    for module in MODULES:
        sys.modules.pop(module, None)
    sys.path.insert(0, directory)
    results = []
    try:
        for number, (module, tasks) in exercises.EXERCISES.items():
            if exercise is not None and number != exercise:
                continue
            for task, name, run in tasks:
                try:
                    run(_load(directory, module))
                    results.append(TaskResult(task, name, True))
                except Exception as e:  # the student's code may raise anything: it is the grade
                    results.append(TaskResult(task, name, False, _describe(e)))
    finally:
        sys.path.remove(directory)
        for module in MODULES:
            sys.modules.pop(module, None)
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m xgrad.course",
                                     description="xgrad's course: the assignments' stubs and their grader")
    sub = parser.add_subparsers(dest="command", required=True)
    new_parser = sub.add_parser("new", help="copy the assignments' stubs into DIR")
    new_parser.add_argument("dir")
    check_parser = sub.add_parser("check", help="grade the assignments in DIR")
    check_parser.add_argument("dir")
    check_parser.add_argument("--exercise", type=int, default=None, help="only exercise N (1 .. 6)")
    args = parser.parse_args(argv)
    try:
        if args.command == "new":
            copied = new(args.dir)
            print("copied %s to %s" % (", ".join(copied), args.dir))
            return 0
        results = check(args.dir, args.exercise)
    except (OSError, ValueError) as e:
        print("xgrad.course: %s" % e, file=sys.stderr)
        return 2
    for r in results:
        print(r.line())
    passed = sum(r.passed for r in results)
    print("%d passed, %d failed" % (passed, len(results) - passed))
    return 0 if passed == len(results) else 1
