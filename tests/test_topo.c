/*
 * Topology model: presets load and hold their cited figures, the text format
 * round-trips, bad files get errors that say which line and why, detection
 * answers "not supported" on a CPU build.
 *
 * Usage: test_topo <case>   (cases: kCases at the bottom; --list prints them)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/common.h"
#include "harness.h"
#include "topo/topo.h"

static int near(double a, double b) { return fabs(a - b) <= 1e-12 * fmax(fabs(a), fabs(b)); }

/* Field-by-field equality within rounding of the text format's units. */
static void expectSame(const struct relayTopo* a, const struct relayTopo* b) {
  T_CHECK(strcmp(a->name, b->name) == 0, "name %s vs %s", a->name, b->name);
  T_CHECK(a->nGPUs == b->nGPUs, "gpus %d vs %d", a->nGPUs, b->nGPUs);
  int n = a->nGPUs;
  for (int s = 0; s < n; s++) {
    for (int d = 0; d < n; d++) {
      if (s == d) continue;
      int i = s * n + d;
      T_CHECK(a->linkCount[i] == b->linkCount[i], "%s: link %d %d count %d vs %d", a->name, s, d,
              a->linkCount[i], b->linkCount[i]);
      if (a->linkCount[i]) T_CHECK(near(a->linkBw[i], b->linkBw[i]), "%s: link %d %d bw", a->name, s, d);
    }
    T_CHECK(near(a->injBw[s], b->injBw[s]) && near(a->ejBw[s], b->ejBw[s]), "%s: ports %d", a->name, s);
  }
  T_CHECK(a->hasSwitch == b->hasSwitch, "%s: switch", a->name);
  T_CHECK(near(a->fabricBw, b->fabricBw), "%s: fabric", a->name);
  T_CHECK(near(a->callS, b->callS) && near(a->boundaryS, b->boundaryS) && near(a->launchS, b->launchS) &&
              near(a->memBw, b->memBw) && near(a->hopS, b->hopS) && near(a->reduceBw, b->reduceBw),
          "%s: costs", a->name);
  T_CHECK(near(a->opBudgetBw, b->opBudgetBw), "%s: op budget %g vs %g", a->name, a->opBudgetBw,
          b->opBudgetBw);
}

static char* writeToString(const struct relayTopo* t) {
  char* buf = NULL;
  size_t len = 0;
  FILE* f = open_memstream(&buf, &len);
  T_CHECK(f, "open_memstream");
  relayTopoWrite(t, f);
  fclose(f);
  return buf;
}

