"""Runs the unittest suite and ends with one plain line: 'python: N passed, N failed, N skipped'."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
failed = len(result.failures) + len(result.errors) + len(result.unexpectedSuccesses)
skipped = len(result.skipped)
passed = result.testsRun - failed - skipped
label = sys.argv[1] if len(sys.argv) > 1 else "python"
print(f"{label}: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(0 if failed == 0 and result.testsRun > 0 else 1)
