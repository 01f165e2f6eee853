#include "colls_common.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "harness.h"
#include "reduce_host.h"

static void store(relayDataType_t dt, double v, void* out) {
  switch (dt) {
    case relayInt8: *(int8_t*)out = (int8_t)(int64_t)v; break;
    case relayUint8: *(uint8_t*)out = (uint8_t)(int64_t)v; break;
    case relayInt32: *(int32_t*)out = (int32_t)v; break;
    case relayUint32: *(uint32_t*)out = (uint32_t)v; break;
    case relayInt64: *(int64_t*)out = (int64_t)v; break;
    case relayUint64: *(uint64_t*)out = (uint64_t)v; break;
    case relayFloat16: *(uint16_t*)out = relayFloatToHalf((float)v); break;
    case relayBfloat16: *(uint16_t*)out = relayFloatToBf16((float)v); break;
    case relayFloat32: *(float*)out = (float)v; break;
    case relayFloat64: *(double*)out = v; break;
    default: break;
  }
}

double tc_as_double(relayDataType_t dt, const void* p, size_t i) {
  switch (dt) {
    case relayInt8: return ((const int8_t*)p)[i];
    case relayUint8: return ((const uint8_t*)p)[i];
    case relayInt32: return ((const int32_t*)p)[i];
    case relayUint32: return ((const uint32_t*)p)[i];
    case relayInt64: return (double)((const int64_t*)p)[i];
    case relayUint64: return (double)((const uint64_t*)p)[i];
    case relayFloat16: return relayHalfToFloat(((const uint16_t*)p)[i]);
    case relayBfloat16: return relayBf16ToFloat(((const uint16_t*)p)[i]);
    case relayFloat32: return ((const float*)p)[i];
    case relayFloat64: return ((const double*)p)[i];
    default: return 0;
  }
}

void tc_value(relayDataType_t dt, relayRedOp_t op, int src, int dst, size_t e, void* out) {
  double v;
  if (op == relayProd) {
    v = ((size_t)src * 3 + (size_t)dst + e) % 5 == 0 ? 2 : 1; /* products stay tiny */
  } else if (dt == relayFloat16 || dt == relayBfloat16) {
    v = 1 + (double)((src * 5 + dst * 3 + e) % 7); /* <= 7: bf16 sums of 8 stay exact */
  } else {
    /* Integers and fp32/fp64: source in the tens, destination in the units. */
    v = 1 + src * 10 + dst + (double)(e % 5) * 0.0;
    v += (double)(e % 31);
    if (dt != relayFloat32 && dt != relayFloat64 && dt != relayUint8 && dt != relayUint32 &&
        dt != relayUint64 && (e & 1))
      v = -v; /* negative values for signed types */
  }
  store(dt, v, out);
}

size_t tc_send_elems(relayCollective_t coll, int A, size_t count) {
  return (coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll) ? (size_t)A * count
                                                                                   : count;
}
size_t tc_recv_elems(relayCollective_t coll, int A, size_t count) {
  return (coll == relayCollectiveAllGather || coll == relayCollectiveAllToAll) ? (size_t)A * count : count;
}

void tc_fill_input(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, int A, int me, size_t count,
                   void* buf) {
  size_t es = relayTypeSize(dt);
  int blocks = (coll == relayCollectiveReduceScatter || coll == relayCollectiveAllToAll) ? A : 1;
  for (int b = 0; b < blocks; b++)
    for (size_t e = 0; e < count; e++) tc_value(dt, op, me, b, e, (char*)buf + ((size_t)b * count + e) * es);
}

void tc_expected(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, int A, int me, size_t count,
                 void* out) {
  tc_expected_root(coll, dt, op, A, me, 0, count, out);
}

