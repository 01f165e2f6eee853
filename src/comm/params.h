/*
 * The one table of settings: every environment variable the library reads
 * (RELAYCC_*, the launcher's RANK / WORLD_SIZE / LOCAL_RANK), with its type,
 * default, range, scope and doc. params.c
 * is the only code in src/ that reads the environment.
 *
 * Scopes:
 *  - PROCESS: read once per process, before any comm exists (an interposer
 *    has no comm to read it from): RELAYCC_DEBUG, RELAYCC_SHIM. The library sets
 *    no environment variable (a user's process environment is not ours). A
 *    value outside the row's is said once on stderr and fails every comm's init.
 *  - RANK: each rank's own value, which may differ between ranks (its rank,
 *    its deadline, its topology file: the topology is agreed by content).
 *  - AGREED: shapes plans or protocols, so every rank of a comm runs with rank
 *    0's value (the init exchange carries them; a rank whose own value
 *    differs logs it once under RELAYCC_DEBUG).
 *
 * Resolution at init: config field > environment > default. Each rank
 * validates its own values against its row's type and allowed values
 * (relayParamAllowed); an invalid one on any rank fails init on every rank,
 * each naming the variable, the value and what is allowed (agreeParams in
 * init.c).
 */
#ifndef RELAY_PARAMS_H_
#define RELAY_PARAMS_H_

#include <stddef.h>

#include "relaycc.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  RELAY_PTYPE_INT,
  RELAY_PTYPE_BYTES,
  RELAY_PTYPE_BOOL,
  RELAY_PTYPE_ENUM,
  RELAY_PTYPE_STRING
} relayParamType;
typedef enum { RELAY_PSCOPE_PROCESS, RELAY_PSCOPE_RANK, RELAY_PSCOPE_AGREED } relayParamScope;

/* X(id, name, type, scope, default, lo, hi, config field, shown default, doc).
 * An ENUM's value is the index of its choice (relayParamChoices); a STRING's
 * default is shown only. A config field of -1: none. */
