"""The torch side of scripts/cpu_peers_bench.sh: gloo through torch.distributed, and
DeepSpeed's shm all-reduce (its csrc/cpu/comm sources compiled here at run time from a
checkout the caller names; nothing of DeepSpeed is kept in this repository).

Timed the way relaycc-bench times relaycc, so the columns mean the same thing:
  - size = bytes of each rank's input (all-gather's output is nranks x size,
    reduce-scatter's is size / nranks, all-to-all's blocks are size / nranks);
  - an iteration's time is the max over ranks of one call after a barrier;
  - rank r runs on the r-th CPU of the set it inherited, one compute thread per rank.
Prints one JSON line per (collective, dtype, size) from rank 0.

  python torch_peers.py --peer gloo|deepspeed --ranks N --sizes 4096,... [--ds-src DIR --ds-build DIR]
"""
import argparse
import importlib.util
import json
import os
import socket
import subprocess
import sys
import sysconfig
import time

COLLS = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--peer", choices=("gloo", "deepspeed"), required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--colls", default=",".join(COLLS))
    p.add_argument("--dtypes", default="float,bfloat16")
    p.add_argument("--sizes", required=True)
    p.add_argument("--iter-bytes", type=int, default=256 << 20)
    p.add_argument("--iter-min", type=int, default=5)
    p.add_argument("--iter-max", type=int, default=200)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--cell-seconds", type=float, default=0.25,
                   help="fewer iterations (not below --iter-min) where the warm-up says a cell takes longer")
    p.add_argument("--rep", type=int, default=0)
    p.add_argument("--bind", type=int, default=1)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--ds-src", help="DeepSpeed's csrc/cpu/comm folder")
    p.add_argument("--ds-build", help="where the compiled DeepSpeed module is kept")
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args()


def bind_to_rank(rank):
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


def ds_module_path(build):
    return os.path.join(build, "relaycc_ds_shm_peer" + sysconfig.get_config_var("EXT_SUFFIX"))


