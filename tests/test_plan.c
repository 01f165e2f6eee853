/*
 * Plan tests, all in one process (no transport): call signatures go through
 * the builder, the checker and the reference executor, and the result is
 * compared with a serial reference.
 *
 *   test_plan sweep [seed [count]]   randomized sweep (seed 0 or absent: from
 *                                    the clock); prints the seed, and on a
 *                                    failure the one-config replay command
 *   test_plan config SEED            replay one configuration
 *   test_plan traffic                critical-path bytes vs link accounting
 *   test_plan unsupported            routes that cannot serve a key say so
 */
#include <fenv.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/common.h"
#include "harness.h"
#include "plan/plan.h"
#include "plan/routes.h"
#include "reduce_host.h"
#include "ref/ref.h"
#include "route/table.h"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#define MAXR 16
#define GUARD 64 /* bytes either side of every caller buffer */

typedef struct {
  uint64_t seed;
  relayCollective_t coll;
  int n, A, G;
  int ranks[MAXR];
  size_t counts[MAXR];
  relayDataType_t dtype;
  relayRedOp_t op;
  int route, depth, inPlace;
} cfg;

static int isReduce(relayCollective_t c) {
  return c == relayCollectiveReduceScatter || c == relayCollectiveAllReduce;
}
static int isUnsigned(relayDataType_t d) { return d == relayUint8 || d == relayUint32 || d == relayUint64; }

static void describe(const cfg* f, char* out, size_t len) {
  int w =
      snprintf(out, len, "%s n=%d A=%d G=%d %s op=%s route=%s depth=%d %s layout=", relayCollName(f->coll),
               f->n, f->A, f->G, relayTypeName(f->dtype), relayOpName(f->op), relayRouteName(f->route),
               f->depth, f->inPlace ? "in-place" : "out-of-place");
  for (int i = 0; i < f->A * f->G && w > 0 && (size_t)w < len; i++)
    w += snprintf(out + w, len - (size_t)w, "%s%d", i ? "," : "", f->ranks[i]);
  for (int g = 0; g < f->G && w > 0 && (size_t)w < len; g++)
    w += snprintf(out + w, len - (size_t)w, "%s%zu", g ? "," : " counts=", f->counts[g]);
}

/* ---- fills and the serial reference ---------------------------------------- */

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

/* The value active src of group g contributes at element e of the block it
 * owes active dst (dst = 0 when its input is one block). It hashes group,
 * source, destination and position, so an element from the wrong place or a
 * region boundary one off shows up. Reductions keep values small (|v| <= 7,
 * sums of 16 exact even in bf16); prod is 1 except at one source per element,
 * so nothing overflows and the product encodes that source. */
static int64_t code(const cfg* f, int g, int src, int dst, uint64_t e) {
  uint64_t h = mix(((uint64_t)g << 56) ^ ((uint64_t)src << 48) ^ ((uint64_t)dst << 40) ^ e ^ f->seed);
  int u = isUnsigned(f->dtype);
  if (!isReduce(f->coll)) return u ? (int64_t)(h % 251) : (int64_t)(h % 251) - 125;
  if (f->op == relayProd) {
    static const int64_t s[4] = {2, 3, -1, -2};
    if ((e + (uint64_t)dst + (uint64_t)g) % (uint64_t)f->A != (uint64_t)src) return 1;
    return u ? s[h % 2] : s[h % 4];
  }
  return u ? (int64_t)(h % 15) + 1 : (int64_t)(h % 15) - 7;
}

static void store(relayDataType_t dt, void* buf, size_t i, int64_t v) {
  switch (dt) {
    case relayInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
    case relayUint8: ((uint8_t*)buf)[i] = (uint8_t)v; break;
    case relayInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
    case relayUint32: ((uint32_t*)buf)[i] = (uint32_t)v; break;
    case relayInt64: ((int64_t*)buf)[i] = v; break;
    case relayUint64: ((uint64_t*)buf)[i] = (uint64_t)v; break;
    case relayFloat16: ((unsigned short*)buf)[i] = relayFloatToHalf((float)v); break;
    case relayBfloat16: ((unsigned short*)buf)[i] = relayFloatToBf16((float)v); break;
    case relayFloat32: ((float*)buf)[i] = (float)v; break;
    default: ((double*)buf)[i] = (double)v; break;
  }
}

static double load(relayDataType_t dt, const void* buf, size_t i) {
  switch (dt) {
    case relayFloat16: return relayHalfToFloat(((const unsigned short*)buf)[i]);
    case relayBfloat16: return relayBf16ToFloat(((const unsigned short*)buf)[i]);
    case relayFloat32: return ((const float*)buf)[i];
    case relayFloat64: return ((const double*)buf)[i];
    default: return 0;
  }
}

static int isFloat(relayDataType_t d) {
  return d == relayFloat16 || d == relayBfloat16 || d == relayFloat32 || d == relayFloat64;
}

static size_t sendElems(relayCollective_t c, int A, size_t n) {
  return c == relayCollectiveAllGather || c == relayCollectiveAllReduce ? n : (size_t)A * n;
}
static size_t recvElems(relayCollective_t c, int A, size_t n) {
  return c == relayCollectiveReduceScatter || c == relayCollectiveAllReduce ? n : (size_t)A * n;
}

/* Input of active j of group g. */
static void fillSend(const cfg* f, int g, int j, void* send) {
  size_t c = f->counts[g];
  int blocks = f->coll == relayCollectiveAllToAll || f->coll == relayCollectiveReduceScatter ? f->A : 1;
  for (int d = 0; d < blocks; d++)
    for (size_t e = 0; e < c; e++) store(f->dtype, send, (size_t)d * c + e, code(f, g, j, d, e));
}

/* Serial result of active j of group g: copies by definition, reductions over
 * the A inputs in active order with the reduce family the executors use. */
static void expected(const cfg* f, int g, int j, void* out, void* tmp /* A*count elements */) {
  size_t c = f->counts[g], es = relayTypeSize(f->dtype);
  int A = f->A;
  switch (f->coll) {
    case relayCollectiveAllGather:
    case relayCollectiveAllToAll:
      for (int i = 0; i < A; i++)
        for (size_t e = 0; e < c; e++)
          store(f->dtype, out, (size_t)i * c + e,
                code(f, g, i, f->coll == relayCollectiveAllGather ? 0 : j, e));
      break;
    default: {
      const void* srcs[PLAN_MAX_SRCS];
      int dst = f->coll == relayCollectiveReduceScatter ? j : 0;
      for (int i = 0; i < A; i++) {
        for (size_t e = 0; e < c; e++) store(f->dtype, tmp, (size_t)i * c + e, code(f, g, i, dst, e));
        srcs[i] = (const char*)tmp + (size_t)i * c * es;
      }
      relayHostReduce(out, srcs, A, c, f->dtype, f->op, f->op == relayAvg ? A : 0);
    }
  }
}

/* Number of elements that differ (floats: beyond tolerance of the largest
 * |input| summed). */
static size_t compare(const cfg* f, const void* got, const void* want, size_t n, size_t* first) {
  size_t es = relayTypeSize(f->dtype), bad = 0;
  double tol = relayTypeTolerance(f->dtype) * (f->op == relayProd ? 3.0 : 7.0 * f->A);
  for (size_t i = 0; i < n; i++) {
    int diff;
    if (isFloat(f->dtype) && isReduce(f->coll)) {
      double a = load(f->dtype, got, i), b = load(f->dtype, want, i);
      diff = !(a - b <= tol && b - a <= tol);
    } else {
      diff = memcmp((const char*)got + i * es, (const char*)want + i * es, es) != 0;
    }
    if (diff && !bad++) *first = i;
  }
  return bad;
}

/* ---- in-place aliasing ------------------------------------------------------- */

/* The reference executor snapshots every send of a step before it delivers
 * any receive, which hides a receive landing on what the same step sends when
 * SEND and RECV alias (in place). A transport may move them in any order, so
 * check it here, on physical addresses. A self pair whose source and target
 * are the same memory is a no-op copy and exempt. */
typedef struct {
  int buf;
  uint64_t lo, hi;
} phys;

