"""Run a script as ``python SCRIPT ARGS`` would, then exit without finalizing Python.

Usage: ``exit_after_script.py SCRIPT [ARGS...]`` (under a launcher, as the script).

For torch DDP scripts (nanoGPT's ``train.py`` with its model in a module-level variable,
and, under load, scripts that keep it local): the DDP model holds torch's gloo process
group, so its worker threads outlive ``destroy_process_group()``; when the interpreter finalizes,
one of them can be ended in the middle of C++ code and the process aborts with
"terminate called without an active exception" after the script has finished
(pytorch/pytorch#190489, #179291). It is torch's: the same script under the real
torchrun aborted in 3 of 12 runs on 2 cores, with no torch2jax_device code in it. The
script's outcome is settled when it returns, so this exits right then, with its status.
"""

from __future__ import annotations

import os
import runpy
import sys
import traceback


def main() -> int:
    script, *arguments = sys.argv[1:]
    sys.argv = [script, *arguments]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_request:
        code = exit_request.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)
        return 1
    except BaseException:  # reported as the interpreter would
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    status = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