def build_deepspeed(src, build):
    """Compiles DeepSpeed's two shm sources into a Python extension with g++ (no ninja
    needed), with the flags its builder names for them (-O2 -fopenmp)."""
    out = ds_module_path(build)
    if os.path.exists(out):
        return out  # before importing torch: that import alone took 7 s of a 15 s launch on 2 cores
    import torch
    from torch.utils import cpp_extension
    os.makedirs(build, exist_ok=True)
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = ["g++", "-shared", "-fPIC", "-O2", "-fopenmp", "-std=c++20",
           "-DTORCH_EXTENSION_NAME=relaycc_ds_shm_peer", "-DTORCH_API_INCLUDE_EXTENSION_H",
           f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-I" + src, "-I" + sysconfig.get_paths()["include"]]
    cmd += ["-I" + p for p in cpp_extension.include_paths()]
    cmd += [os.path.join(src, "shm_interface.cpp"), os.path.join(src, "shm.cpp"), "-o", out + ".tmp"]
    cmd += ["-L" + p for p in cpp_extension.library_paths()]
    cmd += ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python", "-fopenmp"]
    subprocess.run(cmd, check=True)
    os.replace(out + ".tmp", out)
    return out


def iters_for(size, a):
    return max(a.iter_min, min(a.iter_max, a.iter_bytes // max(size, 1)))


def child(a):
    if a.bind:
        bind_to_rank(a.rank)
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=a.rank, world_size=a.ranks)
    n, r = a.ranks, a.rank
    ds = None
    if a.peer == "deepspeed":
        spec = importlib.util.spec_from_file_location("relaycc_ds_shm_peer", ds_module_path(a.ds_build))
        ds = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ds)
        ds.initialize(n, r)
    dtypes = {"float": torch.float32, "bfloat16": torch.bfloat16}
    for coll in a.colls.split(","):
        if a.peer == "deepspeed" and coll != "allreduce":
            continue
        for dname in a.dtypes.split(","):
            dt = dtypes[dname]
            for size in (int(s) for s in a.sizes.split(",")):
                count = size // dt.itemsize
                block = count // n
                if count <= 0 or (coll in ("reducescatter", "alltoall") and count % n):
                    continue
                # Inputs that encode source and index (small, so bf16 sums stay exact). float32 holds every
                # value exactly (at most 8 * 7 + 8 * 28 = 280) in half the bytes of the int64/float64 images
                # these were built from before: those took 1.9 s of a 64 MiB cell at 2 ranks on 2 cores.
                idx = (torch.arange(count, dtype=torch.int32) % 8).to(torch.float32)
                inp = (idx + 8 * r).to(dt)
                outc = count * n if coll == "allgather" else block if coll == "reducescatter" else count
                out = torch.empty(outc, dtype=dt)
                if coll == "allreduce":
                    work = inp.clone()
                    if ds is not None:
                        call = lambda: torch.ops.deepspeed.inference_all_reduce_(work)
                    else:
                        call = lambda: dist.all_reduce(work)
                    out = work
                elif coll == "broadcast":
                    # Root 0's input over every rank's buffer: a rank other than 0 starts from its own
                    # (8 * r + index), which the check below tells from root 0's.
                    work = inp.clone()
                    call = lambda: dist.broadcast(work, src=0)
                    out = work
                elif coll == "allgather":
                    call = lambda: dist.all_gather_into_tensor(out, inp)
                elif coll == "reducescatter":
                    call = lambda: dist.reduce_scatter_tensor(out, inp)
                else:
                    call = lambda: dist.all_to_all_single(out, inp)
                # One call checked against the serial reference before timing.
                err = ""
                t0 = time.perf_counter()
                try:
                    call()
                except (RuntimeError, ValueError) as e:
                    err = str(e).splitlines()[0][:160]
                first = time.perf_counter() - t0
                wrong = 0
                if not err:
                    # Rows per source broadcast against the index, never materialized n times (the repeats
                    # were 3.9 s of a 64 MiB all-gather cell at 2 ranks on 2 cores).
                    ranks = torch.arange(n, dtype=torch.float32).unsqueeze(1)
                    got = out.to(torch.float32)
                    if coll == "allreduce":
                        want = n * idx + 8 * ranks.sum()
                    elif coll == "broadcast":
                        want = idx
                    elif coll == "allgather":
                        got, want = got.view(n, count), idx.unsqueeze(0) + 8 * ranks
                    elif coll == "reducescatter":
                        want = n * idx[r * block:(r + 1) * block] + 8 * ranks.sum()
                    else:
                        mine = idx[r * block:(r + 1) * block].unsqueeze(0)
                        got, want = got.view(n, block), mine + 8 * ranks
                    wrong = int((got != want).sum())
                flag = torch.tensor([1.0 if err else 0.0, first], dtype=torch.float64)
                dist.all_reduce(flag, op=dist.ReduceOp.MAX)
                if flag[0].item():
                    if r == 0:
                        print(json.dumps({"peer": a.peer, "ranks": n, "coll": coll, "dtype": dname,
                                          "bytes": size, "rep": a.rep, "unsupported": err or "on a peer"}),
                              flush=True)
                    continue
                # gloo's slowest calls are milliseconds where the others take microseconds: the
                # warm-up's slowest iteration, its barrier included (gloo's barrier costs milliseconds
                # itself), caps the count so one cell stays near --cell-seconds; and the checked call's
                # time (the slowest rank's, agreed above) cuts the warm-up to the calls that fit that
                # time, at least one (a 64 MiB all-gather at 8 ranks took 0.78 s a call on the 16-core
                # host, and 3 warm-up calls of it were as many as its timed ones).
                warm = torch.zeros(1, dtype=torch.float64)
                nwarm = max(1, min(a.warmup, int(a.cell_seconds / max(flag[1].item(), 1e-9))))
                for _ in range(nwarm):
                    t0 = time.perf_counter()
                    dist.barrier()
                    call()
                    warm[0] = max(warm[0].item(), time.perf_counter() - t0)
                dist.all_reduce(warm, op=dist.ReduceOp.MAX)
                iters = iters_for(size, a)
                iters = max(a.iter_min, min(iters, int(a.cell_seconds / max(warm.item(), 1e-9))))
                t = torch.zeros(iters, dtype=torch.float64)
                for it in range(iters):
                    dist.barrier()
                    t0 = time.perf_counter()
                    call()
                    t1 = time.perf_counter()
                    if it >= 0:
                        t[it] = (t1 - t0) * 1e6
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                w = torch.tensor([wrong])
                dist.all_reduce(w)
                if r == 0:
                    s = t.sort().values
                    print(json.dumps({"peer": a.peer, "ranks": n, "coll": coll, "dtype": dname, "bytes": size,
                                      "rep": a.rep, "iters": iters, "time_min_us": round(s[0].item(), 3),
                                      "time_med_us": round(s[iters // 2].item(), 3), "wrong": int(w.item())}),
                          flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parent(a):
    if a.peer == "deepspeed":
        build_deepspeed(a.ds_src, a.ds_build)
    port = free_port()
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_SIZE=str(a.ranks),
               WORLD_SIZE=str(a.ranks), OMP_NUM_THREADS="1")
    args = [a for a in sys.argv[1:]]
    procs = [subprocess.Popen([sys.executable, __file__] + args + ["--rank", str(r)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=None if r == 0 else subprocess.DEVNULL) for r in range(a.ranks)]
    deadline = time.time() + a.timeout
    rc = 0
    try:
        for p in procs:
            left = max(1.0, deadline - time.time())
            rc = rc or p.wait(timeout=left)
    except subprocess.TimeoutExpired:
        print(f"torch_peers: {a.peer} at {a.ranks} ranks ran past {a.timeout:.0f} s", file=sys.stderr)
        rc = 124
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        # DeepSpeed's workspace names carry the address and port and are never unlinked by it.
        shm = "/dev/shm"
        tag = f"deepspeed_allreduce_buffer_{os.getuid()}_127.0.0.1_{port}_"
        for f in os.listdir(shm) if os.path.isdir(shm) else ():
            if f.startswith(tag):
                os.unlink(os.path.join(shm, f))
    return rc


def main():
    a = parse()
    if a.rank >= 0:
        child(a)
        return 0
    return parent(a)


if __name__ == "__main__":
    sys.exit(main())
