/* The settings table (params.h): the only code in src/ that reads the environment. */
#include "comm/params.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm/common.h"

const relayParamDef relayParamDefs[RELAY_P_COUNT] = {
#define RELAY_PARAM_ROW_(id, nm, ty, sc, df, lo_, hi_, field, shown, dc) \
  [RELAY_P_##id] = {nm, RELAY_PTYPE_##ty, RELAY_PSCOPE_##sc, df, lo_, hi_, field, shown, dc},
    RELAY_PARAM_TABLE(RELAY_PARAM_ROW_)
#undef RELAY_PARAM_ROW_
};

static const char* const kDebugChoices[] = {"off", "info", "trace", NULL};
static const char* const kBwMoverChoices[] = {"auto", "sm", "ce", NULL}; /* RELAY_BW_MOVER_* (transport.h) */

const char* const* relayParamChoices(relayParamId id) {
  switch (id) {
    case RELAY_P_DEBUG: return kDebugChoices;
    case RELAY_P_ROUTE: return relayRouteNames;
    case RELAY_P_BW_MOVER: return kBwMoverChoices;
    default: return NULL;
  }
}

/* INT rows whose values are a set, not every integer of their range. */
static const long long kOneshotThreads[] = {0, 128, 256, 512}; /* the kernels' block sizes (0: by size) */

static const long long* allowedSet(relayParamId id, int* n) {
  switch (id) {
    case RELAY_P_ONESHOT_THREADS:
      *n = (int)(sizeof kOneshotThreads / sizeof kOneshotThreads[0]);
      return kOneshotThreads;
    default: *n = 0; return NULL;
  }
}

/* 1 when v is one of row id's values (range, and set where the row has one). */
static int allowedValue(relayParamId id, long long v) {
  const relayParamDef* d = &relayParamDefs[id];
  if (v < d->lo || v > d->hi) return 0;
  int n;
  const long long* set = allowedSet(id, &n);
  for (int i = 0; i < n; i++)
    if (set[i] == v) return 1;
  return set == NULL;
}

const char* relayParamAllowed(relayParamId id, char* buf, size_t len) {
  const relayParamDef* d = &relayParamDefs[id];
  int n, k = 0;
  const long long* set = allowedSet(id, &n);
  const char* const* ch = relayParamChoices(id);
  buf[0] = 0;
  switch (d->type) {
    case RELAY_PTYPE_STRING: snprintf(buf, len, "text"); break;
    case RELAY_PTYPE_BOOL: snprintf(buf, len, "0 or 1 (also true/false, yes/no, on/off)"); break;
    case RELAY_PTYPE_BYTES:
      snprintf(buf, len, "a byte count in [%lld, %lld] (4096, 64K, 1M)", d->lo, d->hi);
      break;
    case RELAY_PTYPE_INT:
      if (!set) {
        snprintf(buf, len, "an integer in [%lld, %lld]", d->lo, d->hi);
        break;
      }
      k = snprintf(buf, len, "one of");
      for (int i = 0; i < n && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, "%s %lld", i ? "," : "", set[i]);
      break;
    case RELAY_PTYPE_ENUM:
      k = snprintf(buf, len, "one of");
      for (int i = 0; ch && ch[i] && k > 0 && (size_t)k < len; i++)
        k += snprintf(buf + k, len - (size_t)k, "%s %s", i ? "," : "", ch[i]);
      break;
  }
  return buf;
}

/* Parse text for row id into *v; 0 on success, else what is allowed in why. */
static int parseValue(relayParamId id, const char* s, long long* v, char* why, size_t len) {
  const relayParamDef* d = &relayParamDefs[id];
  long long x = 0;
  int ok = 1;
  switch (d->type) {
    case RELAY_PTYPE_STRING: *v = 0; return 0;
    case RELAY_PTYPE_BOOL:
      if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on"))
        x = 1;
      else if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") ||
               !strcasecmp(s, "off"))
        x = 0;
      else ok = 0;
      break;
    case RELAY_PTYPE_ENUM: {
      const char* const* ch = relayParamChoices(id);
      int found = 0, route;
      if (id == RELAY_P_ROUTE) { /* its own spellings: "one-shot" too */
        if (relayParseRoute(s, &route) == 0) x = route, found = 1;
      } else {
        for (int i = 0; ch && ch[i] && !found; i++)
          if (!strcasecmp(s, ch[i])) x = i, found = 1;
      }
      /* A choice's index is accepted too (RELAYCC_DEBUG=1 as before). */
      ok = found || relayParseInt(s, d->lo, d->hi, &x) == 0;
      break;
    }
    case RELAY_PTYPE_BYTES: {
      uint64_t b;
      ok = relayParseBytes(s, &b) == 0 && b <= (uint64_t)d->hi && (long long)b >= d->lo;
      x = (long long)b;
      break;
    }
    case RELAY_PTYPE_INT: ok = relayParseInt(s, d->lo, d->hi, &x) == 0 && allowedValue(id, x); break;
  }
  if (!ok) {
    char allowed[160];
    snprintf(why, len, "expected %s", relayParamAllowed(id, allowed, sizeof allowed));
    return 1;
  }
  *v = x;
  return 0;
}

