#include "comm/common.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "comm/coll.h"
#include "comm/comm.h"
#include "comm/params.h"

static const struct {
  const char* name;
  size_t size;
} kTypes[relayNumTypes] = {
    [relayInt8] = {"int8", 1},         [relayUint8] = {"uint8", 1},   [relayInt32] = {"int32", 4},
    [relayUint32] = {"uint32", 4},     [relayInt64] = {"int64", 8},   [relayUint64] = {"uint64", 8},
    [relayFloat16] = {"half", 2},      [relayFloat32] = {"float", 4}, [relayFloat64] = {"double", 8},
    [relayBfloat16] = {"bfloat16", 2},
};
static const char* const kOps[relayNumOps] = {"sum", "prod", "max", "min", "avg"};

size_t relayTypeSize(relayDataType_t dt) { return ((unsigned)dt < relayNumTypes) ? kTypes[dt].size : 0; }
const char* relayTypeName(relayDataType_t dt) {
  return ((unsigned)dt < relayNumTypes) ? kTypes[dt].name : "?";
}
const char* relayOpName(relayRedOp_t op) { return ((unsigned)op < relayNumOps) ? kOps[op] : "?"; }

int relayParseType(const char* s, relayDataType_t* out) {
  static const struct {
    const char* alias;
    relayDataType_t dt;
  } aliases[] = {{"int8", relayInt8},       {"char", relayInt8},     {"uint8", relayUint8},
                 {"int32", relayInt32},     {"int", relayInt32},     {"uint32", relayUint32},
                 {"int64", relayInt64},     {"uint64", relayUint64}, {"half", relayFloat16},
                 {"float16", relayFloat16}, {"fp16", relayFloat16},  {"float", relayFloat32},
                 {"float32", relayFloat32}, {"fp32", relayFloat32},  {"double", relayFloat64},
                 {"float64", relayFloat64}, {"fp64", relayFloat64},  {"bfloat16", relayBfloat16},
                 {"bf16", relayBfloat16}};
  if (!s) return -1;
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (strcasecmp(s, aliases[i].alias) == 0) {
      *out = aliases[i].dt;
      return 0;
    }
  return -1;
}
int relayParseOp(const char* s, relayRedOp_t* out) {
  for (int i = 0; s && i < relayNumOps; i++)
    if (strcasecmp(s, kOps[i]) == 0) {
      *out = (relayRedOp_t)i;
      return 0;
    }
  return -1;
}

/* The routes' names from their rows (relaycc.h RELAY_ROUTE_TABLE); values that skipped a number would leave a
 * NULL inside RELAYCC_ROUTE's choices, which the assertion below refuses. */
#define RELAY_ROUTE_NAME_(id, value, name) [id] = name,
const char* const relayRouteNames[] = {RELAY_ROUTE_TABLE(RELAY_ROUTE_NAME_)[relayNumRoutes] = NULL};
#undef RELAY_ROUTE_NAME_
#define RELAY_ROUTE_COUNT_(id, value, name) +1
_Static_assert(0 RELAY_ROUTE_TABLE(RELAY_ROUTE_COUNT_) == relayNumRoutes, "route values 0..relayNumRoutes-1");
#undef RELAY_ROUTE_COUNT_

const char* relayRouteName(int route) {
  return (unsigned)route < relayNumRoutes ? relayRouteNames[route] : "?";
}

int relayParseRoute(const char* s, int* out) {
  if (!s) return -1;
  if (strcasecmp(s, "one-shot") == 0) s = "oneshot";
  for (int i = 0; i < relayNumRoutes; i++)
    if (strcasecmp(s, relayRouteNames[i]) == 0) {
      *out = i;
      return 0;
    }
  return -1;
}

#define RELAY_COLL_ROW_(id, name, call, kind, reduces, counts, sendBlocks, recvBlocks, nccl, tc, aliases) \
  [id] = {name, call, kind, reduces, sendBlocks, recvBlocks, counts, nccl, tc, aliases},
