/*
 * The topology's text format (docs/model.md): writing, hashing, parsing and
 * loading a preset or a file. The parser is reentrant (strtok_r, no state
 * outside the call).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/common.h"
#include "topo/topo.h"
#include "topo/units.h"

/* ---- text format -------------------------------------------------------- */

static int allLinksEqual(const struct relayTopo* t) {
  int n = t->nGPUs;
  if (n < 2) return 1;
  int c0 = t->linkCount[1];
  double b0 = t->linkBw[1];
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      if (s != d && (t->linkCount[s * n + d] != c0 || (c0 > 0 && t->linkBw[s * n + d] != b0))) return 0;
  return 1;
}

void relayTopoWrite(const struct relayTopo* t, FILE* f) {
  int n = t->nGPUs;
  fprintf(f, "# relaycc topology (docs/model.md): GB/s = 1e9 bytes/s per direction, times in us\n");
  fprintf(f, "name %s\n", t->name);
  fprintf(f, "gpus %d\n", n);
  if (allLinksEqual(t)) {
    if (n > 1 && t->linkCount[1] > 0) fprintf(f, "link * * %d %.17g\n", t->linkCount[1], t->linkBw[1] / GBS);
  } else {
    for (int s = 0; s < n; s++)
      for (int d = 0; d < n; d++)
        if (s != d && t->linkCount[s * n + d] > 0)
          fprintf(f, "link %d %d %d %.17g\n", s, d, t->linkCount[s * n + d], t->linkBw[s * n + d] / GBS);
  }
  fprintf(f, "switch %s\n", t->hasSwitch ? "yes" : "no");
  int portsEqual = 1;
  for (int g = 1; g < n; g++)
    if (t->injBw[g] != t->injBw[0] || t->ejBw[g] != t->ejBw[0]) portsEqual = 0;
  if (portsEqual) {
    if (t->injBw[0] > 0 || t->ejBw[0] > 0)
      fprintf(f, "ports * %.17g %.17g\n", t->injBw[0] / GBS, t->ejBw[0] / GBS);
  } else {
    for (int g = 0; g < n; g++) fprintf(f, "ports %d %.17g %.17g\n", g, t->injBw[g] / GBS, t->ejBw[g] / GBS);
  }
  if (t->fabricBw > 0) fprintf(f, "fabric %.17g\n", t->fabricBw / GBS);
  for (int c = -1; c < RELAY_TOPO_NCOLLS; c++) {
    const relayTopoCurve* cv = c < 0 ? &t->p2pEff : &t->collEff[c];
    if (cv->n <= 0) continue;
    fprintf(f, "eff %s", relayTopoCurveName(c));
    for (int i = 0; i < cv->n; i++) fprintf(f, " %.17g:%.17g", cv->bytes[i], cv->eff[i]);
    fprintf(f, "\n");
  }
  if (t->modelErr > 0) fprintf(f, "model_err %.17g\n", t->modelErr);
  if (t->hostStepS > 0) fprintf(f, "host_step_us %.17g\n", t->hostStepS / US);
  fprintf(f, "call_us %.17g\n", t->callS / US);
  fprintf(f, "boundary_us %.17g\n", t->boundaryS / US);
  fprintf(f, "launch_us %.17g\n", t->launchS / US);
  fprintf(f, "mem_gbs %.17g\n", t->memBw / GBS);
  if (t->reduceBw > 0) fprintf(f, "reduce_gbs %.17g\n", t->reduceBw / GBS);
  fprintf(f, "hop_us %.17g\n", t->hopS / US);
  if (t->stageS > 0) fprintf(f, "stage_us %.17g\n", t->stageS / US);
  if (t->maxDepth > 0) fprintf(f, "max_depth %d\n", t->maxDepth);
  if (t->opBudgetBw > 0) fprintf(f, "op_budget_gbs %.17g\n", t->opBudgetBw / GBS);
  if (t->nNodes > 1) {
    fprintf(f, "nodes %d\n", t->nNodes);
    fprintf(f, "nics_per_node %d\n", t->nicsPerNode);
    fprintf(f, "nic_gbs %.17g\n", t->nicBw / GBS);
    fprintf(f, "pxn %s\n", t->pxn ? "yes" : "no");
  }
  if (t->netsByBw > 0) fprintf(f, "nets_by_bw %d\n", t->netsByBw);
  if (t->chanBw > 0) fprintf(f, "chan_gbs %.17g\n", t->chanBw / GBS);
  if (t->chanShare > 0) fprintf(f, "chan_share %.17g\n", t->chanShare);
  if (t->p2pChannels > 0) fprintf(f, "p2p_channels %d\n", t->p2pChannels);
  if (t->p2pPerPeer > 0) fprintf(f, "p2p_per_peer %d\n", t->p2pPerPeer);
}