void tc_expected_root(relayCollective_t coll, relayDataType_t dt, relayRedOp_t op, int A, int me, int root,
                      size_t count, void* out) {
  size_t es = relayTypeSize(dt);
  if (count == 0) return;
  if (coll == relayCollectiveBroadcast) { /* the root's input everywhere */
    for (size_t e = 0; e < count; e++) tc_value(dt, op, root, 0, e, (char*)out + e * es);
    return;
  }
  if (coll == relayCollectiveAllGather || coll == relayCollectiveAllToAll) {
    for (int i = 0; i < A; i++)
      for (size_t e = 0; e < count; e++)
        tc_value(dt, op, i, coll == relayCollectiveAllToAll ? me : 0, e,
                 (char*)out + ((size_t)i * count + e) * es);
    return;
  }
  int dst = coll == relayCollectiveReduceScatter ? me : 0;
  char* in = malloc((size_t)A * count * es);
  const void* srcs[PLAN_MAX_SRCS];
  for (int i = 0; i < A; i++) {
    for (size_t e = 0; e < count; e++) tc_value(dt, op, i, dst, e, in + ((size_t)i * count + e) * es);
    srcs[i] = in + (size_t)i * count * es;
  }
  relayHostReduce(out, srcs, A, count, dt, op, op == relayAvg ? A : 0);
  free(in);
}

size_t tc_compare(relayDataType_t dt, const void* got, const void* want, size_t n, size_t* firstBad) {
  size_t es = relayTypeSize(dt), bad = 0;
  double tol = relayTypeTolerance(dt);
  for (size_t i = 0; i < n; i++) {
    int ok;
    if (tol == 0) {
      ok = memcmp((const char*)got + i * es, (const char*)want + i * es, es) == 0;
    } else {
      double g = tc_as_double(dt, got, i), w = tc_as_double(dt, want, i);
      ok = fabs(g - w) <= tol * fmax(1.0, fabs(w));
    }
    if (!ok && bad++ == 0 && firstBad) *firstBad = i;
  }
  return bad;
}

size_t tc_one_call(relayComm_t comm, int rank, relayCollective_t coll, int A, int G, const int* ranks,
                   const size_t* counts, relayDataType_t dt, relayRedOp_t op, int inPlace, const char* tag) {
  return tc_one_call_root(comm, rank, coll, A, G, ranks, counts, dt, op, 0, inPlace, tag);
}

size_t tc_one_call_root(relayComm_t comm, int rank, relayCollective_t coll, int A, int G, const int* ranks,
                        const size_t* counts, relayDataType_t dt, relayRedOp_t op, int root, int inPlace,
                        const char* tag) {
  relayLayout_t L = {G, A, ranks};
  int g = -1, me = -1;
  for (int i = 0; i < G * A; i++)
    if (ranks[i] == rank) {
      g = i / A;
      me = i % A;
    }
  size_t es = relayTypeSize(dt);
  size_t c = g >= 0 ? counts[g] : 0;
  size_t sn = tc_send_elems(coll, A, c), rn = tc_recv_elems(coll, A, c);
  size_t bufBytes = (sn > rn ? sn : rn) * es + 64;
  char* sbuf = malloc(bufBytes);
  char* rbuf = malloc(bufBytes);
  char* want = malloc(rn * es + 1);
  T_CHECK(sbuf && rbuf && want, "rank %d: out of memory", rank);
  const void* sendp;
  void* recvp;
  if (g < 0) { /* helper: sentinel buffers the library must not touch */
    memset(sbuf, TC_SENTINEL, bufBytes);
    memset(rbuf, TC_SENTINEL, bufBytes);
    sendp = sbuf;
    recvp = rbuf;
  } else {
    memset(rbuf, TC_POISON, bufBytes);
    memset(sbuf, TC_POISON, bufBytes);
    if (!inPlace) {
      tc_fill_input(coll, dt, op, A, me, c, sbuf);
      sendp = sbuf;
      recvp = rbuf;
    } else if (coll == relayCollectiveAllGather) {
      recvp = rbuf;
      sendp = rbuf + (size_t)me * c * es;
      tc_fill_input(coll, dt, op, A, me, c, (void*)sendp);
    } else if (coll == relayCollectiveReduceScatter) {
      sendp = sbuf;
      recvp = sbuf + (size_t)me * c * es;
      tc_fill_input(coll, dt, op, A, me, c, sbuf);
    } else { /* allreduce, broadcast, reduce */
      tc_fill_input(coll, dt, op, A, me, c, rbuf);
      sendp = rbuf;
      recvp = rbuf;
    }
    tc_expected_root(coll, dt, op, A, me, root, c, want);
    if (relayCollRooted(coll) && me != root) {
      /* A broadcast's non-root reads no input, a reduce's writes no output: that buffer stays as it was
       * (a reduce's: poison, or in place its input), and an odd active passes NULL for it, as NCCL
       * allows. */
      int bcast = coll == relayCollectiveBroadcast;
      if (!bcast) memcpy(want, recvp, rn * es);
      if (me % 2 && !inPlace) {
        if (bcast) sendp = NULL;
        else recvp = NULL;
      }
    }
  }
  relayResult_t res = relayCollRooted(coll) ? tc_run_root(coll, sendp, recvp, counts, dt, op, root, &L, comm)
                                            : tc_run(coll, sendp, recvp, counts, dt, op, &L, comm);
  T_CHECK(res == relaySuccess, "rank %d %s: %s (%s)", rank, tag, relayGetErrorString(res),
          relayGetLastError(comm));
  size_t bad = 0, first = 0;
  if (g < 0) {
    for (size_t i = 0; i < bufBytes; i++)
      if ((unsigned char)sbuf[i] != TC_SENTINEL || (unsigned char)rbuf[i] != TC_SENTINEL) {
        fprintf(stderr, "FAIL rank %d %s: helper buffer byte %zu was written\n", rank, tag, i);
        bad++;
        break;
      }
  } else {
    const void* out = recvp ? recvp : rbuf; /* a reduce's non-root that passed NULL: rbuf stays poison */
    bad = tc_compare(dt, out, want, rn, &first);
    if (bad)
      fprintf(stderr, "FAIL rank %d %s: %zu of %zu wrong, first at %zu: got %g want %g\n", rank, tag, bad, rn,
              first, tc_as_double(dt, out, first), tc_as_double(dt, want, first));
    /* Out of place: the send buffer is read only. In place: nothing past the
     * recv extent changes. */
    if (!inPlace) {
      char* fresh = malloc(sn * es + 1);
      tc_fill_input(coll, dt, op, A, me, c, fresh);
      if (memcmp(fresh, sbuf, sn * es) != 0) {
        fprintf(stderr, "FAIL rank %d %s: send buffer was modified\n", rank, tag);
        bad++;
      }
      free(fresh);
    }
  }
  free(sbuf);
  free(rbuf);
  free(want);
  return bad;
}