static int casePresets(void) {
  int count = 0;
  for (const char* const* n = relayTopoPresetNames(); *n; n++, count++) {
    struct relayTopo* t = NULL;
    T_OK(relayTopoLoad(*n, &t));
    char err[256];
    T_CHECK(relayTopoCheck(t, err, sizeof err) == 0, "%s: %s", *n, err);
    T_CHECK(strcmp(t->name, *n) == 0, "name %s", t->name);
    T_CHECK(t->boundaryS > 0 && t->callS > 0 && t->launchS > 0 && t->memBw > 0 && t->hopS > 0, "%s: costs",
            *n);
    for (int s = 0; s < t->nGPUs; s++)
      for (int d = 0; d < t->nGPUs; d++) T_CHECK(relayTopoPairRate(t, s, d) > 0, "%s: %d -> %d", *n, s, d);
    relayTopoFree(t);
  }
  T_CHECK(count == 5, "%d presets", count);

  struct relayTopo* t;
  /* MI350X: 8 GPUs, one 51.6 GB/s link per pair, 25 us boundary (seed). */
  T_OK(relayTopoLoad("mi350x", &t));
  T_CHECK(t->nGPUs == 8 && !t->hasSwitch, "mi350x shape");
  for (int s = 0; s < 8; s++)
    for (int d = 0; d < 8; d++)
      if (s != d)
        T_CHECK(t->linkCount[s * 8 + d] == 1 && t->linkBw[s * 8 + d] == 51.6e9, "mi350x link %d %d", s, d);
  T_CHECK(near(t->boundaryS, 25e-6), "mi350x boundary %g", t->boundaryS);
  /* RCCL's per-operation channel budget: the AMD presets have one, the
   * NVIDIA and CPU ones none (their predictions stay as calibrated). */
  T_CHECK(near(t->opBudgetBw, 512e9), "mi350x op budget %g", t->opBudgetBw);
  relayTopoFree(t);
  T_OK(relayTopoLoad("mi300x", &t));
  T_CHECK(near(t->opBudgetBw, 512e9), "mi300x op budget %g", t->opBudgetBw);
  relayTopoFree(t);
  const char* unbudgeted[] = {"h200", "h200x2", "cpu"};
  for (int i = 0; i < 3; i++) {
    T_OK(relayTopoLoad(unbudgeted[i], &t));
    T_CHECK(t->opBudgetBw == 0, "%s: op budget %g, want none", unbudgeted[i], t->opBudgetBw);
    relayTopoFree(t);
  }

  /* H200: non-blocking switch, 18 x 26.5625 GB/s ports. */
  T_OK(relayTopoLoad("h200", &t));
  T_CHECK(t->nGPUs == 8 && t->hasSwitch, "h200 shape");
  for (int g = 0; g < 8; g++)
    T_CHECK(near(t->injBw[g], 478.125e9) && near(t->ejBw[g], 478.125e9), "h200 port %d", g);
  T_CHECK(near(relayTopoPairRate(t, 0, 1), 478.125e9), "h200 pair rate");
  relayTopoFree(t);

  /* The 2-GPU H200: NV18, 370 GB/s each way measured. */
  T_OK(relayTopoLoad("h200x2", &t));
  T_CHECK(t->nGPUs == 2 && t->linkCount[1] == 18 && t->linkCount[2] == 18, "h200x2 links");
  T_CHECK(near(relayTopoPairRate(t, 0, 1), 370e9), "h200x2 pair %g", relayTopoPairRate(t, 0, 1));
  relayTopoFree(t);

  T_OK(relayTopoLoad("cpu", &t));
  T_CHECK(t->hasSwitch && t->fabricBw > 0, "cpu: switch and a memory-bus cap");
  relayTopoFree(t);
  return 0;
}

static int caseRoundTrip(void) {
  for (const char* const* n = relayTopoPresetNames(); *n; n++) {
    struct relayTopo *a, *b;
    T_OK(relayTopoPreset(*n, &a));
    char* text = writeToString(a);
    char err[256];
    T_CHECK(relayTopoParse(text, &b, err, sizeof err) == relaySuccess, "%s: %s\n%s", *n, err, text);
    expectSame(a, b);
    char* again = writeToString(b);
    T_CHECK(strcmp(text, again) == 0, "%s: the text changed on a second trip:\n%s---\n%s", *n, text, again);
    free(text);
    free(again);
    relayTopoFree(a);
    relayTopoFree(b);
  }
  /* An irregular node: a 4-GPU ring of double links plus a switch for the
   * diagonals, per-GPU ports and a fabric cap. */
  const char* src =
      "# a made-up node\n"
      "name ring4\n"
      "gpus 4\n"
      "link 0 1 2 50   # two links one way\n"
      "link 1 0 2 50\n"
      "link 1 2 2 50\nlink 2 1 2 50\nlink 2 3 2 50\nlink 3 2 2 50\nlink 3 0 2 50\nlink 0 3 2 50\n"
      "switch yes\n"
      "ports * 300 300\n"
      "ports 2 150 250\n"
      "fabric 900\n"
      "call_us 7.5\nboundary_us 4\nlaunch_us 2\nmem_gbs 3000\nhop_us 1\nreduce_gbs 1500\n"
      "op_budget_gbs 240\n";
  struct relayTopo *a, *b;
  char err[256];
  T_CHECK(relayTopoParse(src, &a, err, sizeof err) == relaySuccess, "%s", err);
  T_CHECK(a->nGPUs == 4 && a->linkCount[0 * 4 + 1] == 2 && a->linkCount[0 * 4 + 2] == 0, "ring4 links");
  T_CHECK(near(relayTopoLinkCap(a, 0, 1), 100e9), "ring4 link cap");
  /* 0 -> 2 has no link: through the switch, bounded by GPU 2's ejection. */
  T_CHECK(relayTopoReachable(a, 0, 2) && near(relayTopoPairRate(a, 0, 2), 250e9),
          "diagonal through the switch");
  T_CHECK(near(relayTopoPairRate(a, 2, 3), 100e9) && near(relayTopoPairRate(a, 1, 3), 300e9), "rates");
  T_CHECK(near(a->injBw[2], 150e9) && near(a->ejBw[2], 250e9), "port override");
  T_CHECK(near(a->callS, 7.5e-6) && near(a->fabricBw, 900e9) && near(a->reduceBw, 1500e9) &&
              near(a->opBudgetBw, 240e9),
          "scalars");
  char* text = writeToString(a);
  T_CHECK(relayTopoParse(text, &b, err, sizeof err) == relaySuccess, "%s\n%s", err, text);
  expectSame(a, b);
  free(text);
  relayTopoFree(a);
  relayTopoFree(b);

  /* Through a file, by relayTopoLoad. */
  char path[] = "/tmp/relaycc_topo_XXXXXX";
  int fd = mkstemp(path);
  T_CHECK(fd >= 0, "mkstemp");
  FILE* f = fdopen(fd, "w");
  fputs(src, f);
  fclose(f);
  T_OK(relayTopoLoad(path, &a));
  T_CHECK(strcmp(a->name, "ring4") == 0, "loaded from file");
  relayTopoFree(a);
  unlink(path);
  return 0;
}