static phys physOf(const cfg* f, size_t c, int j, planRef r, uint64_t n) {
  phys p = {r.buf == PLAN_BUF_SCRATCH ? 2 + r.slot : r.buf, r.off, r.off + n};
  if (!f->inPlace) return p;
  if (f->coll == relayCollectiveAllGather && r.buf == PLAN_BUF_SEND) {
    p.buf = PLAN_BUF_RECV;
    p.lo += (uint64_t)j * c;
    p.hi += (uint64_t)j * c;
  } else if (f->coll == relayCollectiveReduceScatter && r.buf == PLAN_BUF_RECV) {
    p.buf = PLAN_BUF_SEND;
    p.lo += (uint64_t)j * c;
    p.hi += (uint64_t)j * c;
  } else if (f->coll == relayCollectiveAllReduce && r.buf == PLAN_BUF_SEND) {
    p.buf = PLAN_BUF_RECV;
  }
  return p;
}

static int physOverlap(phys a, phys b) { return a.buf == b.buf && a.lo < b.hi && b.lo < a.hi; }

static const char* aliasHazard(const cfg* f, const relayPlan* p) {
  static char msg[256];
  for (int r = 0; r < p->nranks; r++) {
    int j = p->rank[r].activeIndex, g = p->rank[r].activeGroup;
    if (g < 0) continue;
    size_t c = f->counts[g];
    for (int s = 0; s < p->nSteps; s++) {
      const planStep* st = planRankStep(p, r, s);
      uint32_t selfRecv = 0;
      for (uint32_t a = 0; a < st->nRecv; a++) {
        const planXfer* x = &p->recvs[st->recvBase + a];
        phys px = physOf(f, c, j, x->ref, x->count);
        if (x->peer == r) { /* find the matching self send */
          uint32_t k = 0, seen = 0;
          for (; k < st->nSend; k++)
            if (p->sends[st->sendBase + k].peer == r && seen++ == selfRecv) break;
          selfRecv++;
          if (k < st->nSend) {
            const planXfer* y = &p->sends[st->sendBase + k];
            phys py = physOf(f, c, j, y->ref, y->count);
            if (py.buf == px.buf && py.lo == px.lo) continue;
          }
        }
        for (uint32_t b = 0; b < st->nSend; b++) {
          const planXfer* y = &p->sends[st->sendBase + b];
          if (physOverlap(px, physOf(f, c, j, y->ref, y->count))) {
            snprintf(msg, sizeof msg,
                     "rank %d step %d: in place, a receive from %d lands on what the step sends to %d", r, s,
                     x->peer, y->peer);
            return msg;
          }
        }
      }
      for (uint32_t a = 0; a < st->nOp; a++) {
        const planOp* o = &p->ops[st->opBase + a];
        phys d = physOf(f, c, j, o->dst, o->count);
        for (int k = 0; k < o->nsrc; k++) {
          phys q = physOf(f, c, j, p->srcs[o->srcBase + (uint32_t)k], o->count);
          if (physOverlap(d, q) && q.lo != d.lo) {
            snprintf(msg, sizeof msg, "rank %d step %d: in place, an op reads its destination shifted", r, s);
            return msg;
          }
        }
      }
    }
  }
  return NULL;
}

/* ---- one configuration ------------------------------------------------------- */

/* The relay route's documented coverage (src/plan/plan_relay.c). */
static int relayCovers(const cfg* f) {
  int H = f->n - f->A;
  if (H < 1) return 0;
  if (f->coll == relayCollectiveAllToAll && f->A > 2) return H >= f->A - 1;
  return 1;
}

static planKey keyOf(const cfg* f) {
  planKey k = planKeyInit(f->coll, f->n, f->G, f->A, f->ranks, f->counts, f->dtype);
  k.op = f->op;
  k.route = f->route;
  k.depth = f->depth;
  return k;
}

/* Returns 0 when the plan of f computes the serial result; otherwise writes why. */
static int runConfig(const cfg* f, char* why, size_t whyLen, int* relay, int* depth) {
  planKey key = keyOf(f);
  /* The API returns before building a plan when every count is zero. */
  int any = 0;
  for (int g = 0; g < f->G; g++) any |= f->counts[g] != 0;
  *relay = 0;
  *depth = 1;
  if (!any) return 0;
  relayPlan* p = NULL;
  relayResult_t res = relayPlanBuild(&key, &p);
  if (f->route == relayRouteRelay && (res == relayNotSupported) == relayCovers(f)) {
    snprintf(why, whyLen, "relay route answered %s, but its coverage says %s", relayGetErrorString(res),
             relayCovers(f) ? "supported" : "not supported");
    relayPlanFree(p);
    return 1;
  }
  if (res == relayNotSupported) { /* the library falls back to direct */
    key.route = relayRouteDirect;
    key.depth = 1;
    res = relayPlanBuild(&key, &p);
  }
  if (res != relaySuccess || !p) {
    snprintf(why, whyLen, "build failed: %s", relayGetErrorString(res));
    return 1;
  }
  *relay = p->route == relayRouteRelay;
  *depth = p->depth;
  char err[512];
  if (relayPlanCheck(p, err, sizeof err)) {
    snprintf(why, whyLen, "checker: %s", err);
    relayPlanFree(p);
    return 1;
  }
  const char* hz = aliasHazard(f, p);
  if (hz) {
    snprintf(why, whyLen, "%s", hz);
    relayPlanFree(p);
    return 1;
  }

  size_t es = relayTypeSize(f->dtype);
  int n = f->n, rc = 0;
  char* base[MAXR] = {0};  /* the buffer holding recv (and send in place) */
  char* sendb[MAXR] = {0}; /* out of place: separate send buffer */
  char* sendCopy[MAXR] = {0};
  void* sendp[MAXR] = {0};
  void* recvp[MAXR] = {0};
  size_t baseBytes[MAXR] = {0}, sendBytes[MAXR] = {0};
  for (int r = 0; r < n; r++) {
    int j, g = planActiveGroupOf(&key, r, &j);
    if (g < 0) continue;
    size_t c = f->counts[g];
    size_t sb = sendElems(f->coll, f->A, c) * es, rb = recvElems(f->coll, f->A, c) * es;
    if (f->inPlace) {
      int sendIsBase = f->coll == relayCollectiveReduceScatter;
      baseBytes[r] = sendIsBase ? sb : rb;
      base[r] = malloc(baseBytes[r] + 2 * GUARD);
      T_CHECK(base[r], "out of memory");
      memset(base[r], 0x5A, baseBytes[r] + 2 * GUARD);
      char* b0 = base[r] + GUARD;
      if (f->coll == relayCollectiveAllGather) {
        memset(b0, 0xC3, rb);
        sendp[r] = b0 + (size_t)j * c * es;
        recvp[r] = b0;
      } else if (sendIsBase) {
        sendp[r] = b0;
        recvp[r] = b0 + (size_t)j * c * es;
      } else {
        sendp[r] = recvp[r] = b0;
      }
      fillSend(f, g, j, sendp[r]);
    } else {
      baseBytes[r] = rb;
      sendBytes[r] = sb;
      base[r] = malloc(rb + 2 * GUARD);
      sendb[r] = malloc(sb + 2 * GUARD);
      sendCopy[r] = malloc(sb + 1);
      T_CHECK(base[r] && sendb[r] && sendCopy[r], "out of memory");
      memset(base[r], 0x5A, rb + 2 * GUARD);
      memset(base[r] + GUARD, 0xC3, rb);
      memset(sendb[r], 0x5A, sb + 2 * GUARD);
      sendp[r] = sendb[r] + GUARD;
      recvp[r] = base[r] + GUARD;
      fillSend(f, g, j, sendp[r]);
      memcpy(sendCopy[r], sendp[r], sb);
    }
  }
  if (relayRefRun(p, sendp, recvp, err, sizeof err)) {
    snprintf(why, whyLen, "reference executor: %s", err);
    rc = 1;
  }
  for (int r = 0; r < n && !rc; r++) {
    int j, g = planActiveGroupOf(&key, r, &j);
    if (g < 0) continue;
    size_t c = f->counts[g], rn = recvElems(f->coll, f->A, c);
    char* want = malloc(rn * es + 1);
    char* tmp = malloc((size_t)f->A * c * es + 1);
    T_CHECK(want && tmp, "out of memory");
    expected(f, g, j, want, tmp);
    size_t first = 0, bad = compare(f, recvp[r], want, rn, &first);
    if (bad) {
      snprintf(why, whyLen, "rank %d (group %d index %d): %zu of %zu elements wrong, first at %zu", r, g, j,
               bad, rn, first);
      rc = 1;
    }
    free(want);
    free(tmp);
    for (int side = 0; side < 2 && !rc; side++) {
      const char* gz = base[r] + (side ? GUARD + baseBytes[r] : 0);
      for (int b = 0; b < GUARD && !rc; b++)
        if ((unsigned char)gz[b] != 0x5A) {
          snprintf(why, whyLen, "rank %d: wrote outside its buffer", r);
          rc = 1;
        }
    }
    if (!rc && sendb[r] && memcmp(sendp[r], sendCopy[r], sendBytes[r]) != 0) {
      snprintf(why, whyLen, "rank %d: its send buffer changed", r);
      rc = 1;
    }
  }
  /* all-reduce: every active of a group holds the same bits */
  for (int g = 0; g < f->G && !rc && f->coll == relayCollectiveAllReduce; g++)
    for (int i = 1; i < f->A && !rc; i++)
      if (memcmp(recvp[f->ranks[g * f->A]], recvp[f->ranks[g * f->A + i]], f->counts[g] * es) != 0) {
        snprintf(why, whyLen, "all-reduce: active %d of group %d differs bitwise from active 0", i, g);
        rc = 1;
      }
  for (int r = 0; r < n; r++) {
    free(base[r]);
    free(sendb[r]);
    free(sendCopy[r]);
  }
  relayPlanFree(p);
  return rc;
}

