/* Threads with known totals, through the C ABI.
 *
 * WORKERS threads each add to their own child of "tenant" and charge and
 * uncharge memory; CHURN threads create a request group, add to it, remove
 * and put it, again and again (their history must fold into the tenant);
 * a reader thread reads the tenant exactly while they run and checks what
 * it sees against what the writers have published as done and started
 * (done-before-the-read <= seen <= started-before-the-read-ended), and a
 * RACER thread hammers a handle that a main-thread loop keeps releasing and
 * recreating, where every call must return 0 or RSTAT_EBADF, never crash.
 * After the join the totals must be exact: violations = 0.
 *
 * Then FREE_ROUNDS rounds of rstat_free racing threads that create groups,
 * look up the root and register counter sets on the same rstat: each call
 * returns 0 or RSTAT_EBADF, and once rstat_free has returned and the
 * threads are joined, no handle any of them got may still be live (one
 * that is would keep the freed rstat alive). That invariant holds however
 * the threads interleave; how often a round hits the window between a
 * call's lookup and its insert is up to the scheduler (src/group.rs has
 * the deterministic test of that window). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "check.h"

enum { WORKERS = 3, CHURN = 2, ITERS = 100000, CHURN_ITERS = 400 };

static rstat *rs;
static rstat_group *tenant;
static rstat_counters *io;
static atomic_long started, done; /* units added to item 0 under tenant */
static atomic_int stop_reader, violations, bad_codes;
static _Atomic(rstat_group *) shared_handle;

static void *worker(void *arg) {
    long id = (long)arg;
    char name[32];
    snprintf(name, sizeof name, "w%ld", id);
    rstat_group *g;
    if (rstat_group_create(tenant, name, &g) != 0) {
        atomic_fetch_add(&violations, 1);
        return NULL;
    }
    for (int i = 0; i < ITERS; i++) {
        atomic_fetch_add(&started, 1);
        if (rstat_add(io, g, 0, 1) != 0 || rstat_add(io, g, 1, id) != 0)
            atomic_fetch_add(&violations, 1);
        atomic_fetch_add(&done, 1);
        if (rstat_memory_try_charge(g, 100, 0, NULL) != 0 ||
            rstat_memory_uncharge(g, 100) != 0)
            atomic_fetch_add(&violations, 1);
    }
    rstat_group_put(g);
    return NULL;
}

static void *churner(void *arg) {
    long id = (long)arg;
    for (int i = 0; i < CHURN_ITERS; i++) {
        char name[32];
        snprintf(name, sizeof name, "req-%ld-%d", id, i);
        rstat_group *r;
        if (rstat_group_create(tenant, name, &r) != 0) {
            atomic_fetch_add(&violations, 1);
            continue;
        }
        atomic_fetch_add(&started, 5);
        if (rstat_add(io, r, 0, 5) != 0)
            atomic_fetch_add(&violations, 1);
        atomic_fetch_add(&done, 5);
        if (rstat_group_remove(r) != 0 || rstat_group_put(r) != 0)
            atomic_fetch_add(&violations, 1);
    }
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    long reads = 0;
    while (!atomic_load(&stop_reader)) {
        long lo = atomic_load(&done);
        int64_t v[2];
        if (rstat_read_exact(io, tenant, 0, v, 2) != 0) {
            atomic_fetch_add(&violations, 1);
            break;
        }
        long hi = atomic_load(&started);
        if (v[0] < lo || v[0] > hi) {
            fprintf(stderr, "exact read saw %lld, outside [%ld, %ld]\n", (long long)v[0], lo, hi);
            atomic_fetch_add(&violations, 1);
        }
        reads++;
    }
    return (void *)reads;
}

static void *racer(void *arg) {
    (void)arg;
    for (int i = 0; i < 200000 && !atomic_load(&stop_reader); i++) {
        rstat_group *h = atomic_load(&shared_handle);
        int rc = rstat_add(io, h, 0, 0);
        uint64_t id;
        int rc2 = rstat_group_id(h, &id);
        if ((rc != 0 && rc != RSTAT_EBADF) || (rc2 != 0 && rc2 != RSTAT_EBADF))
            atomic_fetch_add(&bad_codes, 1);
    }
    return NULL;
}