#define RELAY_PARAM_TABLE(X)                                                                                 \
  X(DEBUG, "RELAYCC_DEBUG", ENUM, PROCESS, 0, 0, 2, -1, "0",                                                 \
    "1 or INFO: print every recorded error and each comm's resolved settings (rank 0); 2 or TRACE: every "   \
    "rank's")                                                                                                \
  X(NCCL_LIB, "RELAYCC_NCCL_LIB", STRING, PROCESS, 0, 0, 0, -1, "unset",                                     \
    "path of the libnccl relaycc binds to (default: the libnccl.so.2 the process loaded, e.g. PyTorch's, "   \
    "else "                                                                                                  \
    "the system's)")                                                                                         \
  X(SHIM, "RELAYCC_SHIM", BOOL, PROCESS, 1, 0, 1, -1, "1",                                                   \
    "NCCL interposer (librelaycc_shim.so): 0 forwards every call to NCCL unchanged")                         \
  X(SHIM_COLLS, "RELAYCC_SHIM_COLLS", STRING, PROCESS, 0, 0, 0, -1, "all six",                               \
    "NCCL interposer: the collectives it may take (allreduce, reducescatter, allgather, alltoall, "          \
    "broadcast, reduce; comma list)")                                                                        \
  X(SHIM_NCCL, "RELAYCC_SHIM_NCCL", STRING, PROCESS, 0, 0, 0, -1, "unset",                                   \
    "NCCL interposer: path of the real libnccl it forwards to (default: the one the process loaded)")        \
  X(SHIM_TEST_SHM, "RELAYCC_SHIM_TEST_SHM", STRING, PROCESS, 0, 0, 0, -1, "unset",                           \
    "test hook: the interposer builds its state over the shm transport (CPU tests against a fake libnccl)")  \
  X(SHIM_TEST_FAIL_RANK, "RELAYCC_SHIM_TEST_FAIL_RANK", INT, PROCESS, -1, -1, 1023, -1, "-1",                \
    "test hook: that rank fails the interposer's state creation (every rank must then decline)")             \
  X(JOB, "RELAYCC_JOB", STRING, RANK, 0, 0, 0, -1, "relaycc",                                                \
    "shm rendezvous name when init is given NULL; the rendezvous is the name plus the launch (the three "    \
    "below)")                                                                                                \
  X(TORCHELASTIC_RUN_ID, "TORCHELASTIC_RUN_ID", STRING, RANK, 0, 0, 0, -1, "unset",                          \
    "as torchrun sets it: part of the shm rendezvous identity (with MASTER_ADDR, MASTER_PORT; none set: "    \
    "the parent pid)")                                                                                       \
  X(MASTER_ADDR, "MASTER_ADDR", STRING, RANK, 0, 0, 0, -1, "unset",                                          \
    "as torchrun sets it: part of the shm rendezvous identity")                                              \
  X(MASTER_PORT, "MASTER_PORT", STRING, RANK, 0, 0, 0, -1, "unset",                                          \
    "as torchrun sets it: part of the shm rendezvous identity (what tells two torchrun jobs on one host "    \
    "apart)")                                                                                                \
  X(RANK, "RELAYCC_RANK", INT, RANK, -1, -1, 1023, -1, "unset", "this rank when init is given rank < 0")     \
  X(NRANKS, "RELAYCC_NRANKS", INT, RANK, -1, -1, 1024, -1, "unset", "ranks when init is given nranks <= 0")  \
  X(ENV_RANK, "RANK", INT, RANK, -1, -1, 1023, -1, "unset",                                                  \
    "as torchrun sets it: the rank when RELAYCC_RANK is unset")                                              \
  X(ENV_WORLD_SIZE, "WORLD_SIZE", INT, RANK, -1, -1, 1024, -1, "unset",                                      \
    "as torchrun sets it: the ranks when RELAYCC_NRANKS is unset")                                           \
  X(LOCAL_RANK, "LOCAL_RANK", INT, RANK, -1, -1, 1023, -1, "unset",                                          \
    "relayCommInitNcclShm with cudaDevice < 0: the device (else rank modulo the device count)")              \
  X(TIMEOUT_MS, "RELAYCC_TIMEOUT_MS", INT, RANK, 120000, 1, 2147483647, 0, "120000",                         \
    "deadline of every wait; a dead or silent peer becomes relayRemoteError / relayTimeout naming rank and " \
    "step")                                                                                                  \
  X(SPIN, "RELAYCC_SPIN", INT, RANK, -1, -1, 1000000, 5, "auto",                                             \
    "polls (each a sched_yield) before a wait sleeps on a futex, after `RELAYCC_SPIN_BUSY`'s (auto, -1: "    \
    "`RELAYCC_SPIN_OWN` when every rank has a core, else `RELAYCC_SPIN_SHARED`)")                            \
  /* The waits' bounded spin (src/transport/shm/wait.c shmPause), measured on 2 cores under other            \
   * work (load 9-19), relaycc-bench --ranks N -A N, medians of 3-5 alternating rounds                       \
   * (docs/perf/2026-12-05-cpu-2core.md). Ranks > cores: sleeping at once (the old auto, 0 polls)            \
   * cost 3-7x below 64 KiB against yielding first: 4 ranks 4 KiB all-reduce 33.5 us at 0 polls,             \
   * 11.4 now; 8 ranks 226 -> 60. A fixed count lost at 1 MiB (8 ranks all-gather 9.5 -> 24 ms,              \
   * all-reduce 3.0 -> 5.2 ms: a yield can run another rank's whole slice), so there the polls               \
   * adapt: a spin that ends in a sleep halves the next ones, one that ends in progress doubles              \
   * them back (all-gather 12.0 ms at 0 polls, 12.6 adapted; all-reduce 2.94, 2.84). The time                \
   * bound ends a spin whose yields ran long (4 ranks 1 MiB all-reduce 1464 us at 200 polls                  \
   * unbounded, 645 at 50 us). */                                                                            \
  X(SPIN_OWN, "RELAYCC_SPIN_OWN", INT, RANK, 200, 0, 1000000, -1, "200",                                     \
    "`RELAYCC_SPIN` auto when every rank has a core: yielding polls before a wait sleeps")                   \
  X(SPIN_SHARED, "RELAYCC_SPIN_SHARED", INT, RANK, 200, 0, 1000000, -1, "200",                               \
    "`RELAYCC_SPIN` auto when ranks outnumber cores: yielding polls before a wait sleeps, halved after a "   \
    "spin that ended in a sleep, doubled back after one that ended in progress")                             \
  X(SPIN_US, "RELAYCC_SPIN_US", INT, RANK, 50, 1, 1000000, -1, "50",                                         \
    "a wait's polls end after this many microseconds without progress, polls left or not (then it sleeps)")  \
  /* 2 ranks on 2 cores, 5 alternating rounds: 200 busy polls took 4 KiB all-reduce 2.6 -> 2.2 us,           \
   * reduce-scatter 1.8 -> 1.4, 64 KiB all-gather 9.5 -> 8.9 (a sched_yield is a syscall per poll).          \
   * 100000 (was 200): the shm waits' spin is busy until RELAYCC_SPIN_US ends it, so it yields no more       \
   * where every rank has a core (the NCCL host polls still yield RELAYCC_SPIN's). A yield there gives the   \
   * core to whatever else runs on it (another job, a compiler) for the rest of that one's slice, 1-2 ms:    \
   * 2 ranks of the 2-core EPYC bound to a core each, a busy loop beside rank 1, 7 alternating launches of   \
   * relaycc-bench -c broadcast (direct) -n 100 (2026-12-05): 1 MiB took 1088-1815 us in 3 of 7 launches     \
   * with 200 busy polls and 200 yields, 61-321 without yields; 5 alternating rounds of -n 200, this         \
   * default against the old: broadcast 1 MiB 54-282 us against 64-1633 with the busy loop, 84-271 against   \
   * 126-712 without (other jobs at load 4-5; 4 old launches of 10 above 500 us, none new); all-reduce and   \
   * all-gather alike. The CPU-peers runs' slow 2-rank launches (16 KiB / 64 KiB / 1 MiB 9.3 / 31 / 464 us   \
   * against 2.4 / 6.4 / 58.8) were these (docs/perf/2026-12-05-cpu-bcast-2core.md). */                      \
  X(SPIN_BUSY, "RELAYCC_SPIN_BUSY", INT, RANK, 100000, 0, 1000000, -1, "100000",                             \
    "polls before `RELAYCC_SPIN`'s yielding ones that busy-poll with a CPU pause hint (no syscall); only "   \
    "when every rank has a core (else none)")                                                                \
  X(TOPO, "RELAYCC_TOPO", STRING, RANK, 0, 0, 0, 6, "detect / `cpu`",                                        \
    "topology preset (`mi350x`, `mi300x`, `h200`, `h200x2`, `cpu`) or file; ranks that differ route "        \
    "without a model")                                                                                       \
  X(ONESHOT_FAULT_RANK, "RELAYCC_ONESHOT_FAULT_RANK", INT, RANK, -1, -1, 1023, -1, "-1",                     \
    "test hook: that rank's one-shot setup fails as if a peer's region would not open")                      \
  X(ONESHOT_STALL_RANK, "RELAYCC_ONESHOT_STALL_RANK", INT, RANK, -1, -1, 1023, -1, "-1",                     \
    "test hook: that rank sleeps 5 ms before it copies a two-shot all-reduce's reduced shards out")          \
  X(NODE_ID, "RELAYCC_NODE_ID", INT, RANK, -1, -1, 1LL << 40, -1, "unset (host identity)",                   \
    "this rank's node: ranks with one value are one node, whatever their host (default: a hash of hostname " \
    "and "                                                                                                   \
    "boot id); a test splits one host into nodes with it. Wins over `RELAYCC_SHM_NODES`")                    \
  X(BW_FAULT_RANK, "RELAYCC_BW_FAULT_RANK", INT, RANK, -1, -1, 1023, -1, "-1",                               \
    "test hook: that rank's bandwidth-route setup fails as if a peer's region would not open")               \
  X(CHECK, "RELAYCC_CHECK", BOOL, AGREED, 0, 0, 1, 1, "0",                                                   \
    "1: every call starts with a small agreement round, so a bad argument on one rank or counts that "       \
    "differ "                                                                                                \
    "make **every** rank return the same error and the comm stays usable (0: \"After a rejected call\" "     \
    "below)")                                                                                                \
  X(ROUTE, "RELAYCC_ROUTE", ENUM, AGREED, 0, 0, 5, 2, "auto",                                                \
    "`auto`, `direct`, `relay`, `oneshot`, `native`, `bw`: force a route (one that cannot serve a call "     \
    "falls back to direct)")                                                                                 \
  X(DEPTH, "RELAYCC_DEPTH", INT, AGREED, 0, 0, 64, 3, "0 (model)", "force a pipeline depth")                 \
  X(SHM_RING_BYTES, "RELAYCC_SHM_RING_BYTES", BYTES, AGREED, 1 << 20, 4096, 1 << 30, 4, "1 MiB",             \
    "per-pair ring of the shm transport")                                                                    \
  /* The calling process does every copy itself, so more channels add no bandwidth: they split the pair's    \
   * ring. 2 is the per-peer count of a local path without direct links (p2pWantedLocal(0)), so by default   \
   * every task has 2 parts that use the whole ring. */                                                      \
  X(NCHANNELS, "RELAYCC_NCHANNELS", INT, AGREED, 2, 1, 64, -1, "2",                                          \
    "shm transport: P2P channels; each transfer is split into parts on channels (`src/p2p`), each pair's "   \
    "ring "                                                                                                  \
    "into one ring per channel")                                                                             \
  X(NCHANNELS_PER_NET_PEER, "RELAYCC_NCHANNELS_PER_NET_PEER", INT, AGREED, 0, 0, 64, -1, "0 (unset)",        \
    "channels per network peer, as `NCCL_NCHANNELS_PER_NET_PEER` (multi-node rules: the simulator, and "     \
    "`RELAYCC_SHM_NODES`)")                                                                                  \
  X(SHM_NODES, "RELAYCC_SHM_NODES", INT, AGREED, 1, 1, 1024, -1, "1",                                        \
    "test hook: the ranks as that many nodes of equal size, node-major (must divide nranks): rank r is on "  \
    "node "                                                                                                  \
    "r / (nranks / N), as if `RELAYCC_NODE_ID` said so on every rank (any transport)")                       \
  X(ONESHOT_MAX_BYTES, "RELAYCC_ONESHOT_MAX_BYTES", BYTES, AGREED, 1 << 20, 0, 1 << 30, -1, "1 MiB",         \
    "one-shot gate: per-rank bytes a source stages per destination (0 turns the one-shot off)")              \
  /* 1 KiB: at 3, 4 and 8 actives the two-shot took 1.7-1.8 / 1.9-2.2 / 2.9-3.4 us at 1 KiB against the      \
   * push form's 1.8-2.0 / 2.4-2.8 / 4.7-5.1, and 2.5 / 3.0 / 4.5 against 3.3 / 5.0 / 11.1 at 4 KiB; at 256  \
   * bytes the push form's one hop won (0.8-1.0 against 1.2-1.4 at 3 actives; 16-core Xeon, medians of 3,    \
   * docs/perf/2026-12-06-cpu-twoshot.md). */                                                                \
  X(ONESHOT_TWOSHOT_BYTES, "RELAYCC_ONESHOT_TWOSHOT_BYTES", BYTES, AGREED, 1 << 10, 0, 1 << 30, -1, "1 KiB", \
    "shm one-shot all-reduce of 3 or more ranks: per-rank bytes from which each rank stages its input once " \
    "in an area of its own and reduces its shard from every rank's (two hops; below: one push per peer, "    \
    "one hop); 0: never")                                                                                    \
  X(ONESHOT_PREPARE, "RELAYCC_ONESHOT_PREPARE", BOOL, AGREED, 0, 0, 1, -1, "0",                              \
    "1: create the one-shot region at init, so a first call under CUDA-graph capture can use it")            \
  X(ONESHOT_BLOCKS, "RELAYCC_ONESHOT_BLOCKS", INT, AGREED, 64, 1, 256, -1, "64",                             \
    "GPU one-shot kernel: blocks (the seed's MI350X value: 64 beat 32, 128 no better)")                      \
  X(ONESHOT_THREADS, "RELAYCC_ONESHOT_THREADS", INT, AGREED, 0, 0, 512, -1, "0 (auto)",                      \
    "GPU one-shot kernel: threads per block, 128, 256 or 512 (0: by size)")                                  \
  X(ONESHOT_LL_BYTES, "RELAYCC_ONESHOT_LL_BYTES", BYTES, AGREED, 256 << 10, 0, 1 << 30, -1, "256 KiB",       \
    "GPU one-shot: per-destination limit of the low-latency protocols (above it: the flag protocol; capped " \
    "at "                                                                                                    \
    "the region's LL capacity)")                                                                             \
  X(ONESHOT_LL128_BYTES, "RELAYCC_ONESHOT_LL128_BYTES", BYTES, AGREED, 64 << 10, 0, 1 << 30, -1, "64 KiB",   \
    "GPU one-shot: per-destination bytes from which LL128 (128-byte lines, 120 data bytes) replaces LL (8 "  \
    "data "                                                                                                  \
    "bytes per 16-byte line); 0: never")                                                                     \
  X(ONESHOT_WIDE, "RELAYCC_ONESHOT_WIDE", BOOL, AGREED, 0, 0, 1, -1, "0",                                    \
    "1: at A = 2, run the one-shot kernels compiled for 8 actives instead of the pair kernels (A/B "         \
    "measurement "                                                                                           \
    "only: the pair kernels were 0.40-0.65 us faster per call on 2 x H200)")                                 \
  /* 128 KiB x 16: ~0.35 us of link time per tile at the 370 GB/s h200x2 moves per direction, so 512 KB is   \
   * already 4 pipelined tiles; 16 slots keep ~5.7 us of pushes in flight per peer, more than a slot's round \
   * trip of fences and flag polls, in 2 MiB of staging per source (plan_bw.c, issue 19). */                 \
  X(BW_TILE_BYTES, "RELAYCC_BW_TILE_BYTES", BYTES, AGREED, 128 << 10, 64, 1 << 30, -1, "128 KiB",            \
    "bandwidth route: bytes per tile (rounded down to a multiple of 64); with the ring, the staging "        \
    "region's "                                                                                              \
    "size")                                                                                                  \
  X(BW_RING, "RELAYCC_BW_RING", INT, AGREED, 16, 0, 64, -1, "16",                                            \
    "bandwidth route: staging slots per source (staging is tile x ring per source, 2 MiB at the defaults); " \
    "0 "                                                                                                     \
    "turns the route off")                                                                                   \
  /* 64 KiB: 2 ranks of a 2-core EPYC, median of 300 calls: all-gather 64 KiB 9.8-11.9 us one-copy against   \
   * 22-32 us direct, all-to-all 6.8 against 18.6 one-shot, all-reduce 12.9 against 10.6 one-shot (a wash);  \
   * at 16 KiB the one-shot's all-reduce took half the one-copy's time. The router still prices each route   \
   * (sim.c bwOneCopySeconds); this is where the transport may take the path at all.                         \
   */                                                                                                        \
  X(SHM_CMA_BYTES, "RELAYCC_SHM_CMA_BYTES", BYTES, AGREED, 64 << 10, 0, 1LL << 40, -1, "64 KiB",             \
    "shm bandwidth route: from this many bytes of each rank's input on, ranks read and write each "          \
    "other's buffers in one copy (process_vm_readv / writev, probed and voted when the route is set up; "    \
    "where a peer cannot be reached every rank stays staged, `RELAYCC_DEBUG=1` says why) instead of "        \
    "through the staging ring; 0: never")                                                                    \
  /* 4 KiB: for 2 actives the router decides from here (sim.c: the one-shot's staged reads, topo.h           \
   * stagedReadBw, against the one-copy path). 2 ranks of a 2-core EPYC, medians of 400 calls, one-shot      \
   * against one copy: all-gather 4 KiB 2.5-3.3 us against 3.5-3.9, 16 KiB 9.4-11.3 against 5.3-5.4;         \
   * all-reduce 16 KiB 11.9-12.0 against 6.9-7.0; all-to-all 16 KiB 5.3-5.5 against 4.3-5.2. More actives    \
   * keep RELAYCC_SHM_CMA_BYTES: the one-copy path's costs per peer there are not measured yet, and 4 ranks  \
   * on 2 cores took twice the one-shot's time on it from 4 to 16 KiB.                                       \
   */                                                                                                        \
  X(SHM_CMA_PAIR_BYTES, "RELAYCC_SHM_CMA_PAIR_BYTES", BYTES, AGREED, 4 << 10, 0, 1LL << 40, -1, "4 KiB",     \
    "shm bandwidth route, 2 active ranks: the one-copy floor instead of `RELAYCC_SHM_CMA_BYTES` (the lower " \
    "of the two counts; `RELAYCC_SHM_CMA_BYTES=0` still turns the path off), and a broadcast's instead of "  \
    "`RELAYCC_SHM_CMA_ROOTED_BYTES` (the lower); from it the router weighs the one-copy path against the "   \
    "one-shot and direct")                                                                                   \
  /* 1 MiB: a broadcast's one copy saves the root its A-1 staged writes but reads at the cross-memory rate   \
   * (~10 GB/s here against ~23 for memcpy), so it wins once the staged copies leave the cache. 2-core EPYC, \
   * relaycc-bench --check 0, n 40 (2026-12-05), one copy against the staged rooted path: 8 ranks 64 KiB 44  \
   * against 44 us, 256 KiB 83 against 131, 1 MiB 277 against 393; 4 ranks 256 KiB 41 against 38, 1 MiB 135  \
   * against 142; 2 ranks 256 KiB 16 against 12.7, 1 MiB 60 against 54, 4 MiB 249 against direct's 417.      \
   * (A-1) x count >= 1 MiB takes it from 150 KiB at 8 ranks and 350 KiB at 4. 2 actives take the lower      \
   * of it and RELAYCC_SHM_CMA_PAIR_BYTES (4 KiB), as their other calls: on the 2-vCPU Xeon (2026-12-05,     \
   * docs/perf/2026-12-05-cpu-bcast2-2core.md, --root-index 1, n 1000, medians) one copy took 4K / 16K /     \
   * 64K / 256K in 1.57 / 1.83 / 3.06 / 8.18 us against staged 1.60 / 2.98 / 6.86 / 18.9 and direct 1.44 /   \
   * 2.85 / 6.11 / 19.7 (the member reads the root's clean lines; a staged copy crosses cores twice).        \
   */                                                                                                        \
  X(SHM_CMA_ROOTED_BYTES, "RELAYCC_SHM_CMA_ROOTED_BYTES", BYTES, AGREED, 1 << 20, 0, 1LL << 40, -1, "1 MiB", \
    "shm bandwidth route, broadcast: the one-copy path (each peer reads the root's buffer) from this many "  \
    "bytes the root sends in all ((actives - 1) x count x element size) on (reduce stays staged); 2 "        \
    "actives: the lower of it and `RELAYCC_SHM_CMA_PAIR_BYTES`; `RELAYCC_SHM_CMA_BYTES=0` still turns the "  \
    "path off")                                                                                              \
  /* 1100 ns: an 8-byte process_vm_readv (the one copy's fixed cost: syscall, pinning, page walk), the       \
   * least over the ranks of each one's min of 9 at the route's setup. On the 16-core Xeon device host       \
   * that least was 550-765 ns (12 launches at 2, 4 and 8 ranks; single ranks up to 946), and one copy       \
   * from the floors above wins there (4 and 8 ranks: 1.22x the staged path over 40 cells,                   \
   * docs/perf/2026-12-06-cpu-16core-floors-lines.md). On the 2-vCPU EPYC development host it was            \
   * 1573-1954 ns, and there at 2 ranks the staged path beat the one copy at every size (medians, 2          \
   * alternations: broadcast 4 KiB 0.71-0.99 against 2.96-3.04 us, 64 KiB 3.6-4.2 against 8.0; all-gather    \
   * 256 KiB 22.7-24.3 against 32.6-36.3; all-reduce 1 MiB 101-104 against 131-149). 1100 sits a factor      \
   * 1.4 from both. A 256 KiB read against a memcpy of it (1.9x and 3.5x typical) separated the hosts less   \
   * well: under load the ranks' ratios overlapped (Xeon up to 3.3x on one rank, EPYC down to 2.2x).         \
   */                                                                                                        \
  X(SHM_CMA_SLOW_NS, "RELAYCC_SHM_CMA_SLOW_NS", INT, AGREED, 1100, 0, 1000000000, -1, "1100",                \
    "shm bandwidth route: the one-copy path stays off when an 8-byte `process_vm_readv` (timed by every "    \
    "rank at the route's setup, the least taken) costs more than this many nanoseconds (`RELAYCC_DEBUG=1` "  \
    "says so, `=2` prints each rank's); 0: never measured, the floors alone decide")                         \
  /* auto = sm until measured: no 2-GPU machine has timed sm against ce yet (gputest_bw --movers does;       \
   * issue 19 measured one copy-engine peer copy at 380 GB/s one way, 370 each way at once, on 2 x H200).    \
   */                                                                                                        \
  X(BW_MOVER, "RELAYCC_BW_MOVER", ENUM, AGREED, 0, 0, 2, -1, "auto",                                         \
    "bandwidth route, direct path (registered windows) on NCCL: what moves the bytes. sm: the kernel's "     \
    "16-byte stores; ce: copy-engine peer copies (cudaMemcpyAsync, no SM) for all-gather and all-to-all "    \
    "between an entry and an exit barrier kernel, reduce-scatter, all-reduce and staged calls keep sm; "     \
    "auto: "                                                                                                 \
    "sm until measured")                                                                                     \
  X(NCCL_NATIVE, "RELAYCC_NCCL_NATIVE", BOOL, AGREED, 1, 0, 1, -1, "1",                                      \
    "0: never run NCCL's own collectives (the direct route then always uses relaycc's send/recv plan)")      \
  X(NCCL_PRECONNECT, "RELAYCC_NCCL_PRECONNECT", BOOL, AGREED, 1, 0, 1, -1, "1",                              \
    "connect every NCCL pair at init (NCCL's lazy connect has no deadline)")