/* ---- the sweep ----------------------------------------------------------------- */

static uint64_t drawCount(unsigned long long* s) {
  static const uint64_t fixed[] = {0, 1, 2, 3, 127, 128, 129, 255, 256, 257, 383, 384, 385, 1000, 1023, 1025};
  static const uint64_t primes[] = {5, 7, 13, 31, 131, 251, 509, 1021, 2053, 4093, 8191, 16381, 32749};
  uint64_t r = t_rand(s) % 100;
  if (r < 25) return fixed[t_rand(s) % (sizeof fixed / sizeof fixed[0])];
  if (r < 45) return primes[t_rand(s) % (sizeof primes / sizeof primes[0])];
  if (r < 65) return 1ull << (t_rand(s) % 16);
  if (r < 80) return 3ull << (t_rand(s) % 14);
  if (r < 98) return 1 + t_rand(s) % 20000;
  return 100000 + t_rand(s) % 900001; /* large: a few */
}

static void drawConfig(uint64_t seed, cfg* f) {
  unsigned long long s = seed;
  memset(f, 0, sizeof *f);
  f->seed = seed;
  f->n = 3 + (int)(t_rand(&s) % (MAXR - 2));
  /* Half the draws take the shapes the seed measured (A = 2, 4), the rest
   * any A the comm allows. */
  if (t_rand(&s) % 2 && f->n >= 4) f->A = t_rand(&s) % 2 ? 2 : 4;
  else f->A = 2 + (int)(t_rand(&s) % (uint64_t)(f->n - 1));
  int gmax = f->n / f->A;
  f->G = t_rand(&s) % 3 == 0 ? 1 : 1 + (int)(t_rand(&s) % (uint64_t)gmax);
  int perm[MAXR];
  for (int i = 0; i < f->n; i++) perm[i] = i;
  for (int i = f->n - 1; i > 0; i--) {
    int k = (int)(t_rand(&s) % (uint64_t)(i + 1)), t = perm[i];
    perm[i] = perm[k];
    perm[k] = t;
  }
  for (int i = 0; i < f->A * f->G; i++) f->ranks[i] = perm[i];
  f->coll = (relayCollective_t)(t_rand(&s) % RELAY_NUM_LAYOUT_COLLS);
  f->dtype = (relayDataType_t)(t_rand(&s) % relayNumTypes);
  f->op = isReduce(f->coll) ? (relayRedOp_t)(t_rand(&s) % relayNumOps) : relaySum;
  f->route = t_rand(&s) % 4 ? relayRouteRelay : relayRouteDirect;
  /* Depth 1 is the two-group schedule (and every fused call); 2, 4 and 8
   * tile the relay of an independent call (a forced depth too deep for the
   * message is clamped by the builder, so small counts test that too). */
  static const int depths[] = {1, 1, 2, 4, 8, 8};
  f->depth = depths[t_rand(&s) % 6];
  f->inPlace = f->coll != relayCollectiveAllToAll && t_rand(&s) % 2;
  int same = t_rand(&s) % 4 != 0;
  for (int g = 0; g < f->G; g++) f->counts[g] = same && g ? f->counts[0] : (size_t)drawCount(&s);
  /* Keep one configuration under ~8 MB of caller buffers. */
  size_t es = relayTypeSize(f->dtype);
  for (;;) {
    uint64_t bytes = 0;
    for (int g = 0; g < f->G; g++) bytes += (uint64_t)f->A * 2 * (uint64_t)f->A * f->counts[g] * es;
    if (bytes <= (8u << 20)) break;
    for (int g = 0; g < f->G; g++) f->counts[g] /= 2;
  }
}

static int runSeed(uint64_t seed, int* relay, int* depth, cfg* out) {
  cfg f;
  char why[600], d[400];
  drawConfig(seed, &f);
  *out = f;
  if (runConfig(&f, why, sizeof why, relay, depth) == 0) return 0;
  describe(&f, d, sizeof d);
  fprintf(stderr, "FAIL config %s\n  %s\n  replay: test_plan config %" PRIu64 "\n", d, why, seed);
  return 1;
}