/* Enters groups and returns without exiting them: the thread's exit must
 * drop its guards (in thread-local destructors) without harm. */
static void *leaves_entered(void *arg) {
    rstat_group *g = arg;
    int ok = rstat_group_enter(g) == 0 && rstat_group_enter(tenant) == 0;
    rstat_group *cur;
    uint64_t id, want;
    ok = ok && rstat_current_group(rs, &cur) == 0 && rstat_group_id(cur, &id) == 0 &&
         rstat_group_id(tenant, &want) == 0 && id == want && rstat_group_put(cur) == 0;
    if (!ok)
        atomic_fetch_add(&violations, 1);
    return NULL;
}

enum { FREE_ROUNDS = 200, FREE_RACERS = 3, KEEP = 64 };

struct free_racer {
    rstat *rs;
    rstat_group *root;
    long id;
    atomic_int *running;
    void *kept[KEEP]; /* the last KEEP handles this thread got */
    int n;
};

static void *create_until_freed(void *arg) {
    struct free_racer *r = arg;
    atomic_fetch_add(r->running, 1);
    for (int i = 0;; i++) {
        char name[48];
        snprintf(name, sizeof name, "r%ld-%d", r->id, i);
        void *h = NULL;
        int rc;
        switch ((r->id + i) % 3) {
        case 0:
            rc = rstat_group_create(r->root, name, (rstat_group **)&h);
            break;
        case 1:
            rc = rstat_group_lookup(r->rs, "", (rstat_group **)&h);
            break;
        default: {
            const char *items[] = {"n"};
            rc = rstat_counters_register(r->rs, name, items, NULL, 1, (rstat_counters **)&h);
            /* 16 controllers at most: ENOSPC once they are taken. */
            if (rc == RSTAT_ENOSPC)
                continue;
        }
        }
        if (rc == RSTAT_EBADF)
            return NULL; /* freed: its handles are stale from now on */
        if (rc != 0) {
            atomic_fetch_add(&bad_codes, 1);
            return NULL;
        }
        r->kept[r->n++ % KEEP] = h;
    }
}

/* Whether `h` (a group or a counter set handle) is still live. */
static int is_live(void *h) {
    uint64_t id;
    size_t n;
    return rstat_group_id((rstat_group *)h, &id) != RSTAT_EBADF ||
           rstat_counters_len((rstat_counters *)h, &n) != RSTAT_EBADF;
}

static void free_while_creating(void) {
    int survivors = 0, calls = 0;
    for (int round = 0; round < FREE_ROUNDS; round++) {
        rstat_options o = {.size = sizeof o, .flags = RSTAT_OPT_NO_PERIODIC_FLUSH};
        rstat *frs;
        rstat_group *froot;
        CHECK_OK(rstat_new(&o, &frs));
        CHECK_OK(rstat_root(frs, &froot));
        atomic_int running = 0;
        struct free_racer r[FREE_RACERS];
        pthread_t t[FREE_RACERS];
        for (long i = 0; i < FREE_RACERS; i++) {
            r[i] = (struct free_racer){.rs = frs, .root = froot, .id = i, .running = &running};
            pthread_create(&t[i], NULL, create_until_freed, &r[i]);
        }
        while (atomic_load(&running) < FREE_RACERS)
            ;
        CHECK_OK(rstat_free(frs));
        for (int i = 0; i < FREE_RACERS; i++) {
            pthread_join(t[i], NULL);
            calls += r[i].n;
            for (int k = 0; k < r[i].n && k < KEEP; k++)
                survivors += is_live(r[i].kept[k]);
        }
        CHECK_RC(rstat_group_put(froot), RSTAT_EBADF); /* freed with its rstat */
    }
    CHECK_EQ(survivors, 0);
    printf("free racing creates: %d rounds, %d handles made, %d survived the free\n",
           FREE_ROUNDS, calls, survivors);
}

