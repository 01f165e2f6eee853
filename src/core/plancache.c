#include "core/plancache.h"

#include <stdlib.h>
#include <string.h>

#include "common.h"

/* 64 signatures: a training step issues a handful of distinct collective
 * shapes; more than 64 live at once would be unusual, and a miss only costs a
 * rebuild (microseconds for direct plans). */
#define PLAN_CACHE_ENTRIES 64

typedef struct {
  uint64_t hash;
  uint64_t lastUse;
  size_t keyBytes;
  unsigned char* key; /* serialized */
  relayPlan* plan;
} cacheEntry;

struct relayPlanCache {
  cacheEntry e[PLAN_CACHE_ENTRIES];
  uint64_t clock;
};

static size_t serialize(const planKey* k, unsigned char* out) {
  int32_t head[9] = {(int32_t)k->coll, k->nranks, k->nGroups, k->nActive, (int32_t)k->dtype,
                     (int32_t)k->op,   k->route,  k->depth,   k->root};
  size_t nr = (size_t)k->nGroups * (size_t)k->nActive, nc = (size_t)planKeyNumCounts(k);
  size_t n = sizeof head + nr * sizeof(int) + nc * sizeof(size_t);
  if (out) {
    memcpy(out, head, sizeof head);
    memcpy(out + sizeof head, k->ranks, nr * sizeof(int));
    memcpy(out + sizeof head + nr * sizeof(int), k->counts, nc * sizeof(size_t));
  }
  return n;
}

struct relayPlanCache* relayPlanCacheNew(void) { return calloc(1, sizeof(struct relayPlanCache)); }

void relayPlanCacheFree(struct relayPlanCache* c) {
  if (!c) return;
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    free(c->e[i].key);
    relayPlanFree(c->e[i].plan);
  }
  free(c);
}

const relayPlan* relayPlanCacheFind(struct relayPlanCache* c, const planKey* key) {
  unsigned char stackBuf[512];
  size_t n = serialize(key, NULL);
  unsigned char* buf = n <= sizeof stackBuf ? stackBuf : malloc(n);
  if (!buf) return NULL;
  serialize(key, buf);
  uint64_t h = relayHash64(RELAY_HASH_SEED, buf, n);
  const relayPlan* found = NULL;
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    cacheEntry* e = &c->e[i];
    if (e->plan && e->hash == h && e->keyBytes == n && memcmp(e->key, buf, n) == 0) {
      e->lastUse = ++c->clock;
      found = e->plan;
      break;
    }
  }
  if (buf != stackBuf) free(buf);
  return found;
}

int relayPlanCacheAdd(struct relayPlanCache* c, const planKey* key, relayPlan* plan) {
  size_t n = serialize(key, NULL);
  unsigned char* buf = malloc(n);
  if (!buf) return -1;
  serialize(key, buf);
  int victim = 0;
  for (int i = 0; i < PLAN_CACHE_ENTRIES; i++) {
    if (!c->e[i].plan) {
      victim = i;
      break;
    }
    if (c->e[i].lastUse < c->e[victim].lastUse) victim = i;
  }
  cacheEntry* e = &c->e[victim];
  free(e->key);
  relayPlanFree(e->plan);
  e->key = buf;
  e->keyBytes = n;
  e->hash = relayHash64(RELAY_HASH_SEED, buf, n);
  e->plan = plan;
  e->lastUse = ++c->clock;
  return 0;
}
