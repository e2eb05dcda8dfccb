"""Finds and loads libdlock.so, and declares the C ABI (include/dlock/dlock.h) for ctypes.

Search order: $DLOCK_LIBRARY (a path to the .so: an explicit choice, final), then the copy a
platform wheel bundles beside this file, then `pkg-config --variable=libdir dlock`, then the
system's loader path (libdlock.so.0, as the SONAME says). The package loads it on first use.

ctypes.CDLL releases the GIL around every foreign call, so a blocking dlock_acquire never holds
up other Python threads, and callbacks from the library's own thread can take the GIL while a
Python thread waits in dlock_release.
"""

import ctypes
import os
import shutil
import subprocess
from typing import List, Tuple

SONAME = "libdlock.so.0"
SUPPORTED_MAJOR = 0
# Where a platform wheel puts the library (build_backend/dlock_backend.py, BUNDLED).
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), SONAME)
# What the bundled library needs from the system, as Debian names it (the libdlock0 package's
# dependencies, less libc and the C++ runtime). tests/test_build.py checks it against the
# library's DT_NEEDED entries.
SYSTEM_PACKAGES = ("libcurl4", "libevent-core-2.1-7",
                   "libevent-pthreads-2.1-7", "libhiredis0.14", "libpq5", "libssl3")


def _candidates() -> Tuple[List[Tuple[str, str]], bool]:
    env = os.environ.get("DLOCK_LIBRARY")
    if env:
        # An explicit choice is final: a wrong path is an error, not a reason to look elsewhere.
        return [("DLOCK_LIBRARY", env)], True
    found = []
    if os.path.exists(BUNDLED):
        found.append(("bundled with this package", BUNDLED))
    if shutil.which("pkg-config"):
        try:
            out = subprocess.run(
                ["pkg-config", "--variable=libdir", "dlock"],
                capture_output=True, text=True, timeout=10, check=False,
            )
            libdir = out.stdout.strip()
            if out.returncode == 0 and libdir:
                for name in (SONAME, "libdlock.so"):
                    path = os.path.join(libdir, name)
                    if os.path.exists(path):
                        found.append(("pkg-config libdir", path))
                        break
        except (OSError, subprocess.SubprocessError):
            pass
    found.append(("system loader path", SONAME))
    return found, False


def load() -> Tuple[ctypes.CDLL, str]:
    """Returns (ctypes.CDLL, path) for libdlock, or raises OSError naming every place tried."""
    candidates, explicit = _candidates()
    tried = []
    for where, path in candidates:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{where} ({path}): {e}")
            if explicit:
                break
            continue
        try:
            _declare(lib)
        except AttributeError as e:  # a libdlock from before a function this binding needs
            tried.append(f"{where} ({path}): too old for this binding: {e}")
            if explicit:
                break
            continue
        # The calls the event loop makes on its own thread (asyncio), through PyDLL: they keep
        # the GIL, so the callbacks they run (hooks, done, on_lost) take no GIL hand-over. They
        # never block on that thread (a hooks client's _async calls only queue work).
        gil = ctypes.PyDLL(path)
        _declare(gil)
        lib.on_loop = gil
        version = lib.dlock_version().decode()
        major = int(version.split(".")[0])
        if major != SUPPORTED_MAJOR:
            raise OSError(f"dlock: {path} is libdlock {version}; this binding needs {SUPPORTED_MAJOR}.x")
        return lib, path
    if explicit:
        what = "DLOCK_LIBRARY names it, and then nothing else is tried"
    elif os.path.exists(BUNDLED):
        what = ("the libdlock bundled with this package did not load: install what it needs "
                "(on Debian: apt-get install " + " ".join(SYSTEM_PACKAGES) + ")")
    else:
        what = ("this package has no libdlock of its own: install the platform wheel that "
                "bundles it (libdlock-VERSION-py3-none-linux_*.whl, from scripts/package), or "
                "the library itself (on Debian: apt-get install libdlock0), or set "
                "DLOCK_LIBRARY to the path of libdlock.so")
    raise OSError(f"dlock: cannot load libdlock.so; {what}. Tried: " + "; ".join(tried))