static void expectParseError(const char* text, const char* needle) {
  struct relayTopo* t = (struct relayTopo*)1;
  char err[256] = "";
  relayResult_t r = relayTopoParse(text, &t, err, sizeof err);
  T_CHECK(r == relayInvalidArgument && t == NULL, "accepted:\n%s", text);
  T_CHECK(strstr(err, needle), "error '%s' lacks '%s' for:\n%s", err, needle, text);
}

static int caseErrors(void) {
  expectParseError("name x\n", "no 'gpus N'");
  expectParseError("link * * 1 50\n", "line 1: 'gpus N' must come before");
  expectParseError("gpus 2\nlink 0 2 1 50\n", "line 2: GPU index out of 0..1");
  expectParseError("gpus 2\nlink 0 1 1 fast\n", "line 2: 'fast' is not a number");
  expectParseError("gpus 2\nlink 0 1 1\n", "line 2: 'link' takes");
  expectParseError("gpus 2\nwarp 9\n", "line 2: unknown keyword 'warp'");
  expectParseError("gpus 2\ngpus 2\n", "given twice");
  expectParseError("gpus 0\n", "gpus must be");
  expectParseError("gpus 2\nlink 0 1 1 50\nmem_gbs 1\n", "GPU 1 cannot reach GPU 0");
  expectParseError("gpus 2\nlink * * 1 50\n", "mem_gbs must be > 0");
  expectParseError("gpus 2\nswitch yes\nmem_gbs 1\n", "switch needs injection and ejection");
  expectParseError("gpus 2\nswitch maybe\n", "switch takes yes or no");
  expectParseError("gpus 2\nlink * * 1 50\nmem_gbs 1\nop_budget_gbs -1\n",
                   "line 4: '-1' is not a number >= 0");

  struct relayTopo* t = NULL;
  T_CHECK(relayTopoLoad("/nonexistent/relaycc.topo", &t) == relayInvalidArgument && !t, "missing file");
  const char* e = relayGetLastError(NULL);
  T_CHECK(strstr(e, "mi350x") && strstr(e, "not a readable file"), "message names the presets: %s", e);
  T_CHECK(relayTopoLoad("", &t) == relayInvalidArgument, "empty name");
  return 0;
}

static int caseDetect(void) {
  struct relayTopo* t = (struct relayTopo*)1;
  relayResult_t r = relayTopoDetect(&t);
#ifndef RELAY_HAVE_NCCL
  T_CHECK(r == relayNotSupported && t == NULL, "detect on a CPU build: %d", (int)r);
#else
  T_CHECK(r == relayNotSupported || r == relaySuccess, "detect: %d", (int)r);
  relayTopoFree(r == relaySuccess ? t : NULL);
#endif
  return 0;
}

static const tCase kCases[] = {
    {.name = "presets", .fn = casePresets, .timeoutS = 60},
    {.name = "roundtrip", .fn = caseRoundTrip, .timeoutS = 60},
    {.name = "errors", .fn = caseErrors, .timeoutS = 60},
    {.name = "detect", .fn = caseDetect, .timeoutS = 60},
};

int main(int argc, char** argv) { return t_main(argc, argv, "topo", kCases, T_NCASES(kCases)); }