/* The relayConfig_t field of a row: 1 with the value when the user set it. */
static int configValue(const relayConfig_t* cfg, int field, long long* v, const char** text) {
  if (!cfg || field < 0) return 0;
  int x;
  switch (field) {
    case 0: x = cfg->timeoutMs; break;
    case 1: x = cfg->checkMode; break;
    case 2: x = cfg->route; break;
    case 3: x = cfg->depth; break;
    case 4: x = cfg->shmRingBytes; break;
    case 5: x = cfg->spinCount; break;
    case 6:
      if (!cfg->topo) return 0;
      *text = cfg->topo;
      *v = 0;
      return 1;
    default: return 0;
  }
  if (x == RELAY_CONFIG_UNDEF_INT) return 0;
  *v = x;
  return 1;
}

/* Process scope, read once (readProcess): the values, whether the
 * environment set them (and they parse), and their text. */
static pthread_once_t gProcessOnce = PTHREAD_ONCE_INIT;
static long long gProcess[RELAY_P_COUNT];
static int gProcessFromEnv[RELAY_P_COUNT];
static char gProcessText[RELAY_P_COUNT][RELAY_PARAM_TEXT];
static char gProcessWhy[RELAY_P_COUNT]
                       [RELAY_PARAM_TEXT + 192]; /* "NAME=value: expected ..." when unreadable */

static const char* kFieldNames[] = {"timeoutMs",    "checkMode", "route", "depth",
                                    "shmRingBytes", "spinCount", "topo"};

const char* relayParamFieldName(relayParamId id) {
  int f = relayParamDefs[id].configField;
  return f >= 0 ? kFieldNames[f] : NULL;
}

relayResult_t relayParamsResolve(relayParams* p, const relayConfig_t* cfg, int* badId, char* why,
                                 size_t whyLen) {
  *badId = -1;
  if (why && whyLen) why[0] = 0;
  if (cfg && (cfg->magic != RELAY_CONFIG_MAGIC || cfg->size < offsetof(relayConfig_t, topo)))
    return relaySetError(NULL, relayInvalidArgument,
                         "config is not initialized with RELAY_CONFIG_INITIALIZER (magic %#x, size %zu)",
                         cfg->magic, cfg->size);
  memset(p, 0, sizeof *p);
  relayResult_t res = relaySuccess;
  for (int i = 0; i < RELAY_P_COUNT; i++) {
    const relayParamDef* d = &relayParamDefs[i];
    p->v[i] = d->def;
    p->src[i] = RELAY_PSRC_DEFAULT;
    if (i == RELAY_P_JOB) snprintf(p->text[i], RELAY_PARAM_TEXT, "relaycc");
    long long v;
    const char* text = NULL;
    char reason[RELAY_PARAM_TEXT + 192] = "";
    int bad = 0;
    if (configValue(cfg, d->configField, &v, &text)) {
      if (d->type == RELAY_PTYPE_STRING) {
        snprintf(p->text[i], RELAY_PARAM_TEXT, "%s", text);
      } else if (!allowedValue((relayParamId)i, v)) {
        char allowed[160];
        bad = 1;
        snprintf(reason, sizeof reason, "config.%s = %lld (%s) must be %s", kFieldNames[d->configField], v,
                 d->name, relayParamAllowed((relayParamId)i, allowed, sizeof allowed));
      } else {
        p->v[i] = v;
        snprintf(p->text[i], RELAY_PARAM_TEXT, "%lld", v);
      }
      if (!bad) p->src[i] = RELAY_PSRC_CONFIG;
    } else if (d->scope != RELAY_PSCOPE_PROCESS) {
      const char* e = getenv(d->name);
      if (e && *e) {
        char r2[176];
        if (parseValue((relayParamId)i, e, &v, r2, sizeof r2) != 0) {
          bad = 1;
          snprintf(reason, sizeof reason, "%s=%.*s: %s", d->name, RELAY_PARAM_TEXT, e, r2);
        } else {
          p->v[i] = v;
          p->src[i] = RELAY_PSRC_ENV;
          snprintf(p->text[i], RELAY_PARAM_TEXT, "%s", e);
        }
      }
    } else {
      /* The comm's copy of a PROCESS row, as read once: its value, and the
       * text and source RELAYCC_DEBUG=INFO prints (a STRING row's value is
       * its text: without it the table said "(unset)" for a set
       * RELAYCC_SHIM_COLLS). */
      p->v[i] = relayParamProcess((relayParamId)i);
      if (gProcessFromEnv[i]) {
        p->src[i] = RELAY_PSRC_ENV;
        memcpy(p->text[i], gProcessText[i], RELAY_PARAM_TEXT);
      }
      /* What the process could not read fails every comm's init too (the process said so once). */
      if (gProcessWhy[i][0]) {
        bad = 1;
        _Static_assert(sizeof reason == sizeof gProcessWhy[0], "the reason holds the process's text");
        memcpy(reason, gProcessWhy[i], sizeof reason);
      }
    }
    if (bad) {
      p->v[i] = d->def; /* so this rank still reaches the exchange that fails every rank */
      p->src[i] = RELAY_PSRC_DEFAULT;
      if (res == relaySuccess) {
        *badId = i;
        if (why) snprintf(why, whyLen, "%s", reason);
        res = relayInvalidArgument;
      }
    }
  }
  return res;
}