static int cmdSweep(uint64_t seed, long count) {
  if (!seed) seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
  printf("plan sweep: seed %" PRIu64 ", %ld configurations (replay: test_plan sweep %" PRIu64 " %ld)\n", seed,
         count, seed, count);
  fflush(stdout);
  unsigned long long s = seed;
  uint64_t relayPlans = 0, byColl[RELAY_NUM_LAYOUT_COLLS] = {0}, fused = 0, inPlace = 0, a2 = 0, a4 = 0,
           byDepth[4] = {0};
  int fails = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < count; i++) {
    uint64_t cs = t_rand(&s);
    int relay = 0, depth = 1;
    cfg f;
    fails += runSeed(cs, &relay, &depth, &f);
    if (!relay) continue;
    relayPlans++;
    byColl[f.coll]++;
    fused += f.G > 1;
    inPlace += (uint64_t)f.inPlace;
    a2 += f.A == 2;
    a4 += f.A == 4;
    byDepth[depth >= 8 ? 3 : depth >= 4 ? 2 : depth >= 2 ? 1 : 0]++;
    if (fails >= 5) break;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("plan sweep: relay plans %" PRIu64 " (allgather %" PRIu64 ", reducescatter %" PRIu64
         ", allreduce %" PRIu64 ", alltoall %" PRIu64 "; A=2 %" PRIu64 ", A=4 %" PRIu64 ", other A %" PRIu64
         "; fused %" PRIu64 ", in place %" PRIu64 ")\n",
         relayPlans, byColl[0], byColl[1], byColl[2], byColl[3], a2, a4, relayPlans - a2 - a4, fused,
         inPlace);
  printf("plan sweep: relay plans by depth built: 1: %" PRIu64 ", 2: %" PRIu64 ", 4: %" PRIu64 ", 8: %" PRIu64
         "\n",
         byDepth[0], byDepth[1], byDepth[2], byDepth[3]);
  printf("plan sweep: %s in %.2f s\n", fails ? "FAILED" : "passed",
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return fails ? 1 : 0;
}

/* ---- critical-path bytes ----------------------------------------------------- */

static relayPlan* buildPlan(relayCollective_t coll, int n, int A, int G, size_t count, relayDataType_t dt,
                            int route, int depth) {
  cfg f;
  memset(&f, 0, sizeof f);
  f.coll = coll;
  f.n = n;
  f.A = A;
  f.G = G;
  for (int i = 0; i < A * G; i++) f.ranks[i] = i;
  for (int g = 0; g < G; g++) f.counts[g] = count;
  f.dtype = dt;
  f.op = relaySum;
  f.route = route;
  f.depth = depth;
  planKey k = keyOf(&f);
  relayPlan* p = NULL;
  T_CHECK(relayPlanBuild(&k, &p) == relaySuccess, "%s A=%d G=%d n=%d: no %s plan", relayCollName(coll), A, G,
          n, relayRouteName(route));
  char err[512];
  T_CHECK(relayPlanCheck(p, err, sizeof err) == 0, "%s", err);
  return p;
}

static uint64_t critical(relayCollective_t coll, int n, int A, int G, size_t count, relayDataType_t dt,
                         int route, int depth) {
  relayPlan* p = buildPlan(coll, n, A, G, count, dt, route, depth);
  uint64_t b = relayPlanCriticalPathBytes(p);
  relayPlanFree(p);
  return b;
}

/* The reference's two-group schedule (docs/design.md, "Sources and figures"), written
 * here from its description and not from the builder: the bytes each
 * directed link carries in step s of one group of actives 0..A-1 with
 * helpers A..n-1 in order. u = alignDown(m/(A+H), 128) through each helper;
 * the direct region travels in two parts (first part (A-1)u for
 * reduce-scatter, u otherwise; all-reduce A>=3: a reduce-scatter of A shards,
 * then their all-gather); the Latin all-to-all ships [directA | relay |
 * directB] with relay = directA = alignDown(m/3, 128). */
static int latinRef(int A, int H, int s, int d) {
  static const int p4[4] = {0, 2, 3, 1};
  if (A == 4 && H >= 4) return s ^ p4[d];
  if ((A & 1) && H >= A) return (s + d) % A;
  return ((d - s - 1) % A + A) % A;
}

static void twoGroupTraffic(relayCollective_t coll, int n, int A, uint64_t m, uint64_t es, int step,
                            uint64_t* out) {
  int H = n - A;
  memset(out, 0, (size_t)n * (size_t)n * sizeof *out);
#define ADD(a, b, x) out[(size_t)(a) * (size_t)n + (size_t)(b)] += (uint64_t)(x)*es
  if (coll == relayCollectiveAllToAll && A > 2) {
    uint64_t L = m / 3 / 128 * 128, d1 = L ? L : m / 2, d2 = m - d1 - L;
    for (int s = 0; s < A; s++)
      for (int d = 0; d < A; d++) {
        if (d == s) continue;
        int h = A + latinRef(A, H, s, d);
        ADD(s, d, step ? d2 : d1);
        if (step) ADD(h, d, L);
        else ADD(s, h, L);
      }
    return;
  }
  uint64_t u = m / (uint64_t)(A + H) / 128 * 128, direct = m - (uint64_t)H * u;
  for (int i = 0; i < A; i++)
    for (int h = A; h < n; h++) {
      if (step == 0) ADD(i, h, coll == relayCollectiveReduceScatter ? (uint64_t)(A - 1) * u : u);
      else ADD(h, i, coll == relayCollectiveAllGather ? (uint64_t)(A - 1) * u : u);
    }
  if (coll == relayCollectiveAllReduce && A > 2) {
    for (int j = 0; j < A; j++)
      for (int i = 0; i < A; i++) {
        uint64_t off, len;
        planSplit(direct, A, j, &off, &len);
        if (i == j) continue;
        if (step) ADD(j, i, len); /* owner j gathers its shard out */
        else ADD(i, j, len);      /* shard j to its owner */
      }
    return;
  }
  uint64_t d1 = u ? (coll == relayCollectiveReduceScatter ? (uint64_t)(A - 1) : 1) * u : m / 2;
  for (int i = 0; i < A; i++)
    for (int j = 0; j < A; j++)
      if (i != j) ADD(i, j, step ? direct - d1 : d1);
#undef ADD
}

/* Depth 1 of every shape is the two-group schedule, byte for byte on every
 * link in every step; fused calls keep it at any depth. */
static void checkTwoGroup(void) {
  static const size_t counts[] = {1, 127, 1000, 1021, 4093, 65537, 1000003, 1u << 20};
  int checked = 0;
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++)
    for (int n = 3; n <= 16; n++)
      for (int A = 2; A < n; A++) {
        if (c == relayCollectiveAllToAll && A > 2 && n - A < A - 1) continue; /* not supported */
        for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
          if (n != 8 && counts[ci] > 100000) continue;
          relayPlan* p =
              buildPlan((relayCollective_t)c, n, A, 1, counts[ci], relayBfloat16, relayRouteRelay, 1);
          T_CHECK(p->nSteps == 2 && p->depth == 1, "depth 1: %d steps", p->nSteps);
          uint64_t got[MAXR * MAXR], want[MAXR * MAXR];
          for (int s = 0; s < 2; s++) {
            relayPlanStepTraffic(p, s, got);
            twoGroupTraffic((relayCollective_t)c, n, A, counts[ci], 2, s, want);
            for (int q = 0; q < n * n; q++)
              T_CHECK(got[q] == want[q],
                      "%s n=%d A=%d count=%zu depth 1 step %d: link %d -> %d carries %" PRIu64
                      " bytes, the two-group schedule %" PRIu64,
                      relayCollName((relayCollective_t)c), n, A, counts[ci], s, q / n, q % n, got[q],
                      want[q]);
          }
          relayPlanFree(p);
          checked++;
        }
      }
  /* fused: the same plan traffic at depth 8 as at depth 1 */
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++)
    for (int A = 2; A <= 4; A += 2) {
      relayPlan* p1 =
          buildPlan((relayCollective_t)c, 8, A, 8 / A, 1000003, relayBfloat16, relayRouteRelay, 1);
      relayPlan* p8 =
          buildPlan((relayCollective_t)c, 8, A, 8 / A, 1000003, relayBfloat16, relayRouteRelay, 8);
      T_CHECK(p8->depth == 1 && p8->nSteps == 2, "%s A=%d fused at depth 8: depth %d",
              relayCollName((relayCollective_t)c), A, p8->depth);
      uint64_t a[64], b[64];
      for (int s = 0; s < 2; s++) {
        relayPlanStepTraffic(p1, s, a);
        relayPlanStepTraffic(p8, s, b);
        T_CHECK(memcmp(a, b, sizeof a) == 0, "%s A=%d fused: depth 8 differs from depth 1",
                relayCollName((relayCollective_t)c), A);
      }
      relayPlanFree(p1);
      relayPlanFree(p8);
    }
  printf("plan traffic: depth 1 is the two-group schedule on every link of every step (%d plans)\n", checked);
}

/* The seed's closed forms at depth T on 8 ranks, within alignment: the
 * critical path is exactly the unit count below times the aligned unit, plus
 * what alignment leaves (which the last direct part carries). */