relayComm_t tc_comm_route(int rank, int nranks, const char* route, int timeoutMs) {
  relayConfig_t cfg = RELAY_CONFIG_INITIALIZER;
  /* Check mode on, unless the row sets RELAYCC_CHECK (a check-mode-0 sweep): the config leaves it to it. */
  cfg.checkMode = getenv("RELAYCC_CHECK") ? RELAY_CONFIG_UNDEF_INT : 1;
  cfg.timeoutMs = timeoutMs;
  T_CHECK(relayParseRoute(route, &cfg.route) == 0, "route %s", route);
  char job[160];
  snprintf(job, sizeof job, "%s-%s", t_job(), route);
  relayComm_t c = NULL;
  T_OK(relayCommInitShm(&c, nranks, rank, job, &cfg));
  return c;
}

relayResult_t tc_run(relayCollective_t coll, const void* s, void* r, const size_t* counts, relayDataType_t dt,
                     relayRedOp_t op, const relayLayout_t* L, relayComm_t comm) {
  switch (coll) {
    case relayCollectiveAllGather: return relayAllGather(s, r, counts, dt, L, comm, NULL);
    case relayCollectiveReduceScatter: return relayReduceScatter(s, r, counts, dt, op, L, comm, NULL);
    case relayCollectiveAllReduce: return relayAllReduce(s, r, counts, dt, op, L, comm, NULL);
    default: return relayAllToAll(s, r, counts, dt, L, comm, NULL);
  }
}

relayResult_t tc_run_root(relayCollective_t coll, const void* s, void* r, const size_t* counts,
                          relayDataType_t dt, relayRedOp_t op, int root, const relayLayout_t* L,
                          relayComm_t comm) {
  return coll == relayCollectiveBroadcast ? relayBroadcast(s, r, counts, dt, root, L, comm, NULL)
                                          : relayReduce(s, r, counts, dt, op, root, L, comm, NULL);
}

relayResult_t tc_run_rooted(relayCollective_t coll, const void* s, void* r, const size_t* counts,
                            relayDataType_t dt, int root, const int* set, int n, relayComm_t comm) {
  return coll == relayCollectiveScatter ? relayScatter(s, r, counts, dt, root, set, n, comm, NULL)
                                        : relayGather(s, r, counts, dt, root, set, n, comm, NULL);
}
