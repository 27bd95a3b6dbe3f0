"""Whether the garbage collector running inside a graph capture breaks it, with the capture as
it is (`new`) or with the collector left on during it (`old`, as before engine/graphs.capture
held it off): runs tests/test_cuda_graphs.py's test of that once and prints PASSED or FAILED.
Run each in a process of its own (a broken capture can leave the CUDA context unusable).
Usage there: PYTHONPATH=. python3 bench/gpu/capture_gc_check.py old|new
"""

import gc
import sys
import types

from engine.runtime import step_graphs as graphs
from tests import test_cuda_graphs as t

mode = sys.argv[1]
if mode == "old":  # the capture as it was: the collector left on
    graphs.gc = types.SimpleNamespace(isenabled=gc.isenabled, disable=lambda: None, enable=lambda: None)
try:
    t.test_garbage_collected_during_a_capture_does_not_break_it()
    print(mode, "PASSED")
except BaseException as e:  # noqa: BLE001
    print(mode, "FAILED", type(e).__name__, str(e)[:300])