static void checkClosedForms(void) {
  static const size_t odd[] = {1000003, 7654321, 536870911};
  const uint64_t es = 2;
  for (size_t ci = 0; ci < sizeof odd / sizeof odd[0]; ci++)
    for (int T = 1; T <= 8; T *= 2) {
      uint64_t m = odd[ci];
      /* 2 active, H = 6, all four: (T+1)u, u = align(m/(7T+1)); towards m/7 */
      for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++) {
        uint64_t units = 7u * (uint64_t)T + 1, u = m / units / 128 * 128, rem = m - units * u;
        uint64_t b = critical((relayCollective_t)c, 8, 2, 1, m, relayBfloat16, relayRouteRelay, T) / es;
        T_CHECK(b == (uint64_t)(T + 1) * u + rem,
                "%s A=2 T=%d m=%" PRIu64 ": %" PRIu64 " elements, want (T+1)u + %" PRIu64,
                relayCollName((relayCollective_t)c), T, m, b, rem);
        double ideal = (double)(T + 1) / (double)units * (double)m;
        T_CHECK(fabs((double)b - ideal) <= (double)units * 128,
                "%s A=2 T=%d: %" PRIu64 " vs (T+1)/(7T+1) = %.0f", relayCollName((relayCollective_t)c), T, b,
                ideal);
      }
      /* 4-active all-to-all: (T+1)u, u = align(sc/(2T+1)) */
      uint64_t units = 2u * (uint64_t)T + 1, u = m / units / 128 * 128;
      uint64_t b = critical(relayCollectiveAllToAll, 8, 4, 1, m, relayBfloat16, relayRouteRelay, T) / es;
      T_CHECK(b == (uint64_t)(T + 1) * u + (m - units * u), "alltoall A=4 T=%d: %" PRIu64, T, b);
      /* all-gather and reduce-scatter at 4 active: (3T+1)v, v = align(sc/(7T+1)) */
      units = 7u * (uint64_t)T + 1;
      uint64_t v = m / units / 128 * 128;
      for (int c = 0; c < 2; c++) {
        relayCollective_t coll = c ? relayCollectiveReduceScatter : relayCollectiveAllGather;
        b = critical(coll, 8, 4, 1, m, relayBfloat16, relayRouteRelay, T) / es;
        T_CHECK(b == (3u * (uint64_t)T + 1) * v + (m - units * v),
                "%s A=4 T=%d: %" PRIu64 ", want (3T+1)v + rest", relayCollName(coll), T, b);
      }
      /* 4-active all-reduce: 2(T+1)y, y = align(count/(12T)) from depth 2 (depth
       * 1 is the two-group count/4); the last shard tile also carries the
       * rest, split over the 4 owners */
      b = critical(relayCollectiveAllReduce, 8, 4, 1, m, relayBfloat16, relayRouteRelay, T) / es;
      if (T == 1) {
        /* two-group: u per cross link and the largest shard per intra link,
         * twice: ~count/4 */
        uint64_t u1 = m / 8 / 128 * 128, shard = (m - 4 * u1 + 3) / 4;
        T_CHECK(b == 2 * (shard > u1 ? shard : u1),
                "allreduce A=4 T=1: %" PRIu64 ", want count/4 within alignment", b);
      } else {
        uint64_t y = m / (12u * (uint64_t)T) / 128 * 128, rest = m - 12u * (uint64_t)T * y;
        T_CHECK(b >= 2u * (uint64_t)(T + 1) * y && b <= 2u * (uint64_t)(T + 1) * y + 2 * ((rest + 3) / 4),
                "allreduce A=4 T=%d: %" PRIu64 " elements, want 2(T+1)y = %" PRIu64 " (+ the rest %" PRIu64
                ")",
                T, b, 2u * (uint64_t)(T + 1) * y, rest);
      }
    }
  printf("plan traffic: depths 1, 2, 4, 8 give the seed's closed forms on 8 ranks\n");
}

/* Within a step every link carries operations of one size (the seed's
 * operation granularity; NCCL budgets channels per operation): checked on
 * the pipelined 4-active shapes in the steps before the last two (which
 * carry what alignment leaves); all-gather and all-reduce from 256 MiB,
 * reduce-scatter at every size. */
static void checkGranularity(void) {
  static const struct {
    relayCollective_t coll;
    size_t count;
    int uniform;
  } cases[] = {
      {relayCollectiveReduceScatter, 1000003, 1}, {relayCollectiveAllGather, 1000003, 0},
      {relayCollectiveAllReduce, 1000003, 0},     {relayCollectiveAllGather, 150000001, 1},
      {relayCollectiveAllReduce, 150000001, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    relayPlan* p = buildPlan(cases[i].coll, 8, 4, 1, cases[i].count, relayBfloat16, relayRouteRelay, 4);
    int mixed = 0;
    for (int s = 0; s + 2 < p->nSteps; s++) {
      uint64_t size = 0;
      for (int r = 0; r < p->nranks; r++) {
        const planStep* st = planRankStep(p, r, s);
        for (uint32_t x = 0; x < st->nSend; x++) {
          const planXfer* y = &p->sends[st->sendBase + x];
          if (y->peer == r) continue;
          if (!size) size = y->count;
          mixed |= y->count != size;
        }
      }
    }
    T_CHECK(mixed == !cases[i].uniform, "%s A=4 count %zu depth 4: operations %s within a step",
            relayCollName(cases[i].coll), cases[i].count, mixed ? "of mixed sizes" : "all of one size");
    relayPlanFree(p);
  }
  printf("plan traffic: pipelined 4-active operations of one size per step where the seed found it pays\n");
}

/* 2-active reduce-scatter: the owner reduces the arrivals of each step on the
 * side lane in that step (stage-major block), covering its block once; at
 * depth 1 one reduce at the end. */
static void checkSideLane(void) {
  for (int T = 1; T <= 8; T *= 2) {
    size_t m = 1000003;
    relayPlan* p = buildPlan(relayCollectiveReduceScatter, 8, 2, 1, m, relayFloat32, relayRouteRelay, T);
    for (int r = 0; r < 2; r++) {
      uint64_t covered = 0;
      int side = 0, main = 0;
      for (int s = 0; s < p->nSteps; s++) {
        const planStep* st = planRankStep(p, r, s);
        for (uint32_t x = 0; x < st->nOp; x++) {
          const planOp* o = &p->ops[st->opBase + x];
          T_CHECK(o->dst.buf == PLAN_BUF_RECV && o->dst.off == covered,
                  "rank %d step %d: reduce at %llu, want %llu", r, s, (unsigned long long)o->dst.off,
                  (unsigned long long)covered);
          covered += o->count;
          side += o->lane == 1;
          main += o->lane == 0;
          if (T > 1)
            T_CHECK(o->lane == 1 && x == 0, "rank %d step %d: the region's reduce belongs on the side lane",
                    r, s);
        }
        if (T > 1)
          T_CHECK(st->nOp == 1, "T=%d rank %d step %d: %u reduces, want one per step", T, r, s, st->nOp);
      }
      T_CHECK(covered == m, "rank %d: reduces cover %llu of %zu", r, (unsigned long long)covered, m);
      T_CHECK(T > 1 ? side == T + 1 && main == 0 : side == 0 && main == 1, "T=%d: %d side, %d main reduces",
              T, side, main);
    }
    relayPlanFree(p);
  }
  printf("plan traffic: 2-active reduce-scatter reduces each step's arrivals on the side lane\n");
}

static int cmdTraffic(void) {
  const relayDataType_t bf = relayBfloat16;
  const uint64_t es = 2;
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++) {
    relayCollective_t coll = (relayCollective_t)c;
    /* 2 active, 6 helpers: two groups of one chunk per link each, 2m/(H+2) =
     * m/4 of the per-rank message; independent and fused (4 groups of 2). */
    size_t m = 1u << 20; /* a multiple of 8*128: exact */
    for (int G = 1; G <= 4; G *= 4) {
      uint64_t b = critical(coll, 8, 2, G, m, bf, relayRouteRelay, 1);
      T_CHECK(b == m / 4 * es, "%s A=2 G=%d: critical path %" PRIu64 ", want m/4 = %zu", relayCollName(coll),
              G, b, m / 4 * es);
    }
    /* within alignment at an odd size: 2m/(H+2) <= path <= that + H*128 */
    size_t odd = 1000003;
    uint64_t b = critical(coll, 8, 2, 1, odd, bf, relayRouteRelay, 1) / es;
    T_CHECK(b >= 2 * odd / 8 && b <= 2 * odd / 8 + 6 * 128,
            "%s A=2 odd: %" PRIu64 " elements on the critical path", relayCollName(coll), b);
    /* 16 ranks: 14 helpers, 2m/16 */
    b = critical(coll, 16, 2, 1, m, bf, relayRouteRelay, 1);
    T_CHECK(b == m / 8 * es, "%s A=2 n=16: %" PRIu64, relayCollName(coll), b);
    /* the relay beats the direct exchange */
    T_CHECK(critical(coll, 8, 2, 1, m, bf, relayRouteDirect, 1) > b, "%s: relay no better than direct",
            relayCollName(coll));
  }
  /* 4 active on 8 ranks, independent and fused (2 groups of 4). */
  size_t sc = 3u << 18; /* all-to-all: a multiple of 3*128; others: of 8*128 */
  for (int G = 1; G <= 2; G++) {
    uint64_t b = critical(relayCollectiveAllToAll, 8, 4, G, sc, bf, relayRouteRelay, 1);
    T_CHECK(b == 2 * sc / 3 * es, "alltoall A=4 G=%d: %" PRIu64 ", want 2/3 of a segment = %zu", G, b,
            2 * sc / 3 * es);
    b = critical(relayCollectiveAllGather, 8, 4, G, 1u << 20, bf, relayRouteRelay, 1);
    T_CHECK(b == (1u << 19) * es, "allgather A=4 G=%d: %" PRIu64 ", want sendcount/2", G, b);
    b = critical(relayCollectiveReduceScatter, 8, 4, G, 1u << 20, bf, relayRouteRelay, 1);
    T_CHECK(b == (1u << 19) * es, "reducescatter A=4 G=%d: %" PRIu64 ", want recvcount/2", G, b);
    b = critical(relayCollectiveAllReduce, 8, 4, G, 1u << 20, bf, relayRouteRelay, 1);
    T_CHECK(b == (1u << 18) * es, "allreduce A=4 G=%d: %" PRIu64 ", want count/4", G, b);
  }
  /* all-to-all at an unaligned segment: directB absorbs the rest, so the path
   * is the segment minus the relay region */
  size_t seg = (1u << 20) + 5;
  uint64_t b = critical(relayCollectiveAllToAll, 8, 4, 1, seg, bf, relayRouteRelay, 1);
  T_CHECK(b == (seg - seg / 3 / 128 * 128) * es, "alltoall A=4 unaligned: %" PRIu64, b);
  /* Latin relays at other A: one region per link per step, 2/3 of a segment */
  for (int A = 3; A <= 8; A++) {
    b = critical(relayCollectiveAllToAll, 16, A, 1, sc, bf, relayRouteRelay, 1);
    T_CHECK(b == 2 * sc / 3 * es, "alltoall A=%d n=16: %" PRIu64, A, b);
  }
  /* A >= 3 all-reduce: ~2m/(A+H); the direct two-step form moves 2m/A */
  b = critical(relayCollectiveAllReduce, 12, 3, 1, 12u << 14, bf, relayRouteRelay, 1);
  T_CHECK(b == 2 * (12u << 14) / 12 * es, "allreduce A=3 n=12: %" PRIu64, b);
  checkTwoGroup();
  checkClosedForms();
  checkGranularity();
  checkSideLane();
  printf("plan traffic: passed\n");
  return 0;
}