const relayCollRow relayCollRows[relayNumCollectives] = {RELAY_COLL_TABLE(RELAY_COLL_ROW_)};
#undef RELAY_COLL_ROW_
/* Every relayCollective_t has its row, at its own value, and the layout rows come first. */
#define RELAY_COLL_COUNT_(...) +1
_Static_assert(0 RELAY_COLL_TABLE(RELAY_COLL_COUNT_) == relayNumCollectives, "a row per relayCollective_t");
#undef RELAY_COLL_COUNT_
#define RELAY_COLL_ORDER_(id, name, call, kind, ...)                                  \
  _Static_assert(((kind) == relayKindLayout) == ((int)(id) < RELAY_NUM_LAYOUT_COLLS), \
                 #id ": layout rows first");
RELAY_COLL_TABLE(RELAY_COLL_ORDER_)
#undef RELAY_COLL_ORDER_

const char* relayCollName(relayCollective_t coll) {
  const relayCollRow* row = relayCollRowOf(coll);
  return row ? row->name : "?";
}

/* word is one of the space-separated words of list */
static int wordIn(const char* list, const char* word) {
  size_t n = strlen(word);
  for (const char* p = list; *p;) {
    size_t len = strcspn(p, " ");
    if (len == n && strncasecmp(p, word, n) == 0) return 1;
    p += len;
    p += strspn(p, " ");
  }
  return 0;
}

int relayParseCollAll(const char* s, relayCollective_t* out) {
  for (int i = 0; s && *s && i < relayNumCollectives; i++)
    if (relayCollPlanned((relayCollective_t)i) &&
        (strcasecmp(s, relayCollRows[i].name) == 0 || wordIn(relayCollRows[i].aliases, s))) {
      *out = (relayCollective_t)i;
      return 0;
    }
  return -1;
}

int relayParseColl(const char* s, relayCollective_t* out) {
  relayCollective_t c;
  if (relayParseCollAll(s, &c) != 0 || !relayCollIsLayout(c)) return -1;
  *out = c;
  return 0;
}

/* hostname + boot id: two containers on one host share the boot id but may
 * differ in hostname (and then are two nodes to us, which is safe: IPC is
 * only ever attempted within one); two hosts cloned from one image share a
 * hostname, never a boot id. */
uint64_t relayRandom64(void) {
  uint64_t x = 0;
  if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x)
    x = relayNowNs() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&x;
  return x ? x : 0x9e3779b97f4a7c15ull;
}

uint64_t relayHostIdentity(void) {
  char buf[512];
  memset(buf, 0, sizeof buf);
  if (gethostname(buf, 255) != 0) snprintf(buf, 256, "unknown-host");
  buf[255] = 0;
  FILE* f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f) {
    if (!fgets(buf + 256, 255, f)) buf[256] = 0;
    fclose(f);
  }
  return relayHash64(RELAY_HASH_SEED, buf, sizeof buf);
}

double relayTypeTolerance(relayDataType_t dt) {
  switch (dt) {
    case relayFloat16: return 1e-2;  /* 11-bit mantissa, a few roundings */
    case relayBfloat16: return 2e-2; /* 8-bit mantissa */
    case relayFloat32: return 1e-5;
    case relayFloat64: return 1e-12;
    default: return 0.0; /* integers are exact */
  }
}

/* Errors raised before a comm exists (init) land here, per thread. */
static _Thread_local char tlsLastError[1024];

void relayErrorContext(const struct relayComm* comm, char* buf, size_t len) {
  int n = snprintf(buf, len, "%s (rank %d", comm->curCallName ? comm->curCallName : "relaycc", comm->rank);
  if (n >= 0 && (size_t)n < len && atomic_load(&((struct relayComm*)comm)->inCall) && comm->inPt2pt)
    n += snprintf(buf + n, len - (size_t)n, ", point-to-point"); /* outside the call numbering */
  else if (n >= 0 && (size_t)n < len && atomic_load(&((struct relayComm*)comm)->inCall))
    n += snprintf(buf + n, len - (size_t)n, ", call #%llu", (unsigned long long)comm->callSeq);
  if (n >= 0 && (size_t)n < len && atomic_load(&((struct relayComm*)comm)->inCall) && comm->curStep >= 0)
    n += snprintf(buf + n, len - (size_t)n, ", step %d", comm->curStep);
  if (n >= 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ")");
}