uint64_t relayTopoHash(const struct relayTopo* t) {
  /* By the text form: it carries every figure a model has, at full
   * precision (%.17g), so a field added to the format is hashed with no
   * change here. Costs a few microseconds: for init, not for every call. */
  if (!t) return 0;
  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  if (!f) return 0;
  relayTopoWrite(t, f);
  fclose(f);
  uint64_t h = relayHash64(RELAY_HASH_SEED, buf, len);
  free(buf);
  return h ? h : 1; /* 0 is "no topology" */
}

/* Parse one GPU index or "*" (-1) bounded by n. */
static int parseGpu(const char* s, int n, int* out) {
  if (strcmp(s, "*") == 0) {
    *out = -1;
    return 0;
  }
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || end == s || v < 0 || v >= n) return -1;
  *out = (int)v;
  return 0;
}

static int parseNum(const char* s, double* out) {
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || *end || end == s || !isfinite(v) || v < 0) return -1;
  *out = v;
  return 0;
}

#define MAXTOK 24 /* "eff NAME" and its RELAY_TOPO_CURVE_MAX points fit */

relayResult_t relayTopoParse(const char* text, struct relayTopo** out, char* err, size_t errlen) {
  *out = NULL;
  struct relayTopo* t = NULL;
  char name[RELAY_TOPO_NAME_MAX] = "custom";
  relayResult_t res = relayInvalidArgument;
  int lineNo = 0;
  const char* p = text;
  char line[1024];
  while (*p) {
    const char* nl = strchr(p, '\n');
    size_t len = nl ? (size_t)(nl - p) : strlen(p);
    lineNo++;
    if (len >= sizeof line) {
      relayTopoErrf(err, errlen, "line %d: longer than %zu characters", lineNo, sizeof line - 1);
      goto fail;
    }
    memcpy(line, p, len);
    line[len] = 0;
    p = nl ? nl + 1 : p + len;
    char* hash = strchr(line, '#');
    if (hash) *hash = 0;
    char* tok[MAXTOK];
    int nt = 0;
    for (char *save = NULL, *s = strtok_r(line, " \t\r", &save); s; s = strtok_r(NULL, " \t\r", &save)) {
      if (nt == MAXTOK) {
        relayTopoErrf(err, errlen, "line %d: too many fields", lineNo);
        goto fail;
      }
      tok[nt++] = s;
    }
    if (nt == 0) continue;
    const char* k = tok[0];
#define NEED(nargs, usage)                                                    \
  do {                                                                        \
    if (nt != (nargs) + 1) {                                                  \
      relayTopoErrf(err, errlen, "line %d: '%s' takes %s", lineNo, k, usage); \
      goto fail;                                                              \
    }                                                                         \
  } while (0)
#define NUM(i, dst)                                                                     \
  do {                                                                                  \
    if (parseNum(tok[i], &(dst))) {                                                     \
      relayTopoErrf(err, errlen, "line %d: '%s' is not a number >= 0", lineNo, tok[i]); \
      goto fail;                                                                        \
    }                                                                                   \
  } while (0)
    if (strcmp(k, "name") == 0) {
      NEED(1, "a name");
      snprintf(name, sizeof name, "%s", tok[1]);
      if (t) snprintf(t->name, sizeof t->name, "%s", tok[1]);
      continue;
    }
    if (strcmp(k, "gpus") == 0) {
      NEED(1, "a GPU count");
      if (t) {
        relayTopoErrf(err, errlen, "line %d: 'gpus' given twice", lineNo);
        goto fail;
      }
      double g;
      NUM(1, g);
      if (g != floor(g) || g < 1 || g > RELAY_TOPO_MAX_GPUS) {
        relayTopoErrf(err, errlen, "line %d: gpus must be an integer in 1..%d", lineNo, RELAY_TOPO_MAX_GPUS);
        goto fail;
      }
      res = relayTopoCreate((int)g, name, &t);
      if (res != relaySuccess) goto fail;
      res = relayInvalidArgument;
      continue;
    }
    if (!t) {
      relayTopoErrf(err, errlen, "line %d: 'gpus N' must come before '%s'", lineNo, k);
      goto fail;
    }
    int n = t->nGPUs;
    if (strcmp(k, "link") == 0) {
      NEED(4, "SRC DST COUNT GBS (SRC/DST a GPU or *)");
      int s, d;
      double c, bw;
      if (parseGpu(tok[1], n, &s) || parseGpu(tok[2], n, &d)) {
        relayTopoErrf(err, errlen, "line %d: GPU index out of 0..%d", lineNo, n - 1);
        goto fail;
      }
      NUM(3, c);
      NUM(4, bw);
      if (c != floor(c) || c > 1e6) {
        relayTopoErrf(err, errlen, "line %d: link count must be an integer", lineNo);
        goto fail;
      }
      for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) {
          if (a == b || (s >= 0 && a != s) || (d >= 0 && b != d)) continue;
          t->linkCount[a * n + b] = (int)c;
          t->linkBw[a * n + b] = c > 0 ? bw * GBS : 0;
        }
    } else if (strcmp(k, "pxn") == 0) {
      NEED(1, "yes or no");
      if (strcmp(tok[1], "yes") == 0 || strcmp(tok[1], "1") == 0) t->pxn = 1;
      else if (strcmp(tok[1], "no") == 0 || strcmp(tok[1], "0") == 0) t->pxn = 0;
      else {
        relayTopoErrf(err, errlen, "line %d: pxn takes yes or no", lineNo);
        goto fail;
      }
    } else if (strcmp(k, "nodes") == 0 || strcmp(k, "nics_per_node") == 0 || strcmp(k, "nets_by_bw") == 0 ||
               strcmp(k, "p2p_channels") == 0 || strcmp(k, "p2p_per_peer") == 0 ||
               strcmp(k, "max_depth") == 0) {
      NEED(1, "an integer");
      double v;
      NUM(1, v);
      if (v != floor(v) || v > 1e6) {
        relayTopoErrf(err, errlen, "line %d: '%s' takes an integer", lineNo, k);
        goto fail;
      }
      int* dst = strcmp(k, "nodes") == 0           ? &t->nNodes
                 : strcmp(k, "nics_per_node") == 0 ? &t->nicsPerNode
                 : strcmp(k, "nets_by_bw") == 0    ? &t->netsByBw
                 : strcmp(k, "p2p_channels") == 0  ? &t->p2pChannels
                 : strcmp(k, "max_depth") == 0     ? &t->maxDepth
                                                   : &t->p2pPerPeer;
      *dst = (int)v;
    } else if (strcmp(k, "switch") == 0) {
      NEED(1, "yes or no");
      if (strcmp(tok[1], "yes") == 0 || strcmp(tok[1], "1") == 0) t->hasSwitch = 1;
      else if (strcmp(tok[1], "no") == 0 || strcmp(tok[1], "0") == 0) t->hasSwitch = 0;
      else {
        relayTopoErrf(err, errlen, "line %d: switch takes yes or no", lineNo);
        goto fail;
      }
    } else if (strcmp(k, "ports") == 0) {
      NEED(3, "GPU INJECT_GBS EJECT_GBS (GPU an index or *)");
      int g;
      double inj, ej;
      if (parseGpu(tok[1], n, &g)) {
        relayTopoErrf(err, errlen, "line %d: GPU index out of 0..%d", lineNo, n - 1);
        goto fail;
      }
      NUM(2, inj);
      NUM(3, ej);
      for (int a = 0; a < n; a++)
        if (g < 0 || a == g) {
          t->injBw[a] = inj * GBS;
          t->ejBw[a] = ej * GBS;
        }
    } else if (strcmp(k, "eff") == 0) {
      int c = -2; /* -1: p2p, else the relayCollective_t */
      for (int i = -1; nt >= 2 && i < RELAY_TOPO_NCOLLS; i++)
        if (strcmp(tok[1], relayTopoCurveName(i)) == 0) c = i;
      if (nt < 3 || nt - 2 > RELAY_TOPO_CURVE_MAX || c == -2) {
        relayTopoErrf(
            err, errlen,
            "line %d: 'eff' takes p2p|allgather|reducescatter|allreduce|alltoall and 1..%d BYTES:EFF points",
            lineNo, RELAY_TOPO_CURVE_MAX);
        goto fail;
      }
      relayTopoCurve* cv = c < 0 ? &t->p2pEff : &t->collEff[c];
      cv->n = 0;
      for (int i = 2; i < nt; i++) {
        char* colon = strchr(tok[i], ':');
        double b, e;
        if (colon) *colon = 0;
        if (!colon || parseNum(tok[i], &b) || parseNum(colon + 1, &e) || !(b > 0) || !(e > 0)) {
          relayTopoErrf(err, errlen, "line %d: eff point %d is not BYTES:EFF with both > 0", lineNo, i - 1);
          goto fail;
        }
        if (cv->n > 0 && !(b > cv->bytes[cv->n - 1])) {
          relayTopoErrf(err, errlen, "line %d: eff sizes must increase (point %d)", lineNo, i - 1);
          goto fail;
        }
        cv->bytes[cv->n] = b;
        cv->eff[cv->n] = e;
        cv->n++;
      }
    } else if (strcmp(k, "model_err") == 0) {
      NEED(1, "a fraction in [0, 1)");
      NUM(1, t->modelErr);
      if (!(t->modelErr < 1)) {
        relayTopoErrf(err, errlen, "line %d: model_err must be in [0, 1)", lineNo);
        goto fail;
      }
    } else {
      struct {
        const char* key;
        double* dst;
        double unit;
      } scalars[] = {
          {"fabric", &t->fabricBw, GBS},
          {"call_us", &t->callS, US},
          {"boundary_us", &t->boundaryS, US},
          {"launch_us", &t->launchS, US},
          {"mem_gbs", &t->memBw, GBS},
          {"hop_us", &t->hopS, US},
          {"reduce_gbs", &t->reduceBw, GBS},
          {"nic_gbs", &t->nicBw, GBS},
          {"chan_gbs", &t->chanBw, GBS},
          {"chan_share", &t->chanShare, 1},
          {"stage_us", &t->stageS, US},
          {"host_step_us", &t->hostStepS, US},
          {"op_budget_gbs", &t->opBudgetBw, GBS},
      };
      int found = 0;
      for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++) {
        if (strcmp(k, scalars[i].key) != 0) continue;
        NEED(1, "one number");
        double v;
        NUM(1, v);
        *scalars[i].dst = v * scalars[i].unit;
        found = 1;
      }
      if (!found) {
        relayTopoErrf(err, errlen, "line %d: unknown keyword '%s'", lineNo, k);
        goto fail;
      }
    }
