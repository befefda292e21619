#!/usr/bin/env python3
"""GEMM benchmark (not a test): ``matmul_tiled``'s design (shaders/gemm.wgsl) written in CUDA
(gemm_cuda_tile.cu), compiled by NVRTC and launched through the CUDA driver API, beside cuBLAS
(torch.matmul, TF32 off). It asks whether the WGSL kernel's distance from cuBLAS lies in the
tile's design or in the WGSL -> SPIR-V -> driver path. Prints one row a kernel variant:
registers a thread and TFLOP/s (2 M N K / median time of 20 launches, CUDA events) a shape.

    python benchmarks/gemm_cuda_tile.py               # a CUDA GPU, PyTorch with its NVRTC
    python benchmarks/gemm_cuda_tile.py --check-only  # compile every variant for sm_90 only
    python benchmarks/gemm_cuda_tile.py --dump cubins # ... and write the cubins there

Variants (-D macros of the .cu): ``mirror`` the WGSL kernel's tile (128 x 128, 16 x 16 threads,
8 x 8 values a thread, BK 8, double-buffered shared memory, one register prefetch);
``clamp-*`` plus WGSL robustness's min(index, last) on shared / global / both indices;
``minb2`` asks for two workgroups an SM (``__launch_bounds__(256, 2)``), which WGSL cannot;
``bk16`` 16 k a step; ``warp`` each warp a compact 4 x 8 block of threads (siboehm's warp
tiling); ``bk16-split`` the next step's second half loaded only after its first half is
stored (half the prefetch registers live across the k loop). nn only, M and N multiples of
128, K of BK, no split-K: shapes of few tiles are not comparable with cuBLAS. ``--dump DIR``
writes each variant's cubin (for ``cuobjdump -res-usage``). Raises SystemExit when no
libnvrtc is found or a variant does not compile.
"""
import ctypes
import glob
import os
import site
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = open(os.path.join(HERE, "gemm_cuda_tile.cu")).read()
VARIANTS = {"mirror": [], "clamp-smem": ["-DCLAMP=1"], "clamp-global": ["-DCLAMP=2"],
            "clamp-both": ["-DCLAMP=3"], "minb2": ["-DMINB=2"],
            "bk16": ["-DBK=16"], "bk16-minb2": ["-DBK=16", "-DMINB=2"],
            "warp": ["-DLAYOUT=1"], "warp-minb2": ["-DLAYOUT=1", "-DMINB=2"],
            "bk16-split": ["-DBK=16", "-DSPLITPF=1"],
            "bk16-split-warp": ["-DBK=16", "-DSPLITPF=1", "-DLAYOUT=1"]}


def find_nvrtc():
    """The path of libnvrtc (PyTorch's nvidia-cuda-nvrtc wheel, else the loader's)."""
    roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
    for r in roots:
        for p in sorted(glob.glob(os.path.join(r, "**", "libnvrtc.so*"), recursive=True)):
            if "builtins" not in p and "alt" not in p:
                return p
    for p in ("libnvrtc.so", "libnvrtc.so.12", "libnvrtc.so.13"):
        try:
            ctypes.CDLL(p)
            return p
        except OSError:
            pass
    raise SystemExit("no libnvrtc")


def compile_cubin(opts, arch="sm_90"):
    """The cubin of gemm_cuda_tile.cu compiled with NVRTC options ``opts`` for ``arch``."""
    nv = ctypes.CDLL(find_nvrtc())
    prog = ctypes.c_void_p()
    assert nv.nvrtcCreateProgram(ctypes.byref(prog), SRC.encode(), b"tile.cu", 0, None, None) == 0
    o = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"] + [x.encode() for x in opts]
    arr = (ctypes.c_char_p * len(o))(*o)
    rc = nv.nvrtcCompileProgram(prog, len(o), arr)
    n = ctypes.c_size_t()
    nv.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
    log = ctypes.create_string_buffer(n.value)
    nv.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        raise SystemExit(f"nvrtc {opts}: {log.value.decode()}")
    nv.nvrtcGetCUBINSize(prog, ctypes.byref(n))
    cub = ctypes.create_string_buffer(n.value)
    assert nv.nvrtcGetCUBIN(prog, cub) == 0
    return cub.raw