/* ---- not supported ------------------------------------------------------------- */

static void expectUnsupported(relayCollective_t coll, int n, int A, int G, int route) {
  cfg f;
  memset(&f, 0, sizeof f);
  f.coll = coll;
  f.n = n;
  f.A = A;
  f.G = G;
  for (int i = 0; i < A * G; i++) f.ranks[i] = i;
  for (int g = 0; g < G; g++) f.counts[g] = 4096;
  f.dtype = relayFloat32;
  f.route = route;
  f.depth = 1;
  planKey k = keyOf(&f);
  relayPlan* p = NULL;
  relayResult_t r = relayPlanBuild(&k, &p);
  T_CHECK(r == relayNotSupported && p == NULL, "%s n=%d A=%d G=%d route %s: got %s", relayCollName(coll), n,
          A, G, relayRouteName(route), relayGetErrorString(r));
}

static int cmdUnsupported(void) {
  /* all-to-all with more actives than the Latin relay has helpers for */
  expectUnsupported(relayCollectiveAllToAll, 6, 4, 1, relayRouteRelay); /* H = 2 < A-1 */
  expectUnsupported(relayCollectiveAllToAll, 4, 3, 1, relayRouteRelay); /* H = 1 */
  expectUnsupported(relayCollectiveAllToAll, 12, 8, 1, relayRouteRelay);
  /* no helpers at all */
  for (int c = 0; c < RELAY_NUM_LAYOUT_COLLS; c++) {
    expectUnsupported((relayCollective_t)c, 2, 2, 1, relayRouteRelay);
    expectUnsupported((relayCollective_t)c, 5, 5, 1, relayRouteRelay);
    /* one-shot serves one group only */
    expectUnsupported((relayCollective_t)c, 8, 2, 2, relayRouteOneShot);
  }
  /* and the edges that are served */
  static const struct {
    relayCollective_t c;
    int n, A;
  } ok[] = {{relayCollectiveAllToAll, 7, 4},        {relayCollectiveAllToAll, 9, 5},
            {relayCollectiveAllToAll, 3, 2},        {relayCollectiveAllGather, 3, 2},
            {relayCollectiveReduceScatter, 16, 15}, {relayCollectiveAllReduce, 16, 15}};
  for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
    uint64_t b = critical(ok[i].c, ok[i].n, ok[i].A, 1, 3000, relayFloat32, relayRouteRelay, 1);
    T_CHECK(b > 0, "%s n=%d A=%d: empty plan", relayCollName(ok[i].c), ok[i].n, ok[i].A);
  }
  printf("plan unsupported: passed\n");
  return 0;
}

/* sweep [seed [count]]: seed 0 or absent draws one (printed with the replay command). */
static int runSweep(int argc, char** argv) {
  uint64_t seed = argc > 0 ? strtoull(argv[0], NULL, 0) : 0;
  long count = argc > 1 ? strtol(argv[1], NULL, 0) : 4000;
  return cmdSweep(seed, count);
}

/* The same sweep on a fixed seed, so a regression is repeatable. */
static int runSweepFixed(void) { return cmdSweep(1, 1500); }

/* config SEED: replays one configuration of a sweep (by hand). */
static int runReplay(int argc, char** argv) {
  if (argc < 1) {
    fprintf(stderr, "usage: test_plan config SEED\n");
    return 2;
  }
  int relay, depth;
  cfg f;
  return runSeed(strtoull(argv[0], NULL, 0), &relay, &depth, &f);
}

/* The host reduce in bf16 and fp16 (vectorized, one clone per instruction set, fp16 through F16C and bf16
 * through AVX2 where the CPU has them: src/reduce_host.c) against the scalar conversions, element by element,
 * bit for bit (a NaN: a quiet NaN): every bf16 / fp16 value as source 0 and as source 1 (in another order), a
 * sample as source 2, each op, an odd count, sources and output at their own offsets off alignment, then
 * 8-source products down to float subnormals. Each under five FPU modes (nearest, DAZ|FTZ, DAZ alone, toward
 * zero, upward: the conversions must not follow them, the adds do in both the kernel and the reference here),
 * on each path this CPU has (software; F16C for fp16, AVX2 for bf16), the paths also against each other.
 * Whatever path and clone a rank runs, a rank with another CPU computes the same. */
static float refLoad(relayDataType_t dt, unsigned short h) {
  return dt == relayBfloat16 ? relayBf16ToFloat(h) : relayHalfToFloat(h);
}
static unsigned short refStore(relayDataType_t dt, float f) {
  return dt == relayBfloat16 ? relayFloatToBf16(f) : relayFloatToHalf(f);
}

typedef struct {
  const char* name;
  int round;       /* fesetround's argument */
  unsigned dazftz; /* MXCSR bits: DAZ 0x40, FTZ 0x8000 (x86 only) */
} fpuMode;

/* Sets the mode (returns 0 where this CPU has no such bits: DAZ/FTZ off x86); fpuModeReset restores. */
static int fpuModeSet(const fpuMode* m) {
#if defined(__x86_64__) || defined(__i386__)
  if (m->dazftz) _mm_setcsr(_mm_getcsr() | m->dazftz);
#else
  if (m->dazftz) return 0;
#endif
  return fesetround(m->round) == 0;
}
static void fpuModeReset(void) {
#if defined(__x86_64__) || defined(__i386__)
  _mm_setcsr(_mm_getcsr() & ~0x8040u);
#endif
  fesetround(FE_TONEAREST);
}

/* dst = the reference fold of n elements: each element's sources in order in float, one rounding. */
static float refFold(relayDataType_t dt, relayRedOp_t op, const unsigned short* const* src, int nsrc,
                     size_t i) {
  float r = refLoad(dt, src[0][i]);
  for (int k = 1; k < nsrc; k++) {
    float v = refLoad(dt, src[k][i]);
    if (op == relaySum || op == relayAvg) r = r + v;
    else if (op == relayProd) r = r * v;
    else if (op == relayMax) r = r < v ? v : r;
    else r = r > v ? v : r;
  }
  if (op == relayAvg) {
    /* Read through a volatile so the compiler cannot make this r / (avg ? nsrc : 1): clang -O3 did, and r / 1
     * is r in the default mode only (DAZ makes a subnormal r zero: bf16 products, 0x8000 for 0x8001). */
    volatile float divisor = (float)nsrc;
    r = r / divisor;
  }
  return r;
}

/* One call against the reference (and against `other`, the software path's output, when given). Counts in
 * cover[0] outputs that rounded inexactly to a nonzero subnormal half and in cover[1] float-subnormal
 * results, so the modes are shown to have met what they change. */