c_status = ctypes.c_int  # enum dlock_status
c_client_p = ctypes.c_void_p
c_lock_p = ctypes.c_void_p
c_options_p = ctypes.c_void_p

c_queue_p = ctypes.c_void_p
c_info_p = ctypes.c_void_p
c_metrics_p = ctypes.c_void_p

# Callbacks from C. The owned-thread client (the sync API) calls none but EVENT_FN: its outcomes,
# lost locks and observers' reports come back through a dlock_queue (tagged with small integers)
# that a Python thread drains, so the library's own thread (heartbeats) never waits for the GIL;
# only a Client with an event handler (on_event) has that thread call Python. The asyncio side
# drives a client from the event loop through dlock_client_open_hooks: its hooks and its done /
# on_lost callbacks are the CFUNCTYPEs below, called only on the loop's thread, from inside a
# dlock call that thread made (so the GIL is that thread's already). The binding makes one
# object of each, at module level, kept for the life of the process: C may call them at any
# time after a call that names them.
c_loop_p = ctypes.c_void_p
WATCH_FD_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, c_loop_p, ctypes.c_int, ctypes.c_uint32,
                               ctypes.POINTER(ctypes.c_void_p))
SET_TIMER_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, c_loop_p, ctypes.c_int64)
CLEANUP_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
ACQUIRE_FN = ctypes.CFUNCTYPE(None, c_status, c_lock_p, ctypes.c_void_p)
DONE_FN = ctypes.CFUNCTYPE(None, c_status, ctypes.c_void_p)
INFO_FN = ctypes.CFUNCTYPE(None, c_status, ctypes.c_void_p, ctypes.c_void_p)  # dlock_info_fn
LOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_uint64, ctypes.c_void_p)
# dlock_release_requested_fn: (name, reason, arg), on the loop's thread as LOST_FN
RELEASE_REQUESTED_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p)
c_observer_p = ctypes.c_void_p
OBSERVE_FN = ctypes.CFUNCTYPE(None, ctypes.c_char_p, c_info_p, ctypes.c_void_p)
# dlock_event_fn: runs on the thread that did the work (the caller's, the library's own, or an
# asyncio loop's), which takes the GIL for it.
c_event_p = ctypes.c_void_p
EVENT_FN = ctypes.CFUNCTYPE(None, c_event_p, ctypes.c_void_p)


class LoopHooks(ctypes.Structure):
    """dlock_loop_hooks."""
    _fields_ = [("watch_fd", WATCH_FD_FN), ("set_timer", SET_TIMER_FN), ("cleanup", CLEANUP_FN)]