def median_ms(torch, fn, reps=20) -> float:
    """Median ms of ``reps`` calls of ``fn`` after 3 warm-ups, each between two CUDA events."""
    for _ in range(3):
        fn()
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[reps // 2]


def launcher(cu, torch, func, a, b, c):
    """A call that launches ``func`` on out c [M, N] = a [M, K] b [K, N] (float32, CUDA)."""
    (m, k), n = a.shape, b.shape[1]
    args = [ctypes.c_void_p(a.data_ptr()), ctypes.c_void_p(b.data_ptr()),
            ctypes.c_void_p(c.data_ptr()), ctypes.c_uint(m), ctypes.c_uint(n), ctypes.c_uint(k)]
    params = (ctypes.c_void_p * len(args))(*[ctypes.addressof(x) for x in args])
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    grid = (m // 128) * (n // 128)

    def launch():
        rc = cu.cuLaunchKernel(func, grid, 1, 1, 256, 1, 1, 0, stream, params, None)
        assert rc == 0, f"cuLaunchKernel: CUresult {rc}"
    launch.keep = args  # the values params points at
    return launch


def main():
    dump = sys.argv[sys.argv.index("--dump") + 1] if "--dump" in sys.argv else None
    if "--check-only" in sys.argv or dump:
        for name, opts in VARIANTS.items():
            cub = compile_cubin(opts)
            print(name, len(cub), "bytes")
            if dump:
                os.makedirs(dump, exist_ok=True)
                with open(os.path.join(dump, name + ".cubin"), "wb") as f:
                    f.write(cub)
        return
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.zeros(1, device="cuda")  # the primary context, current on this thread
    cap = torch.cuda.get_device_capability()
    arch = f"sm_{cap[0]}{cap[1]}"
    cu = ctypes.CDLL("libcuda.so.1")
    shapes = [(4096, 4096, 4096), (2048, 2048, 2048), (1024, 1024, 1024), (512, 1024, 4608),
              (256, 3072, 2304), (128, 12544, 1152)]
    print(torch.cuda.get_device_name(), arch)
    print("| kernel | regs | " + " | ".join(f"{m}x{n}x{k}" for m, n, k in shapes) + " |")
    fns = {}
    for name, opts in VARIANTS.items():
        mod, func, regs = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_int()
        assert cu.cuModuleLoadData(ctypes.byref(mod), compile_cubin(opts, arch)) == 0
        assert cu.cuModuleGetFunction(ctypes.byref(func), mod, b"tile_nn") == 0
        cu.cuFuncGetAttribute(ctypes.byref(regs), 4, func)  # CU_FUNC_ATTRIBUTE_NUM_REGS
        fns[name] = (func, regs.value)
    rows = {k: [] for k in ["cublas", *VARIANTS]}
    wrong = []
    for m, n, k in shapes:
        a = torch.randn(m, k, device="cuda")
        b = torch.randn(k, n, device="cuda")
        ref = a.double() @ b.double()
        flop = 2 * m * n * k
        rows["cublas"].append(f"{flop / median_ms(torch, lambda a=a, b=b: a @ b) / 1e9:.1f}")
        for name, (func, _) in fns.items():
            c = torch.empty(m, n, device="cuda")
            ms = median_ms(torch, launcher(cu, torch, func, a, b, c))
            err = ((c.double() - ref).abs().max() / ref.abs().max()).item()
            bad = "" if err < 1e-5 else f" (err {err:.1e})"
            if bad:
                wrong.append(f"{name} {m}x{n}x{k}{bad}")
            rows[name].append(f"{flop / ms / 1e9:.1f}{bad}")  # TFLOP/s: flop / (ms * 1e9)
    for name, vals in rows.items():
        regs = fns[name][1] if name in fns else ""
        print(f"| {name} | {regs} | " + " | ".join(vals) + " |")
    if wrong:  # a kernel that computes the wrong product fails the run, not only its cell
        sys.exit("wrong results (max |C - A B| / max |A B| >= 1e-5): " + "; ".join(wrong))


if __name__ == "__main__":
    main()
