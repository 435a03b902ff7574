# Injected by `rltrace record` (a copy of rltrace/collectors/sitecustomize_template.py): start recording
# this Python process, then run the sitecustomize this one shadows, if any.
import importlib.machinery as _machinery
import os as _os
import sys as _sys

if _os.environ.get("RLTRACE_RECORD_DIR"):
    try:
        from rltrace.collectors.autostart import boot as _boot

        _boot()
    except Exception as _e:  # noqa: BLE001 - never stop the job from starting
        print(f"rltrace: recording disabled in this process: {type(_e).__name__}: {_e}", file=_sys.stderr)

_here = _os.path.dirname(_os.path.abspath(__file__))
_next = _machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
)
if _next is not None and _next.origin and _next.loader is not None:
    _code = _next.loader.get_code("sitecustomize")  # type: ignore[attr-defined]  # PathFinder's file loaders have it
    if _code is not None:  # run the environment's own sitecustomize, which this file shadows, as itself
        globals().update(__file__=_next.origin, __spec__=_next, __loader__=_next.loader,
                         __cached__=getattr(_next, "cached", None))
        exec(_code, globals())  # noqa: S102