typedef enum {
#define RELAY_PARAM_ENUM_(id, ...) RELAY_P_##id,
  RELAY_PARAM_TABLE(RELAY_PARAM_ENUM_)
#undef RELAY_PARAM_ENUM_
      RELAY_P_COUNT
} relayParamId;

typedef struct {
  const char* name;
  relayParamType type;
  relayParamScope scope;
  long long def, lo, hi;
  int configField; /* index of the relayConfig_t field (relayParamsResolve), -1: none */
  const char* shownDefault;
  const char* doc;
} relayParamDef;

extern const relayParamDef relayParamDefs[RELAY_P_COUNT];

/* Where a resolved value came from. */
enum { RELAY_PSRC_DEFAULT, RELAY_PSRC_ENV, RELAY_PSRC_CONFIG, RELAY_PSRC_AGREED };

#define RELAY_PARAM_TEXT 256
typedef struct relayParams {
  long long v[RELAY_P_COUNT];
  unsigned char src[RELAY_P_COUNT];
  char text[RELAY_P_COUNT][RELAY_PARAM_TEXT]; /* STRING values; the others' text as given */
} relayParams;

/* One rank's resolution: config field > environment > default, each value
 * checked against its row. On the first invalid value that row keeps its
 * default (so the rank can still reach the init exchange and tell the
 * others), *badId names it, and the message lands in why ("NAME=value: ...");
 * returns relayInvalidArgument. A config that is not a relayConfig_t
 * (magic, size) fails at once (*badId stays -1): init then resolves without
 * it and tells the others (init.c). */