#undef NEED
#undef NUM
  }
  if (!t) {
    relayTopoErrf(err, errlen, "no 'gpus N' line");
    goto fail;
  }
  if (relayTopoCheck(t, err, errlen) != 0) goto fail;
  *out = t;
  return relaySuccess;
fail:
  relayTopoFree(t);
  return res;
}

relayResult_t relayTopoLoad(const char* spec, struct relayTopo** out) {
  *out = NULL;
  if (!spec || !*spec) return relaySetError(NULL, relayInvalidArgument, "topology: empty name");
  if (relayTopoPreset(spec, out) == relaySuccess) return relaySuccess;
  FILE* f = fopen(spec, "r");
  if (!f) {
    char names[256] = "";
    for (const char* const* n = relayTopoPresetNames(); *n; n++) {
      strncat(names, *n, sizeof names - strlen(names) - 1);
      if (n[1]) strncat(names, ", ", sizeof names - strlen(names) - 1);
    }
    return relaySetError(NULL, relayInvalidArgument,
                         "topology '%s': not a preset (%s) and not a readable file: %s", spec, names,
                         strerror(errno));
  }
  size_t cap = 4096, len = 0;
  char* text = malloc(cap);
  if (!text) {
    fclose(f);
    return relaySetError(NULL, relaySystemError, "topology '%s': out of memory", spec);
  }
  size_t got;
  while ((got = fread(text + len, 1, cap - len - 1, f)) > 0) {
    len += got;
    if (len + 1 == cap) {
      if (cap >= (1u << 24)) break; /* 16 MiB: no topology file is that large */
      char* bigger = realloc(text, cap * 2);
      if (!bigger) {
        free(text);
        fclose(f);
        return relaySetError(NULL, relaySystemError, "topology '%s': out of memory", spec);
      }
      text = bigger;
      cap *= 2;
    }
  }
  text[len] = 0;
  fclose(f);
  char err[256];
  relayResult_t r = relayTopoParse(text, out, err, sizeof err);
  free(text);
  if (r != relaySuccess) return relaySetError(NULL, r, "topology file '%s': %s", spec, err);
  return relaySuccess;
}