def _fn(lib, name, restype, argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = argtypes
    return f


def _declare(lib):
    _fn(lib, "dlock_status_str", ctypes.c_char_p, [c_status])
    _fn(lib, "dlock_last_error", ctypes.c_char_p, [])
    _fn(lib, "dlock_version", ctypes.c_char_p, [])
    _fn(lib, "dlock_client_open", c_status, [ctypes.c_char_p, ctypes.POINTER(c_client_p)])
    _fn(lib, "dlock_client_close", None, [c_client_p])
    _fn(lib, "dlock_options_new", c_options_p, [])
    _fn(lib, "dlock_options_free", None, [c_options_p])
    _fn(lib, "dlock_options_set_lease_ms", c_status, [c_options_p, ctypes.c_uint64])
    _fn(lib, "dlock_options_set_heartbeat_ms", c_status, [c_options_p, ctypes.c_uint64])
    _fn(lib, "dlock_options_set_wait_ms", c_status, [c_options_p, ctypes.c_int64])
    _fn(lib, "dlock_options_set_retry_ms", c_status, [c_options_p, ctypes.c_uint64, ctypes.c_uint64])
    _fn(lib, "dlock_options_set_owner", c_status, [c_options_p, ctypes.c_char_p])
    _fn(lib, "dlock_acquire", c_status,
        [c_client_p, ctypes.c_char_p, c_options_p, ctypes.POINTER(c_lock_p)])
    _fn(lib, "dlock_release", c_status, [c_lock_p])
    _fn(lib, "dlock_extend", c_status, [c_lock_p, ctypes.c_uint64])
    _fn(lib, "dlock_lock_fencing_token", ctypes.c_uint64, [c_lock_p])
    _fn(lib, "dlock_lock_is_valid", ctypes.c_int, [c_lock_p])
    _fn(lib, "dlock_lock_remaining_ms", ctypes.c_int64, [c_lock_p])
    _fn(lib, "dlock_lock_attempts", ctypes.c_uint32, [c_lock_p])
    _fn(lib, "dlock_lock_name", ctypes.c_char_p, [c_lock_p])
    _fn(lib, "dlock_queue_new", c_status, [ctypes.POINTER(c_queue_p)])
    _fn(lib, "dlock_queue_free", None, [c_queue_p])
    _fn(lib, "dlock_queue_fd", ctypes.c_int, [c_queue_p])
    _fn(lib, "dlock_queue_pop", ctypes.c_int,
        [c_queue_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(c_status), ctypes.POINTER(c_lock_p)])
    _fn(lib, "dlock_acquire_queued", c_status,
        [c_client_p, ctypes.c_char_p, c_options_p, c_queue_p, ctypes.c_uint64])
    _fn(lib, "dlock_acquire_cancel_queued", c_status, [c_client_p, c_queue_p, ctypes.c_uint64])
    _fn(lib, "dlock_release_queued", c_status, [c_lock_p, c_queue_p, ctypes.c_uint64])
    _fn(lib, "dlock_extend_queued", c_status, [c_lock_p, ctypes.c_uint64, c_queue_p, ctypes.c_uint64])
    _fn(lib, "dlock_options_set_on_lost_queued", c_status, [c_options_p, c_queue_p, ctypes.c_uint64])
    _fn(lib, "dlock_options_set_kind", c_status, [c_options_p, ctypes.c_int])
    _fn(lib, "dlock_options_set_permits", c_status, [c_options_p, ctypes.c_uint32])
    _fn(lib, "dlock_options_set_fair", c_status, [c_options_p, ctypes.c_int])
    _fn(lib, "dlock_client_capabilities", ctypes.c_uint32, [c_client_p])
    _fn(lib, "dlock_inspect", c_status, [c_client_p, ctypes.c_char_p, ctypes.POINTER(c_info_p)])
    # the hook table and the _async calls (asyncio)
    _fn(lib, "dlock_client_open_hooks", c_status,
        [ctypes.c_char_p, ctypes.POINTER(LoopHooks), ctypes.c_void_p, ctypes.POINTER(c_client_p)])
    _fn(lib, "dlock_loop_fd_ready", None, [c_loop_p, ctypes.c_int, ctypes.c_uint32])
    _fn(lib, "dlock_loop_timer_fired", None, [c_loop_p])
    _fn(lib, "dlock_acquire_async", c_status,
        [c_client_p, ctypes.c_char_p, c_options_p, ACQUIRE_FN, ctypes.c_void_p])
    _fn(lib, "dlock_acquire_cancel", c_status, [c_client_p, ctypes.c_void_p])
    _fn(lib, "dlock_release_async", c_status, [c_lock_p, DONE_FN, ctypes.c_void_p])
    _fn(lib, "dlock_extend_async", c_status, [c_lock_p, ctypes.c_uint64, DONE_FN, ctypes.c_void_p])
    _fn(lib, "dlock_options_set_on_lost", c_status, [c_options_p, LOST_FN, ctypes.c_void_p])
    _fn(lib, "dlock_info_free", None, [c_info_p])
    _fn(lib, "dlock_info_holders", ctypes.c_uint32, [c_info_p])
    _fn(lib, "dlock_info_owner", ctypes.c_char_p, [c_info_p, ctypes.c_uint32])
    _fn(lib, "dlock_info_remaining_ms", ctypes.c_int64, [c_info_p, ctypes.c_uint32])
    _fn(lib, "dlock_info_fencing_token", ctypes.c_uint64, [c_info_p, ctypes.c_uint32])
    _fn(lib, "dlock_info_kind", ctypes.c_int, [c_info_p])
    _fn(lib, "dlock_info_permits", ctypes.c_uint32, [c_info_p])
    _fn(lib, "dlock_limit_value", ctypes.c_uint64, [ctypes.c_int])
    _fn(lib, "dlock_url_redact", ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t])
    # values stored with a hold, and leader election
    _fn(lib, "dlock_options_set_value", c_status, [c_options_p, ctypes.c_void_p, ctypes.c_size_t])
    _fn(lib, "dlock_lock_set_value", c_status, [c_lock_p, ctypes.c_void_p, ctypes.c_size_t])
    _fn(lib, "dlock_lock_set_value_async", c_status,
        [c_lock_p, ctypes.c_void_p, ctypes.c_size_t, DONE_FN, ctypes.c_void_p])
    _fn(lib, "dlock_lock_set_value_queued", c_status,
        [c_lock_p, ctypes.c_void_p, ctypes.c_size_t, c_queue_p, ctypes.c_uint64])
    _fn(lib, "dlock_info_value", ctypes.c_void_p,
        [c_info_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t)])
    _fn(lib, "dlock_campaign", c_status,
        [c_client_p, ctypes.c_char_p, c_options_p, ctypes.POINTER(c_lock_p)])
    _fn(lib, "dlock_leader", c_status, [c_client_p, ctypes.c_char_p, ctypes.POINTER(c_info_p)])
    _fn(lib, "dlock_inspect_async", c_status, [c_client_p, ctypes.c_char_p, INFO_FN, ctypes.c_void_p])
    _fn(lib, "dlock_leader_async", c_status, [c_client_p, ctypes.c_char_p, INFO_FN, ctypes.c_void_p])
    _fn(lib, "dlock_observe", c_status,
        [c_client_p, ctypes.c_char_p, OBSERVE_FN, ctypes.c_void_p, ctypes.POINTER(c_observer_p)])
    _fn(lib, "dlock_observer_cancel", None, [c_observer_p])
    _fn(lib, "dlock_observe_queued", c_status,
        [c_client_p, ctypes.c_char_p, c_queue_p, ctypes.c_uint64, ctypes.POINTER(c_observer_p)])
    _fn(lib, "dlock_queue_pop_leader", ctypes.c_int,
        [c_queue_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(c_status), ctypes.POINTER(c_lock_p),
         ctypes.POINTER(c_info_p)])
    # metrics and loss causes
    _fn(lib, "dlock_client_metrics_text", c_status,
        [c_client_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)])
    _fn(lib, "dlock_client_metrics", c_status, [c_client_p, ctypes.POINTER(c_metrics_p)])
    _fn(lib, "dlock_metrics_free", None, [c_metrics_p])
    _fn(lib, "dlock_metrics_count", ctypes.c_size_t, [c_metrics_p])
    _fn(lib, "dlock_metrics_family", ctypes.c_char_p, [c_metrics_p, ctypes.c_size_t])
    _fn(lib, "dlock_metrics_type", ctypes.c_char_p, [c_metrics_p, ctypes.c_size_t])
    _fn(lib, "dlock_metrics_help", ctypes.c_char_p, [c_metrics_p, ctypes.c_size_t])
    _fn(lib, "dlock_metrics_name", ctypes.c_char_p, [c_metrics_p, ctypes.c_size_t])
    _fn(lib, "dlock_metrics_labels", ctypes.c_char_p, [c_metrics_p, ctypes.c_size_t])
    _fn(lib, "dlock_metrics_value", ctypes.c_double, [c_metrics_p, ctypes.c_size_t])
    _fn(lib, "dlock_lock_lost_cause", ctypes.c_char_p, [c_lock_p])
    # events, for logs and traces
    _fn(lib, "dlock_client_set_event_hook", c_status, [c_client_p, EVENT_FN, ctypes.c_void_p])
    _fn(lib, "dlock_event_type_of", ctypes.c_int, [c_event_p])
    _fn(lib, "dlock_event_type_name", ctypes.c_char_p, [ctypes.c_int])
    _fn(lib, "dlock_event_lock_name", ctypes.c_char_p, [c_event_p])
    _fn(lib, "dlock_event_attempts", ctypes.c_uint32, [c_event_p])
    _fn(lib, "dlock_event_elapsed_ms", ctypes.c_int64, [c_event_p])
    _fn(lib, "dlock_event_fencing_token", ctypes.c_uint64, [c_event_p])
    _fn(lib, "dlock_event_status", c_status, [c_event_p])
    _fn(lib, "dlock_event_detail", ctypes.c_char_p, [c_event_p])
    # Job rules: optional, so that a libdlock from before them still loads (max_hold= then
    # says what the library lacks; the package checks hasattr(lib, name) before using it).
    if hasattr(lib, "dlock_options_set_max_hold_ms"):
        _fn(lib, "dlock_options_set_max_hold_ms", c_status, [c_options_p, ctypes.c_uint64])
    # min_hold= and lock_delay= likewise (only a non-zero one needs the library's setter).
    if hasattr(lib, "dlock_options_set_min_hold_ms"):
        _fn(lib, "dlock_options_set_min_hold_ms", c_status, [c_options_p, ctypes.c_uint64])
    if hasattr(lib, "dlock_options_set_lock_delay_ms"):
        _fn(lib, "dlock_options_set_lock_delay_ms", c_status, [c_options_p, ctypes.c_uint64])
    # take= likewise (only a take other than 1 needs the library's setter).
    if hasattr(lib, "dlock_options_set_take"):
        _fn(lib, "dlock_options_set_take", c_status, [c_options_p, ctypes.c_uint32])
    # reentrant= likewise (only a context needs the library's setter).
    if hasattr(lib, "dlock_options_set_reentrant"):
        _fn(lib, "dlock_options_set_reentrant", c_status, [c_options_p, ctypes.c_char_p])
    # Breaking a lock: optional too (break_lock() then says what the library lacks; inspect()
    # shows closed_ms 0 and closed_by "").
    if hasattr(lib, "dlock_break_with"):
        _fn(lib, "dlock_break_with", c_status,
            [c_client_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(c_info_p)])
    if hasattr(lib, "dlock_info_closed_ms"):
        _fn(lib, "dlock_info_closed_ms", ctypes.c_int64, [c_info_p])
        _fn(lib, "dlock_info_closed_by", ctypes.c_char_p, [c_info_p])
    # Several names, all or none: optional too (lock_many() then says what the library lacks).
    if hasattr(lib, "dlock_acquire_many"):
        _fn(lib, "dlock_acquire_many", c_status,
            [c_client_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, c_options_p,
             ctypes.POINTER(c_lock_p)])
        _fn(lib, "dlock_release_many", c_status, [ctypes.POINTER(c_lock_p), ctypes.c_size_t])
    # Release requests: optional too (request_release() and on_release_requested= then say
    # what the library lacks).
    if hasattr(lib, "dlock_request_release"):
        _fn(lib, "dlock_request_release", c_status, [c_client_p, ctypes.c_char_p, ctypes.c_char_p])
        _fn(lib, "dlock_options_set_on_release_requested", c_status,
            [c_options_p, RELEASE_REQUESTED_FN, ctypes.c_void_p])
        _fn(lib, "dlock_options_set_on_release_requested_queued", c_status,
            [c_options_p, c_queue_p, ctypes.c_uint64])