/* ---- process scope ---- */

static void readProcess(void) {
  for (int i = 0; i < RELAY_P_COUNT; i++) {
    const relayParamDef* d = &relayParamDefs[i];
    gProcess[i] = d->def;
    if (d->scope != RELAY_PSCOPE_PROCESS) continue;
    const char* e = getenv(d->name);
    long long v;
    char why[176];
    if (!e || !*e) continue;
    if (parseValue((relayParamId)i, e, &v, why, sizeof why) == 0) {
      gProcess[i] = v;
      gProcessFromEnv[i] = 1;
      snprintf(gProcessText[i], RELAY_PARAM_TEXT, "%s", e);
      continue;
    }
    /* Said once per process, never ignored in silence: the default holds for what has no comm (the
     * interposer's switch), and every comm's init fails naming it (relayParamsResolve). */
    if (i == RELAY_P_DEBUG) gProcess[i] = 1; /* a value we cannot read still asks for messages */
    snprintf(gProcessWhy[i], sizeof gProcessWhy[i], "%s=%.*s: %s", d->name, RELAY_PARAM_TEXT, e, why);
    char shown[32];
    fprintf(stderr, "relaycc: %s; this process uses %s, and a comm's init fails on it\n", gProcessWhy[i],
            i == RELAY_P_DEBUG              ? "info"
            : d->type == RELAY_PTYPE_STRING ? d->shownDefault
                                            : (snprintf(shown, sizeof shown, "%lld", gProcess[i]), shown));
  }
}

long long relayParamProcess(relayParamId id) {
  pthread_once(&gProcessOnce, readProcess);
  return gProcess[id];
}

int relayDebugLevel(void) { return (int)relayParamProcess(RELAY_P_DEBUG); }

const char* relayParamEnvText(relayParamId id) {
  const char* v = getenv(relayParamDefs[id].name);
  return (v && *v) ? v : NULL;
}

/* ---- printing ---- */

const char* relayParamText(const relayParams* p, relayParamId id, char* buf, size_t len) {
  const relayParamDef* d = &relayParamDefs[id];
  if (d->type == RELAY_PTYPE_STRING) return p->text[id][0] ? p->text[id] : "(unset)";
  const char* const* ch = relayParamChoices(id);
  if (d->type == RELAY_PTYPE_ENUM && ch) return ch[p->v[id]];
  snprintf(buf, len, "%lld", p->v[id]);
  return buf;
}

const char* relayParamScopeName(relayParamScope scope) {
  static const char* const kScope[] = {"process", "rank", "agreed"};
  return (unsigned)scope < sizeof kScope / sizeof kScope[0] ? kScope[scope] : "?";
}

void relayParamsPrint(const relayParams* p, const char* prefix, void* file) {
  static const char* kSrc[] = {"default", "env", "config", "rank 0's"};
  FILE* f = file;
  for (int i = 0; i < RELAY_P_COUNT; i++) {
    char buf[32];
    fprintf(f, "%s%s = %s (%s, %s)\n", prefix, relayParamDefs[i].name,
            relayParamText(p, (relayParamId)i, buf, sizeof buf), kSrc[p->src[i]],
            relayParamScopeName(relayParamDefs[i].scope));
  }
}