/* buf must not be text. */
const char* relayErrorQuote(const struct relayComm* comm, const char* text, char* buf, size_t len) {
  char needle[32];
  snprintf(needle, sizeof needle, " (rank %d", comm->rank);
  const char* at = strstr(text, needle);
  size_t head = at ? (size_t)(at - text) : 0;
  /* Only the prefix counts: a function name (no blank, no colon) right before it. */
  const char* rest = at ? at + strlen(needle) : NULL;
  if (at && head > 0 && strcspn(text, " :") == head && rest[0] == ',' && rest[1] == ' ') {
    snprintf(buf, len, "%.*s (%s", (int)head, text, rest + 2); /* call and step stay */
  } else if (at && head > 0 && strcspn(text, " :") == head && rest[0] == ')') {
    const char* fn = comm->curCallName ? comm->curCallName : "relaycc";
    const char* body = rest[1] == ':' && rest[2] == ' ' ? rest + 3 : rest + 1;
    if ((head == strlen(fn) && strncmp(text, fn, head) == 0) ||
        (head == 7 && strncmp(text, "relaycc", 7) == 0))
      snprintf(buf, len, "%s", body); /* the new prefix says all the old one did */
    else snprintf(buf, len, "%.*s%s", (int)head, text, rest + 1);
  } else {
    snprintf(buf, len, "%s", text);
  }
  return buf;
}

relayResult_t relaySetError(struct relayComm* comm, relayResult_t result, const char* fmt, ...) {
  char* buf = comm ? comm->lastError : tlsLastError;
  size_t len = comm ? sizeof comm->lastError : sizeof tlsLastError;
  /* The message may quote comm->lastError (an earlier error): format it into
   * a copy first, so the prefix never overwrites what it quotes. */
  char msg[sizeof comm->lastError];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (comm) {
    char ctx[160];
    relayErrorContext(comm, ctx, sizeof ctx);
    /* Truncation is fine (a long peer error quoted inside); spelled out with
     * memcpy since gcc's format-truncation check rejects the snprintf form. */
    size_t n = strlen(ctx), m = strlen(msg);
    if (n + 2 + m >= len) m = n + 2 < len ? len - n - 3 : 0;
    if (n + 2 >= len) n = 0;
    memcpy(buf, ctx, n);
    memcpy(buf + n, ": ", n ? 2 : 0);
    memcpy(buf + n + (n ? 2 : 0), msg, m);
    buf[n + (n ? 2 : 0) + m] = 0;
    snprintf(tlsLastError, sizeof tlsLastError, "%s", comm->lastError);
  } else {
    snprintf(buf, len, "%s", msg);
  }
  if (relayDebugLevel() >= 1) fprintf(stderr, "relaycc: %s: %s\n", relayGetErrorString(result), buf);
  return result;
}

const char* relayGetErrorString(relayResult_t result) {
  switch (result) {
#define RELAY_RESULT_CASE_(name, value, msg) \
  case name: return #name ": " msg;
    RELAY_RESULT_TABLE(RELAY_RESULT_CASE_)
#undef RELAY_RESULT_CASE_
    default: return "unknown relaycc result";
  }
}

const char* relayGetLastError(relayComm_t comm) { return comm ? comm->lastError : tlsLastError; }

relayResult_t relayGetVersion(int* version) {
  if (!version) return relaySetError(NULL, relayInvalidArgument, "relayGetVersion: version is NULL");
  *version = RELAYCC_VERSION_CODE;
  return relaySuccess;
}

uint64_t relayNowNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int relayParseInt(const char* s, long long lo, long long hi, long long* out) {
  if (!s || !*s) return 1;
  char* end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || *end || v < lo || v > hi) return 1;
  *out = v;
  return 0;
}

int relayParseBytes(const char* s, uint64_t* out) {
  if (!s) return 1;
  while (isspace((unsigned char)*s)) s++;
  if (*s == '-' || *s == 0) return 1; /* negative or empty */
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0) || isinf(v)) return 1;
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K':
      mult = 1024.0;
      end++;
      break;
    case 'M':
      mult = 1024.0 * 1024;
      end++;
      break;
    case 'G':
      mult = 1024.0 * 1024 * 1024;
      end++;
      break;
    default: break;
  }
  if (mult > 1) { /* accept K, KB, KiB */
    if (*end == 'i' || *end == 'I') end++;
    if (*end == 'b' || *end == 'B') end++;
  } else if (*end == 'b' || *end == 'B') {
    end++;
  }
  if (*end) return 1;
  double b = v * mult;
  if (b > 1.0e18 || b != (double)(uint64_t)b) return 1; /* 1.5K is fine, 1.3 bytes is not */
  *out = (uint64_t)b;
  return 0;
}

int relayNodesRegular(const int* nodeOf, int nranks, int nNodes) {
  if (!nodeOf || nNodes < 1 || nranks % nNodes != 0) return 0;
  int G = nranks / nNodes;
  for (int r = 0; r < nranks; r++)
    if (nodeOf[r] != r / G) return 0;
  return 1;
}