relayResult_t relayParamsResolve(relayParams* p, const relayConfig_t* cfg, int* badId, char* why,
                                 size_t whyLen);

/* What row id allows, as text ("one of 0, 128, 256, 512", "an integer in [0, 64]", ...): what an
 * invalid value's error says and the README table shows. Returns buf. */
const char* relayParamAllowed(relayParamId id, char* buf, size_t len);
/* The choices of an ENUM row, NULL-terminated ("auto", "direct", ...). */
const char* const* relayParamChoices(relayParamId id);

/* PROCESS scope: read once per process on first use. */
long long relayParamProcess(relayParamId id);
/* RELAYCC_DEBUG: 0 off, 1 info, 2 trace (PROCESS scope). */
int relayDebugLevel(void);

/* A STRING row's value in this process's environment, NULL when unset: for
 * what is read outside any comm (the shm rendezvous name of a launch). */
const char* relayParamEnvText(relayParamId id);

/* Print the resolved table (one line per row, NCCL style) to f, each line prefixed. */
void relayParamsPrint(const relayParams* p, const char* prefix, void* file);
/* The value of row id as text (the chosen choice for an ENUM). */
const char* relayParamText(const relayParams* p, relayParamId id, char* buf, size_t len);
/* The config field of row id ("timeoutMs"), NULL when it has none. */
const char* relayParamFieldName(relayParamId id);
/* "process", "rank" or "agreed". */
const char* relayParamScopeName(relayParamScope scope);

#ifdef __cplusplus
}
#endif
#endif