int main(void) {
    rstat_options o = {.size = sizeof o, .periodic_flush_ms = 10};
    CHECK_OK(rstat_new(&o, &rs));
    rstat_group *root;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_group_create(root, "tenant", &tenant));
    const char *items[] = {"ops", "weighted"};
    CHECK_OK(rstat_counters_register(rs, "io", items, NULL, 2, &io));
    rstat_group *first;
    CHECK_OK(rstat_group_create(root, "shared", &first));
    atomic_store(&shared_handle, first);

    pthread_t w[WORKERS], c[CHURN], rd, rc;
    for (long i = 0; i < WORKERS; i++)
        pthread_create(&w[i], NULL, worker, (void *)(i + 1));
    for (long i = 0; i < CHURN; i++)
        pthread_create(&c[i], NULL, churner, (void *)i);
    pthread_create(&rd, NULL, reader, NULL);
    pthread_create(&rc, NULL, racer, NULL);

    /* Release and recreate the handle the racer uses, while it uses it. */
    for (int i = 0; i < 300; i++) {
        rstat_group *h = atomic_load(&shared_handle);
        rstat_group *next;
        char name[32];
        snprintf(name, sizeof name, "shared-%d", i);
        CHECK_OK(rstat_group_create(root, name, &next));
        atomic_store(&shared_handle, next);
        CHECK_OK(rstat_group_remove(h));
        CHECK_OK(rstat_group_put(h));
    }

    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i], NULL);
    for (int i = 0; i < CHURN; i++)
        pthread_join(c[i], NULL);
    atomic_store(&stop_reader, 1);
    void *reads;
    pthread_join(rd, &reads);
    pthread_join(rc, NULL);

    /* Threads that exit while in groups (one of them removed meanwhile). */
    rstat_group *gone;
    CHECK_OK(rstat_group_create(root, "gone", &gone));
    pthread_t le[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&le[i], NULL, leaves_entered, i % 2 ? gone : root);
    CHECK_OK(rstat_group_remove(gone)); /* before or after their enters */
    for (int i = 0; i < 4; i++)
        pthread_join(le[i], NULL);
    CHECK_OK(rstat_group_put(gone)); /* after: their handle must stay valid */
    rstat_group *cur;
    uint64_t cur_id;
    CHECK_OK(rstat_current_group(rs, &cur)); /* this thread entered nothing */
    CHECK_OK(rstat_group_id(cur, &cur_id));
    CHECK_EQ(cur_id, 1);
    CHECK_OK(rstat_group_put(cur));

    int64_t v[2];
    CHECK_OK(rstat_read_exact(io, tenant, 0, v, 2));
    long want_ops = (long)WORKERS * ITERS + 5L * CHURN * CHURN_ITERS;
    long want_weighted = 0;
    for (long i = 1; i <= WORKERS; i++)
        want_weighted += i * ITERS;
    CHECK_EQ(v[0], want_ops);
    CHECK_EQ(v[1], want_weighted);
    CHECK_EQ(atomic_load(&done), want_ops);
    CHECK_OK(rstat_read_exact(io, tenant, RSTAT_READ_LOCAL, v, 2));
    CHECK_EQ(v[0], 0);
    CHECK_OK(rstat_memory_drain(root));
    uint64_t usage = 1;
    CHECK_OK(rstat_memory_current(root, &usage));
    CHECK_EQ(usage, 0);
    CHECK_EQ(atomic_load(&violations), 0);
    CHECK_EQ(atomic_load(&bad_codes), 0);
    CHECK_EQ((long)reads > 0, 1);
    printf("reader made %ld exact reads while the writers ran\n", (long)reads);
    CHECK_OK(rstat_free(rs));

    free_while_creating();
    CHECK_EQ(atomic_load(&bad_codes), 0);
    DONE("test_threads");
}
