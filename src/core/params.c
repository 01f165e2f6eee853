/* The settings table (params.h): the only code in src/ that reads the environment. */
#include "core/params.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common.h"

const relayParamDef relayParamDefs[RELAY_P_COUNT] = {
#define RELAY_PARAM_ROW_(id, nm, ty, sc, df, lo_, hi_, field, shown, dc) \
  [RELAY_P_##id] = {nm, RELAY_PTYPE_##ty, RELAY_PSCOPE_##sc, df, lo_, hi_, field, shown, dc},
    RELAY_PARAM_TABLE(RELAY_PARAM_ROW_)
#undef RELAY_PARAM_ROW_
};

static const char* const kDebugChoices[] = {"off", "info", "trace", NULL};
static const char* const kRouteChoices[] = {"auto", "direct", "relay", "oneshot", "native", "bw", NULL};
static const char* const kBwMoverChoices[] = {"auto", "sm", "ce", NULL}; /* RELAY_BW_MOVER_* (transport.h) */
_Static_assert(sizeof kRouteChoices / sizeof kRouteChoices[0] == relayNumRoutes + 1, "a choice per relayRoute_t");

const char* const* relayParamChoices(relayParamId id) {
  switch (id) {
    case RELAY_P_DEBUG: return kDebugChoices;
    case RELAY_P_ROUTE: return kRouteChoices;
    case RELAY_P_BW_MOVER: return kBwMoverChoices;
    default: return NULL;
  }
}

/* Parse text for row d into *v; 0 on success, else a reason in why. */
static int parseValue(relayParamId id, const char* s, long long* v, char* why, size_t len) {
  const relayParamDef* d = &relayParamDefs[id];
  long long x = 0;
  switch (d->type) {
    case RELAY_PTYPE_STRING: *v = 0; return 0;
    case RELAY_PTYPE_BOOL:
      if (!strcasecmp(s, "1") || !strcasecmp(s, "true") || !strcasecmp(s, "yes") || !strcasecmp(s, "on")) x = 1;
      else if (!strcasecmp(s, "0") || !strcasecmp(s, "false") || !strcasecmp(s, "no") || !strcasecmp(s, "off")) x = 0;
      else return snprintf(why, len, "expected 0 or 1"), 1;
      break;
    case RELAY_PTYPE_ENUM: {
      const char* const* ch = relayParamChoices(id);
      int found = 0;
      for (int i = 0; ch && ch[i]; i++)
        if (!strcasecmp(s, ch[i]) || (id == RELAY_P_ROUTE && i == relayRouteOneShot && !strcasecmp(s, "one-shot"))) {
          x = i, found = 1;
          break;
        }
      /* A choice's index is accepted too (RELAYCC_DEBUG=1 as before). */
      if (!found && relayParseInt(s, d->lo, d->hi, &x) != 0) {
        int n = snprintf(why, len, "expected");
        for (int i = 0; ch && ch[i] && n > 0 && (size_t)n < len; i++)
          n += snprintf(why + n, len - (size_t)n, "%s %s", i ? "," : "", ch[i]);
        return 1;
      }
      break;
    }
    case RELAY_PTYPE_BYTES: {
      uint64_t b;
      if (relayParseBytes(s, &b) != 0 || b > (uint64_t)d->hi || (long long)b < d->lo)
        return snprintf(why, len, "expected a byte count in [%lld, %lld] (4096, 64K, 1M)", d->lo, d->hi), 1;
      x = (long long)b;
      break;
    }
    case RELAY_PTYPE_INT:
      if (relayParseInt(s, d->lo, d->hi, &x) != 0)
        return snprintf(why, len, "expected an integer in [%lld, %lld]", d->lo, d->hi), 1;
      break;
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

static const char* kFieldNames[] = {"timeoutMs", "checkMode", "route", "depth", "shmRingBytes", "spinCount", "topo"};

relayResult_t relayParamsResolve(relayParams* p, const relayConfig_t* cfg, int* badId, char* why, size_t whyLen) {
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
    char reason[160] = "";
    int bad = 0;
    if (configValue(cfg, d->configField, &v, &text)) {
      if (d->type == RELAY_PTYPE_STRING) {
        snprintf(p->text[i], RELAY_PARAM_TEXT, "%s", text);
      } else if (v < d->lo || v > d->hi) {
        bad = 1;
        snprintf(reason, sizeof reason, "config.%s = %lld (%s) must be in [%lld, %lld]", kFieldNames[d->configField],
                 v, d->name, d->lo, d->hi);
      } else {
        p->v[i] = v;
        snprintf(p->text[i], RELAY_PARAM_TEXT, "%lld", v);
      }
      if (!bad) p->src[i] = RELAY_PSRC_CONFIG;
    } else if (d->scope != RELAY_PSCOPE_PROCESS) {
      const char* e = getenv(d->name);
      if (e && *e) {
        char r2[128];
        if (parseValue((relayParamId)i, e, &v, r2, sizeof r2) != 0) {
          bad = 1;
          snprintf(reason, sizeof reason, "%s=%s: %s", d->name, e, r2);
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
    char why[128];
    if (!e || !*e) continue;
    if (parseValue((relayParamId)i, e, &v, why, sizeof why) == 0) {
      gProcess[i] = v;
      gProcessFromEnv[i] = 1;
      snprintf(gProcessText[i], RELAY_PARAM_TEXT, "%s", e);
    } else if (i == RELAY_P_DEBUG) {
      gProcess[i] = 1; /* a value we cannot read still asks for messages */
      fprintf(stderr, "relaycc: %s=%s: %s; using info\n", d->name, e, why);
    }
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

void relayParamsPrint(const relayParams* p, const char* prefix, void* file) {
  static const char* kSrc[] = {"default", "env", "config", "rank 0's"};
  static const char* kScope[] = {"process", "rank", "agreed"};
  FILE* f = file;
  for (int i = 0; i < RELAY_P_COUNT; i++) {
    char buf[32];
    fprintf(f, "%s%s = %s (%s, %s)\n", prefix, relayParamDefs[i].name, relayParamText(p, (relayParamId)i, buf, sizeof buf),
            kSrc[p->src[i]], kScope[relayParamDefs[i].scope]);
  }
}

void relayParamsMarkdown(void* file) {
  static const char* kScope[] = {"process", "rank", "agreed"};
  FILE* f = file;
  fprintf(f, "| variable | config field | default | scope | meaning |\n|---|---|---|---|---|\n");
  for (int i = 0; i < RELAY_P_COUNT; i++) {
    const relayParamDef* d = &relayParamDefs[i];
    char field[32] = "";
    if (d->configField >= 0) snprintf(field, sizeof field, "`%s`", kFieldNames[d->configField]);
    fprintf(f, "| `%s` | %s | %s | %s | %s |\n", d->name, field, d->shownDefault, kScope[d->scope], d->doc);
  }
}

/* ---- tools and tests ---- */

long relayEnvLong(const char* name, long def) {
  const char* v = getenv(name);
  if (!v || !*v) return def;
  char* end;
  long x = strtol(v, &end, 0);
  return (end == v) ? def : x;
}

const char* relayEnvStr(const char* name, const char* def) {
  const char* v = getenv(name);
  return (v && *v) ? v : def;
}