static void exactCheck(relayDataType_t dt, relayRedOp_t op, const unsigned short* const* src, int nsrc,
                       size_t n, const unsigned short* d, const unsigned short* other, const char* mode,
                       int path, uint64_t cover[2]) {
  unsigned short inf = dt == relayBfloat16 ? 0x7f80 : 0x7c00, quiet = dt == relayBfloat16 ? 0x7fc0 : 0x7e00;
  for (size_t i = 0; i < n; i++) {
    float r = refFold(dt, op, src, nsrc, i);
    unsigned short want = refStore(dt, r);
    if ((want & 0x7fff) > inf) {
      /* A NaN's payload is the one thing not promised: IEEE leaves which input NaN an add returns to the
       * operand order, which a compiler may swap, and F16C keeps a payload the reference drops. */
      T_CHECK((d[i] & quiet) == quiet && (!other || (other[i] & quiet) == quiet),
              "%s %s, %s, path %d: element %zu: 0x%04x, want a quiet NaN", relayTypeName(dt), relayOpName(op),
              mode, path, i, d[i]);
      continue;
    }
    T_CHECK(d[i] == want,
            "%s %s, %s, path %d, %d sources: element %zu (0x%04x, 0x%04x, ...): 0x%04x, want 0x%04x",
            relayTypeName(dt), relayOpName(op), mode, path, nsrc, i, src[0][i], src[1][i], d[i], want);
    T_CHECK(!other || other[i] == d[i], "%s %s, %s: element %zu: path %d 0x%04x, the other 0x%04x",
            relayTypeName(dt), relayOpName(op), mode, i, path, d[i], other[i]);
    uint32_t rb;
    memcpy(&rb, &r, sizeof rb); /* by its bits: a compare under DAZ takes a subnormal for 0 */
    if (dt == relayFloat16 && (want & 0x7fff) > 0 && (want & 0x7fff) < 0x400 && refLoad(dt, want) != r)
      cover[0]++;
    if ((rb & 0x7f800000u) == 0 && (rb & 0x7fffffu) != 0) cover[1]++;
  }
}

static int cmdReduceExact(void) {
  enum { N = 65536 + 3, kPad = 8, kSmall = 993 }; /* every 16-bit value, and odd */
  static const fpuMode modes[] = {{"nearest", FE_TONEAREST, 0},
                                  {"DAZ|FTZ", FE_TONEAREST, 0x8040},
                                  {"DAZ", FE_TONEAREST, 0x40},
                                  {"toward zero", FE_TOWARDZERO, 0},
                                  {"upward", FE_UPWARD, 0}};
  enum { kModes = sizeof modes / sizeof modes[0] };
  unsigned short* buf[9];
  for (int k = 0; k < 9; k++) {
    buf[k] = malloc((N + kPad) * sizeof(unsigned short));
    T_CHECK(buf[k], "oom");
  }
  unsigned short* out[2] = {malloc((N + kPad) * sizeof(unsigned short)),
                            malloc((N + kPad) * sizeof(unsigned short))};
  T_CHECK(out[0] && out[1], "oom");
  /* The F16C path must be what this machine runs: every CPU with AVX2 has F16C (Intel from Haswell, AMD from
   * Piledriver), so an AVX2 CPU on the software path means the run-time check broke. */
  int paths = relayHostPath16Set(relayPath16Vector) == 0 ? 2 : 1;
#if defined(__x86_64__) && defined(__GNUC__)
  T_CHECK(paths == 2 || !__builtin_cpu_supports("avx2"), "an AVX2 CPU without the F16C path");
#endif
  T_CHECK(relayHostPath16Set(-1) == 0 && relayHostPath16() == (paths == 2 ? relayPath16Vector : 0),
          "the best path is not the default");
  relayDataType_t dts[2] = {relayBfloat16, relayFloat16};
  relayRedOp_t ops[5] = {relaySum, relayAvg, relayProd, relayMax, relayMin};
  uint64_t checked = 0, cover[kModes][2] = {{0}};
  for (int mi = 0; mi < kModes; mi++)
    for (int di = 0; di < 2; di++)
      for (int oi = 0; oi < 5; oi++)
        for (uint32_t k = 0; k < 65536; k += 8195) {
          relayDataType_t dt = dts[di];
          relayRedOp_t op = ops[oi];
          /* bf16's subnormals are float ones: under DAZ a max or min of two of them compares zeros, and which
           * bits come out (the operand as read, or the zero DAZ made of it) is the instruction the compiler
           * chose (MAXSS gives the zero, a compare and blend the operand), here and in the kernel alike. */
          if (dt == relayBfloat16 && modes[mi].dazftz && (op == relayMax || op == relayMin)) continue;
          /* Part 1: 3 sources, every value as sources 0 and 1. Part 2: 8 sources of small magnitudes
           * (exponents 0-15 of fp16, bf16's smallest 64), products into float subnormals. */
          for (int part = 0; part < 2; part++) {
            int nsrc = part == 0 ? 3 : 8;
            size_t n = part == 0 ? N : kSmall + k / 8195; /* tails of 1 to 8 past the last 32 */
            int off[9];
            /* source 2: -0 and +0 first (max and min of zeros of either sign), then a sample */
            unsigned c = k == 0 ? 0x8000 : k == 8195 ? 0 : k * 3 + 11;
            const unsigned short* src[8];
            for (int s = 0; s < nsrc; s++) {
              off[s] = (int)((k / 8195 + (uint32_t)s * 3 + (uint32_t)oi) % 4);
              unsigned short* p = buf[s] + off[s];
              for (size_t i = 0; i < n; i++)
                if (part == 0) p[i] = (unsigned short)(s == 0 ? i : s == 1 ? k + i * 7 : c);
                else { /* fp16: exponents 0-15, a subnormal to 2; bf16: 2^-17 to 2^15; either sign */
                  unsigned h = i * 40503u + (unsigned)s * 977u + k;
                  p[i] = (unsigned short)(dt == relayFloat16 ? h & 0xbfff
                                                             : (0x3700 + (h & 0x0fff)) | (h & 0x8000));
                }
              src[s] = p;
            }
            int doff = (int)((k / 8195 + (uint32_t)oi) % 4);
            for (int path = 0; path < paths; path++) { /* bf16 too: AVX2 on the F16C path's switch */
              T_CHECK(relayHostPath16Set(path) == 0, "path %d", path);
              unsigned short* d = out[path] + doff;
              for (size_t i = 0; i <= n; i++) d[i] = 0xdead & 0xfbff; /* poison, and a guard after */
              if (!fpuModeSet(&modes[mi])) {
                fpuModeReset();
                break;
              }
              relayHostReduce(d, (const void* const*)src, nsrc, n, dt, op, op == relayAvg ? nsrc : 0);
              exactCheck(dt, op, src, nsrc, n, d, path == 1 ? out[0] + doff : NULL, modes[mi].name, path,
                         cover[mi]);
              fpuModeReset();
              T_CHECK(d[n] == (0xdead & 0xfbff), "%s %s: wrote past the end", relayTypeName(dt),
                      relayOpName(op));
              checked += n;
            }
            relayHostPath16Set(-1);
          }
        }
  for (int mi = 0; mi < kModes; mi++)
    printf("reduce exact: %-11s %9llu rounded into subnormal halves, %8llu float subnormals\n",
           modes[mi].name, (unsigned long long)cover[mi][0], (unsigned long long)cover[mi][1]);
  /* The modes met what they change: outputs rounded into the subnormal halves (what rintf got wrong toward
   * zero), float subnormals into the store (DAZ; flushed before it under FTZ). */
  T_CHECK(cover[0][0] && cover[0][1] && cover[3][0] && cover[4][0], "a mode met no subnormal");
#if defined(__x86_64__) || defined(__i386__)
  T_CHECK(cover[2][1], "DAZ met no float subnormal");
#endif
  for (int k = 0; k < 9; k++) free(buf[k]);
  free(out[0]);
  free(out[1]);
  printf("reduce exact: %llu elements, bf16 and fp16 (%s), 5 ops, 5 FPU modes, bit for bit\n",
         (unsigned long long)checked, paths == 2 ? "software and F16C/AVX2 paths" : "software path only");
  return 0;
}

