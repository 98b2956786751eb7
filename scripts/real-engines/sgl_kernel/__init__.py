"""A stand-in for SGLang's CUDA-only `sgl_kernel` module, for the real-engine test tier.

SGLang's CPU path (`SGLANG_USE_CPU_ENGINE=1 --device cpu --attention-backend torch_native`)
imports `sgl_kernel` but should never run one of its kernels. This package imports anywhere:
every name looked up on it (or on any submodule) is a function that raises when called. Each
lookup and each call is appended to the file named by `SGL_KERNEL_STANDIN_LOG` (one line:
`lookup NAME` or `call NAME`, with the process id), so a test can fail when a kernel was called.

Submodules (`sgl_kernel.scalar_type`, ...) are deliberately absent: SGLang imports them inside
`try: ... except ImportError` and takes its CPU fallback, as it does where the wheel is missing.
"""

import os

__version__ = "0.0.0+servebench-standin"
STANDIN = True


def _log(kind, name):
    path = os.environ.get("SGL_KERNEL_STANDIN_LOG")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f"{kind} {name} pid={os.getpid()}\n")
    except OSError:
        pass


def _kernel(qualname):
    def kernel(*_args, **_kwargs):
        _log("call", qualname)
        raise RuntimeError(
            f"sgl_kernel stand-in: kernel {qualname} was called; the CPU path must not use it"
        )

    kernel.__name__ = qualname.rsplit(".", 1)[-1]
    kernel.__qualname__ = qualname
    return kernel


def _getattr_for(prefix):
    def module_getattr(name):
        # Dunder and private probes (pickle, inspect, hasattr checks) are answered as absent.
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        qualname = f"{prefix}.{name}"
        _log("lookup", qualname)
        return _kernel(qualname)

    return module_getattr


__getattr__ = _getattr_for(__name__)


_log("import", __name__)