/* Every length from 1 to 70 and around the block (1024) and vector widths, 2 to 8 sources, each source and
 * the output at its own element offset (0 to 3: 16-bit elements 2, 4 or 6 bytes off a vector's alignment),
 * every op, bf16 and fp16 against the serial reference (sources folded in rank order in float, one
 * rounding), each on every path this CPU has (software; F16C for fp16, AVX2 for bf16): the vector clone's
 * head, body and tail all agree with it bit for bit. The output is poisoned before each call, and the
 * element after it must stay untouched; then again in place, the output one of the sources. */
static int cmdReduceTails(void) {
  enum { kMaxN = 2100, kMaxSrc = 8, kPad = 8 };
  unsigned short* buf[kMaxSrc + 1];
  static unsigned short want[kMaxN];
  for (int k = 0; k <= kMaxSrc; k++) {
    buf[k] = malloc((kMaxN + kPad) * sizeof(unsigned short));
    T_CHECK(buf[k], "oom");
  }
  static const size_t lens[] = {1023, 1024, 1025, 1031, 2047, 2048, 2049, 2090};
  size_t nlens = 70 + sizeof lens / sizeof lens[0];
  relayDataType_t dts[2] = {relayBfloat16, relayFloat16};
  relayRedOp_t ops[5] = {relaySum, relayAvg, relayProd, relayMax, relayMin};
  uint64_t checked = 0;
  int paths = relayHostPath16Set(relayPath16Vector) == 0 ? 2 : 1;
  for (int di = 0; di < 2 * paths; di++) /* the software path, then F16C/AVX2 where the CPU has it */
    for (int oi = 0; oi < 5; oi++)
      for (int nsrc = 2; nsrc <= kMaxSrc; nsrc += 3)
        for (size_t lip = 0; lip < 2 * nlens; lip++) {
          size_t li = lip % nlens;
          int inplace = lip >= nlens; /* the output is source li % nsrc */
          relayDataType_t dt = dts[di & 1];
          T_CHECK(relayHostPath16Set(di > 1) == 0, "path %d", di > 1);
          size_t n = li < 70 ? li + 1 : lens[li - 70];
          const void* srcs[kMaxSrc];
          int off[kMaxSrc + 1];
          for (int k = 0; k <= nsrc; k++) {
            off[k] = (int)((li + (size_t)k * 3) & 3);
            /* Values that encode source and index; fp16 kept to finite magnitudes, bf16 any non-NaN. */
            for (size_t i = 0; i < n; i++)
              buf[k][off[k] + i] = (unsigned short)((dt == relayFloat16 ? 0x3bff : 0x7f7f) &
                                                    (i * 40503u + (unsigned)k * 977u));
            if (k < nsrc) srcs[k] = buf[k] + off[k];
          }
          for (size_t i = 0; i < n; i++)
            want[i] = refStore(dt, refFold(dt, ops[oi], (const unsigned short* const*)srcs, nsrc, i));
          int ko = inplace ? (int)(li % (size_t)nsrc) : nsrc;
          unsigned short* out = buf[ko] + off[ko];
          if (!inplace)
            for (size_t i = 0; i < n; i++) out[i] = 0xdead & 0xfbff; /* poison */
          out[n] = 0xdead & 0xfbff;                                  /* the guard after */
          relayHostReduce(out, srcs, nsrc, n, dt, ops[oi], ops[oi] == relayAvg ? nsrc : 0);
          for (size_t i = 0; i < n; i++)
            T_CHECK(
                out[i] == want[i],
                "%s %s (path %d), %d sources, %zu elements, offsets %d/%d, output %d: element %zu 0x%04x, "
                "want 0x%04x",
                relayTypeName(dt), relayOpName(ops[oi]), di > 1, nsrc, n, off[0], off[ko], ko, i, out[i],
                want[i]);
          T_CHECK(out[n] == (0xdead & 0xfbff), "%s, %zu elements: wrote past the end", relayTypeName(dt), n);
          checked += n;
        }
  relayHostPath16Set(-1);
  for (int k = 0; k <= kMaxSrc; k++) free(buf[k]);
  printf(
      "reduce tails: %llu elements, lengths 1-70 and 1023-2090, 2/5/8 sources, offsets 0-3, in place and "
      "not, %s, bit for bit\n",
      (unsigned long long)checked, paths == 2 ? "software and F16C/AVX2 paths" : "software path only");
  return 0;
}

/* The host reduce alone, GB/s = (sources + 1 output) x bytes / time, best of 5 runs of as many calls as fit
 * ~20 ms: in cache (64 KiB per source) and from memory (8 MiB). What the shm routes' reduce can give at best;
 * docs/perf/2026-12-05-cpu-2core.md keeps the numbers. The output is checked against the reference (its first
 * and last elements) so a broken kernel cannot pass as fast. */
static int cmdReduceSpeed(void) {
  /* the last two: bf16 and fp16 on the software path (the fallback: no AVX2 or F16C, or a test forcing it) */
  relayDataType_t dts[5] = {relayFloat32, relayBfloat16, relayFloat16, relayBfloat16, relayFloat16};
  size_t sizes[2] = {64u << 10, 8u << 20};
  int nsrcs[2] = {2, 8};
  for (int si = 0; si < 2; si++)
    for (int ni = 0; ni < 2; ni++)
      for (int di = 0; di < 5; di++) {
        relayDataType_t dt = dts[di];
        if (di >= 3 && relayHostPath16() == relayPath16Software) continue; /* the rows above were it */
        if (di >= 3) relayHostPath16Set(relayPath16Software);
        size_t bytes = sizes[si], esz = relayTypeSize(dt), n = bytes / esz;
        int nsrc = nsrcs[ni];
        void* src[8];
        for (int k = 0; k < nsrc; k++) {
          src[k] = malloc(bytes);
          T_CHECK(src[k], "oom");
          for (size_t i = 0; i < n; i++) {
            float v = (float)((i + (size_t)k) & 7);
            if (dt == relayFloat32) ((float*)src[k])[i] = v;
            else ((unsigned short*)src[k])[i] = refStore(dt, v);
          }
        }
        void* dst = malloc(bytes);
        T_CHECK(dst, "oom");
        double best = 0;
        for (int run = 0; run < 5; run++) {
          uint64_t t0 = relayNowNs(), calls = 0;
          do {
            relayHostReduce(dst, (const void* const*)src, nsrc, n, dt, relaySum, 0);
            calls++;
          } while (relayNowNs() - t0 < 20000000ull);
          double gbs = (double)calls * (double)(nsrc + 1) * (double)bytes / (double)(relayNowNs() - t0);
          if (gbs > best) best = gbs;
        }
        size_t at[2] = {0, n - 1};
        for (int j = 0; j < 2; j++) {
          float want = 0;
          for (int k = 0; k < nsrc; k++) want += (float)((at[j] + (size_t)k) & 7);
          float got = dt == relayFloat32 ? ((float*)dst)[at[j]] : refLoad(dt, ((unsigned short*)dst)[at[j]]);
          T_CHECK(got == want, "%s element %zu: %g, want %g", relayTypeName(dt), at[j], got, want);
        }
        relayHostPath16Set(-1);
        printf("reduce speed: %-8s %d sources x %5zu KiB: %6.1f GB/s\n",
               di == 3   ? "bf16-sw"
               : di == 4 ? "half-sw"
                         : relayTypeName(dt),
               nsrc, bytes >> 10, best);
        for (int k = 0; k < nsrc; k++) free(src[k]);
        free(dst);
      }
  return 0;
}

static const tCase kCases[] = {
    {.name = "reduce_exact", .fn = cmdReduceExact, .timeoutS = 120},
    {.name = "reduce_tails", .fn = cmdReduceTails, .timeoutS = 120},
    {.name = "reduce_speed", .fn = cmdReduceSpeed, .timeoutS = 120},
    {.name = "sweep", .main = runSweep, .args = "0 4000", .timeoutS = 120},
    {.name = "sweep_fixed", .fn = runSweepFixed, .timeoutS = 120},
    {.name = "config", .main = runReplay, .manual = 1},
    {.name = "traffic", .fn = cmdTraffic, .timeoutS = 120},
    {.name = "unsupported", .fn = cmdUnsupported, .timeoutS = 120},
};

int main(int argc, char** argv) { return t_main(argc, argv, "plan", kCases, T_NCASES(kCases)); }
