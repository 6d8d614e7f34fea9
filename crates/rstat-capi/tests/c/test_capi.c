/* Every function of rstat.h, and every bad input the ABI promises to refuse
 * with an error code instead of undefined behaviour: NULL, stale (released,
 * or freed with their rstat), foreign (another rstat's), wrongly typed and
 * made-up handles; bad names, paths, limits, flags and option sizes; NULL
 * pointers and buffers that are too small. Built by CI with
 * -fsanitize=address,undefined against librstat.so. */
#define _POSIX_C_SOURCE 200809L /* sockets, for rstat_serve's test */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "check.h"

#define NOPERIODIC                                                             \
    { .size = sizeof(rstat_options), .flags = RSTAT_OPT_NO_PERIODIC_FLUSH }

static rstat *new_rstat(void) {
    rstat_options o = NOPERIODIC;
    rstat *rs = NULL;
    CHECK_OK(rstat_new(&o, &rs));
    return rs;
}

static void test_version_and_errors(void) {
    CHECK_EQ(rstat_abi_version(), RSTAT_ABI_VERSION);
    CHECK_EQ(rstat_abi_version() >> 16, RSTAT_ABI_VERSION_MAJOR);
    const int codes[] = {RSTAT_OK,     RSTAT_EPERM,     RSTAT_ENOENT,     RSTAT_E2BIG,
                         RSTAT_EBADF,  RSTAT_EAGAIN,    RSTAT_ENOMEM,     RSTAT_EFAULT,
                         RSTAT_EBUSY,  RSTAT_EEXIST,    RSTAT_EXDEV,      RSTAT_ENODEV,
                         RSTAT_EINVAL, RSTAT_EMFILE,    RSTAT_ENOSPC,     RSTAT_ERANGE,
                         RSTAT_EOVERFLOW, RSTAT_EPROTOTYPE, RSTAT_EOPNOTSUPP,
                         RSTAT_ENOTRECOVERABLE};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
        const char *s = rstat_strerror(codes[i]);
        CHECK_EQ(s != NULL && strcmp(s, "unknown error code") != 0, 1);
    }
    CHECK_STR(rstat_strerror(12345), "unknown error code");
    CHECK_STR(rstat_strerror(RSTAT_EBADF),
              "bad handle: NULL, released, freed with its rstat, or never issued");

    /* rstat_last_error: the message of this thread's last failure. */
    CHECK_RC(rstat_free(NULL), RSTAT_EBADF);
    char msg[256];
    size_t n = 0;
    CHECK_OK(rstat_last_error(msg, sizeof msg, &n));
    CHECK_EQ(n, strlen(msg));
    CHECK_EQ(strstr(msg, "rs is NULL") != NULL, 1);
    size_t need = 0;
    CHECK_RC(rstat_last_error(msg, 3, &need), RSTAT_ERANGE);
    CHECK_EQ(need, n + 1);
    CHECK_RC(rstat_last_error(NULL, 0, &need), RSTAT_ERANGE);
    CHECK_EQ(need, n + 1);
    CHECK_RC(rstat_last_error(NULL, 100, NULL), RSTAT_EFAULT);
}

/* Made-up handles: runs first, so this process's first rstat fills the
 * table's first slots. Small integers naming those slots (the counter set
 * in slot 0 is 0x03, the rstat in slot 1 0x11, its root in slot 2 0x22, at
 * generation 0) must be refused: each slot's generation starts at a
 * per-process random value, so a guess matches a live handle with
 * probability 2^-32 (this test fails spuriously below 10^-7 of runs). */
static void test_made_up_handles(void) {
    rstat *rs = new_rstat();
    rstat_group *root = NULL, *g = NULL;
    rstat_counters *cpu = NULL;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_cpu_counters(rs, &cpu));
    CHECK_RC(rstat_group_create((rstat_group *)0x22, "x", &g), RSTAT_EBADF);
    CHECK_EQ(g == NULL, 1);
    CHECK_RC(rstat_free((rstat *)0x11), RSTAT_EBADF);
    CHECK_RC(rstat_add((rstat_counters *)0x03, root, 0, 1), RSTAT_EBADF);
    uint64_t id = 0;
    CHECK_RC(rstat_group_id((rstat_group *)0x22, &id), RSTAT_EBADF);
    for (uintptr_t index = 0; index < 64; index++) {
        for (uintptr_t kind = 1; kind <= 3; kind++) {
            uintptr_t v = kind | index << 4;
            CHECK_EQ(v != (uintptr_t)rs && v != (uintptr_t)root && v != (uintptr_t)cpu, 1);
            CHECK_RC(rstat_free((rstat *)v), RSTAT_EBADF);
            CHECK_RC(rstat_group_put((rstat_group *)v), RSTAT_EBADF);
            size_t n = 0;
            CHECK_RC(rstat_counters_len((rstat_counters *)v, &n), RSTAT_EBADF);
        }
    }
    /* The real handles were not touched by any of that. */
    CHECK_OK(rstat_group_id(root, &id));
    CHECK_EQ(id, 1);
    CHECK_OK(rstat_group_put(root));
    CHECK_OK(rstat_free(rs));
}

static void test_new_and_options(void) {
    rstat *rs = NULL;
    CHECK_RC(rstat_new(NULL, NULL), RSTAT_EFAULT);
    CHECK_OK(rstat_new(NULL, &rs)); /* defaults: memory on, periodic flusher */
    CHECK_OK(rstat_free(rs));
    CHECK_RC(rstat_free(rs), RSTAT_EBADF); /* freed twice: stale */

    rstat_options o = NOPERIODIC;
    o.size = 8; /* below the first version */
    CHECK_RC(rstat_new(&o, &rs), RSTAT_EINVAL);
    o.size = sizeof o;
    o.flags = 1u << 20; /* unknown flag */
    CHECK_RC(rstat_new(&o, &rs), RSTAT_EINVAL);
    o.flags = RSTAT_OPT_NO_PERIODIC_FLUSH;
    o.flush_policy = 99;
    CHECK_RC(rstat_new(&o, &rs), RSTAT_EINVAL);
    o.flush_policy = RSTAT_FLUSH_ALWAYS;
    o.flags = RSTAT_OPT_MEMORY_BATCH | RSTAT_OPT_NO_PERIODIC_FLUSH;
    o.memory_batch = (1ull << 40); /* above the largest batch */
    CHECK_RC(rstat_new(&o, &rs), RSTAT_EINVAL);
    o.flags = 0;
    o.periodic_flush_ms = 100ull * 24 * 3600 * 1000; /* 100 days */
    CHECK_RC(rstat_new(&o, &rs), RSTAT_EINVAL);

    /* A newer caller's larger struct: zero tail accepted, nonzero refused. */
    struct {
        rstat_options base;
        uint64_t future_field;
    } big;
    memset(&big, 0, sizeof big);
    big.base.size = sizeof big;
    big.base.flags = RSTAT_OPT_NO_PERIODIC_FLUSH;
    CHECK_OK(rstat_new(&big.base, &rs));
    CHECK_OK(rstat_free(rs));
    big.future_field = 1;
    CHECK_RC(rstat_new(&big.base, &rs), RSTAT_E2BIG);

    /* Every policy and a custom period and batch build. */
    const uint32_t policies[] = {RSTAT_FLUSH_THRESHOLD, RSTAT_FLUSH_ALWAYS,
                                 RSTAT_FLUSH_UNIFIED_ROOT, RSTAT_FLUSH_COALESCED};
    for (int i = 0; i < 4; i++) {
        rstat_options p = {.size = sizeof p,
                           .flags = RSTAT_OPT_MEMORY_BATCH,
                           .flush_policy = policies[i],
                           .nr_cpus = 3,
                           .memory_batch = 0,
                           .periodic_flush_ms = 50};
        CHECK_OK(rstat_new(&p, &rs));
        CHECK_OK(rstat_free(rs));
    }
}

static void test_groups(void) {
    rstat *rs = new_rstat();
    rstat_group *root = NULL, *a = NULL, *b = NULL, *x = NULL;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_RC(rstat_root(rs, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_root(NULL, &x), RSTAT_EBADF);
    CHECK_RC(rstat_root((rstat *)root, &x), RSTAT_EPROTOTYPE);

    uint64_t id = 0, id2 = 0;
    CHECK_OK(rstat_group_id(root, &id));
    CHECK_EQ(id, 1);
    CHECK_RC(rstat_group_id(root, NULL), RSTAT_EFAULT);

    CHECK_OK(rstat_group_create(root, "a", &a));
    CHECK_OK(rstat_group_create(a, "b", &b));
    CHECK_RC(rstat_group_create(root, "a", &x), RSTAT_EEXIST);
    /* Bad names. */
    char longname[300];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    const char *bad[] = {"", "x/y", ".", "..", longname, "\xff\xfe"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_RC(rstat_group_create(root, bad[i], &x), RSTAT_EINVAL);
    CHECK_RC(rstat_group_create(root, NULL, &x), RSTAT_EFAULT);
    CHECK_RC(rstat_group_create(root, "c", NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_group_create(NULL, "c", &x), RSTAT_EBADF);
    CHECK_RC(rstat_group_create((rstat_group *)rs, "c", &x), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_group_create((rstat_group *)(uintptr_t)0x12345670ull, "c", &x), RSTAT_EBADF);
    CHECK_RC(rstat_group_create((rstat_group *)(uintptr_t)0xdeadbeefcafef00dull, "c", &x),
             RSTAT_EBADF);

    /* Lookup by path. */
    CHECK_OK(rstat_group_lookup(rs, "a/b", &x));
    CHECK_OK(rstat_group_id(x, &id));
    CHECK_OK(rstat_group_id(b, &id2));
    CHECK_EQ(id, id2); /* another handle, the same group */
    CHECK_EQ(x != b, 1);
    CHECK_OK(rstat_group_put(x));
    CHECK_OK(rstat_group_lookup(rs, "/a/b", &x));
    CHECK_OK(rstat_group_put(x));
    CHECK_OK(rstat_group_lookup(rs, "/", &x));
    CHECK_OK(rstat_group_id(x, &id));
    CHECK_EQ(id, 1);
    CHECK_OK(rstat_group_put(x));
    CHECK_RC(rstat_group_lookup(rs, "a//b", &x), RSTAT_EINVAL);
    CHECK_RC(rstat_group_lookup(rs, "a/nope", &x), RSTAT_ENOENT);
    CHECK_RC(rstat_group_lookup(rs, NULL, &x), RSTAT_EFAULT);
    CHECK_RC(rstat_group_lookup(rs, "a", NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_group_lookup((rstat *)a, "a", &x), RSTAT_EPROTOTYPE);

    /* Path, with a buffer too small. */
    char buf[64];
    size_t n = 0;
    CHECK_OK(rstat_group_path(b, buf, sizeof buf, &n));
    CHECK_STR(buf, "/a/b");
    CHECK_EQ(n, 4);
    CHECK_RC(rstat_group_path(b, buf, 4, &n), RSTAT_ERANGE);
    CHECK_EQ(n, 5);
    CHECK_RC(rstat_group_path(b, NULL, 64, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_group_path(root, buf, 1, &n), RSTAT_ERANGE);
    CHECK_EQ(n, 2);
    CHECK_OK(rstat_group_path(root, buf, 2, NULL));
    CHECK_STR(buf, "/");

    int online = -1;
    CHECK_OK(rstat_group_is_online(b, &online));
    CHECK_EQ(online, 1);
    CHECK_RC(rstat_group_is_online(b, NULL), RSTAT_EFAULT);

    /* Remove: children first, never the root, once. */
    CHECK_RC(rstat_group_remove(a), RSTAT_EBUSY);
    CHECK_RC(rstat_group_remove(root), RSTAT_EPERM);
    CHECK_OK(rstat_group_remove(b));
    CHECK_RC(rstat_group_remove(b), RSTAT_ENODEV);
    CHECK_OK(rstat_group_is_online(b, &online));
    CHECK_EQ(online, 0);
    CHECK_RC(rstat_group_lookup(rs, "a/b", &x), RSTAT_ENOENT);
    CHECK_RC(rstat_group_create(b, "c", &x), RSTAT_ENODEV);
    CHECK_OK(rstat_group_path(b, buf, sizeof buf, NULL)); /* still answers */
    CHECK_STR(buf, "/a/b");

    /* Reference get/put: the handle lives until its last put. */
    CHECK_OK(rstat_group_get(b));
    CHECK_OK(rstat_group_put(b));
    CHECK_OK(rstat_group_id(b, &id));
    CHECK_OK(rstat_group_put(b));
    CHECK_RC(rstat_group_id(b, &id), RSTAT_EBADF);  /* stale */
    CHECK_RC(rstat_group_put(b), RSTAT_EBADF);      /* put once too often */
    CHECK_RC(rstat_group_get(b), RSTAT_EBADF);
    CHECK_RC(rstat_group_remove(b), RSTAT_EBADF);
    CHECK_RC(rstat_group_put(NULL), RSTAT_EBADF);
    CHECK_RC(rstat_group_get((rstat_group *)rs), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_group_put((rstat_group *)rs), RSTAT_EPROTOTYPE);
    /* Slots are reused oldest first: make enough handles that b's slot is
     * reused (the table has far fewer than 2000 free slots here); the new
     * handle there has a new generation, so b stays stale. */
    rstat_group *c = NULL;
    CHECK_OK(rstat_group_create(root, "c", &c));
    enum { MANY = 2000 };
    rstat_group **many = malloc(MANY * sizeof *many);
    int made = 0;
    for (int i = 0; i < MANY; i++)
        made += rstat_group_lookup(rs, "c", &many[i]) == 0;
    CHECK_EQ(made, MANY);
    CHECK_RC(rstat_group_id(b, &id), RSTAT_EBADF);
    CHECK_RC(rstat_group_put(b), RSTAT_EBADF);
    /* The same slot and generation with another kind is refused as such. */
    CHECK_RC(rstat_add((rstat_counters *)many[0], many[0], 0, 1), RSTAT_EPROTOTYPE);
    for (int i = 0; i < MANY; i++)
        CHECK_OK(rstat_group_put(many[i]));
    free(many);

    /* Freeing the rstat makes every handle of it stale. */
    CHECK_RC(rstat_free((rstat *)a), RSTAT_EPROTOTYPE);
    CHECK_OK(rstat_free(rs));
    CHECK_RC(rstat_group_id(a, &id), RSTAT_EBADF);
    CHECK_RC(rstat_group_put(c), RSTAT_EBADF);
    CHECK_RC(rstat_group_create(root, "d", &x), RSTAT_EBADF);
    CHECK_RC(rstat_root(rs, &x), RSTAT_EBADF);
}

static void test_counters(void) {
    rstat *rs = new_rstat(), *other = new_rstat();
    rstat_group *root, *t, *r, *foreign_root;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_root(other, &foreign_root));
    CHECK_OK(rstat_group_create(root, "tenant", &t));
    CHECK_OK(rstat_group_create(t, "req", &r));

    const char *items[] = {"requests", "bytes"};
    const uint64_t units[] = {1, 4096};
    rstat_counters *io = NULL, *x = NULL;
    CHECK_OK(rstat_counters_register(rs, "io", items, units, 2, &io));
    CHECK_RC(rstat_counters_register(rs, "io", items, NULL, 2, &x), RSTAT_EEXIST);
    CHECK_RC(rstat_counters_register(rs, NULL, items, NULL, 2, &x), RSTAT_EFAULT);
    CHECK_RC(rstat_counters_register(rs, "n", NULL, NULL, 2, &x), RSTAT_EFAULT);
    CHECK_RC(rstat_counters_register(rs, "n", items, NULL, 0, &x), RSTAT_EINVAL);
    CHECK_RC(rstat_counters_register(rs, "n", items, NULL, 2, NULL), RSTAT_EFAULT);
    const char *dup[] = {"a", "a"};
    CHECK_RC(rstat_counters_register(rs, "n", dup, NULL, 2, &x), RSTAT_EINVAL);
    const char *with_null[] = {"a", NULL};
    CHECK_RC(rstat_counters_register(rs, "n", with_null, NULL, 2, &x), RSTAT_EFAULT);
    const uint64_t bad_units[] = {3, 1};
    CHECK_RC(rstat_counters_register(rs, "n", items, bad_units, 2, &x), RSTAT_EINVAL);
    CHECK_RC(rstat_counters_register((rstat *)root, "n", items, NULL, 2, &x), RSTAT_EPROTOTYPE);

    uint32_t idx = 99;
    CHECK_OK(rstat_counters_item(io, "bytes", &idx));
    CHECK_EQ(idx, 1);
    CHECK_RC(rstat_counters_item(io, "Bytes", &idx), RSTAT_ENOENT);
    CHECK_RC(rstat_counters_item(io, NULL, &idx), RSTAT_EFAULT);
    CHECK_RC(rstat_counters_item(io, "bytes", NULL), RSTAT_EFAULT);
    size_t len = 0;
    CHECK_OK(rstat_counters_len(io, &len));
    CHECK_EQ(len, 2);
    CHECK_RC(rstat_counters_len((rstat_counters *)t, &len), RSTAT_EPROTOTYPE);

    /* Add: local to r, hierarchical up the tree. */
    CHECK_OK(rstat_add(io, r, 0, 1));
    CHECK_OK(rstat_add(io, r, 1, 8192));
    CHECK_OK(rstat_add(io, t, 0, 10));
    CHECK_RC(rstat_add(io, r, 2, 1), RSTAT_EINVAL);        /* item out of range */
    CHECK_RC(rstat_add(io, foreign_root, 0, 1), RSTAT_EXDEV);
    CHECK_RC(rstat_add((rstat_counters *)r, r, 0, 1), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_add(io, (rstat_group *)io, 0, 1), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_add(NULL, r, 0, 1), RSTAT_EBADF);
    CHECK_RC(rstat_add(io, NULL, 0, 1), RSTAT_EBADF);

    int64_t v[4] = {0};
    CHECK_OK(rstat_read_exact(io, t, 0, v, 4));
    CHECK_EQ(v[0], 11);
    CHECK_EQ(v[1], 8192);
    CHECK_OK(rstat_read_exact(io, t, RSTAT_READ_LOCAL, v, 2));
    CHECK_EQ(v[0], 10);
    CHECK_EQ(v[1], 0);
    CHECK_OK(rstat_counters_read(io, root, 0, v, 2));
    CHECK_EQ(v[0] <= 11, 1); /* by policy: may lag, never exceeds */
    CHECK_RC(rstat_read_exact(io, t, 0, v, 1), RSTAT_ERANGE);
    CHECK_RC(rstat_read_exact(io, t, 0, NULL, 2), RSTAT_EFAULT);
    CHECK_RC(rstat_read_exact(io, t, 8, v, 2), RSTAT_EINVAL);
    CHECK_RC(rstat_read_exact(io, foreign_root, 0, v, 2), RSTAT_EXDEV);
    CHECK_RC(rstat_counters_read(io, t, 8, v, 2), RSTAT_EINVAL);

    /* A removed group keeps working; its history folds into its parent. */
    CHECK_OK(rstat_group_remove(r));
    CHECK_OK(rstat_add(io, r, 0, 100));
    CHECK_OK(rstat_group_put(r));
    CHECK_OK(rstat_read_exact(io, t, 0, v, 2));
    CHECK_EQ(v[0], 111);
    CHECK_RC(rstat_add(io, r, 0, 1), RSTAT_EBADF); /* put: stale */

    /* The built-in cpu counter set. */
    rstat_counters *cpu = NULL, *cpu2 = NULL;
    CHECK_OK(rstat_cpu_counters(rs, &cpu));
    CHECK_OK(rstat_cpu_counters(rs, &cpu2));
    CHECK_EQ(cpu == cpu2, 1);
    CHECK_RC(rstat_cpu_counters(rs, NULL), RSTAT_EFAULT);
    CHECK_OK(rstat_account_cputime(t, 300, 200));
    CHECK_RC(rstat_account_cputime(t, UINT64_MAX, 1), RSTAT_EOVERFLOW);
    CHECK_RC(rstat_account_cputime((rstat_group *)cpu, 1, 1), RSTAT_EPROTOTYPE);
    CHECK_OK(rstat_read_exact(cpu, t, 0, v, 3));
    CHECK_EQ(v[0], 500);
    CHECK_EQ(v[1], 300);
    CHECK_EQ(v[2], 200);
    /* The root is the process: its CPU time plus what was charged by hand. */
    CHECK_OK(rstat_read_exact(cpu, root, 0, v, 3));
    CHECK_EQ(v[0] >= 500 && v[1] >= 300 && v[2] >= 200, 1);

    /* Too many counter sets. */
    int rc = 0, made = 0;
    for (int i = 0; i < 64 && rc == 0; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%d", i);
        rc = rstat_counters_register(rs, name, items, NULL, 2, &x);
        made += rc == 0;
    }
    CHECK_EQ(rc, RSTAT_ENOSPC);
    CHECK_EQ(made > 0, 1);

    CHECK_OK(rstat_free(rs));
    CHECK_RC(rstat_add(io, t, 0, 1), RSTAT_EBADF); /* freed with its rstat */
    CHECK_RC(rstat_read_exact(cpu, t, 0, v, 3), RSTAT_EBADF);
    CHECK_OK(rstat_free(other));
}

/* A counter set of RSTAT_MAX_ITEMS items registers, and its last item
 * counts; one item more is an invalid argument. */
static void test_max_items(void) {
    rstat *rs = new_rstat();
    rstat_group *root, *t;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_group_create(root, "tenant", &t));
    static char names[RSTAT_MAX_ITEMS + 1][16];
    static const char *items[RSTAT_MAX_ITEMS + 1];
    for (size_t i = 0; i <= RSTAT_MAX_ITEMS; i++) {
        snprintf(names[i], sizeof names[i], "i%zu", i);
        items[i] = names[i];
    }
    rstat_counters *big = NULL, *x = NULL;
    CHECK_OK(rstat_counters_register(rs, "big", items, NULL, RSTAT_MAX_ITEMS, &big));
    size_t len = 0;
    CHECK_OK(rstat_counters_len(big, &len));
    CHECK_EQ(len, RSTAT_MAX_ITEMS);
    uint32_t last = 0;
    char last_name[16];
    snprintf(last_name, sizeof last_name, "i%d", RSTAT_MAX_ITEMS - 1);
    CHECK_OK(rstat_counters_item(big, last_name, &last));
    CHECK_EQ(last, RSTAT_MAX_ITEMS - 1);
    rstat_group *r = NULL;
    CHECK_OK(rstat_group_create(t, "req", &r)); /* made after the set */
    CHECK_OK(rstat_add(big, r, last, 7));
    CHECK_OK(rstat_add(big, t, last, 5));
    CHECK_OK(rstat_add(big, t, 0, 1));
    static int64_t v[RSTAT_MAX_ITEMS];
    CHECK_OK(rstat_read_exact(big, t, 0, v, RSTAT_MAX_ITEMS));
    CHECK_EQ(v[RSTAT_MAX_ITEMS - 1], 12);
    CHECK_EQ(v[0], 1);
    CHECK_OK(rstat_read_exact(big, t, RSTAT_READ_LOCAL, v, RSTAT_MAX_ITEMS));
    CHECK_EQ(v[RSTAT_MAX_ITEMS - 1], 5);
    CHECK_OK(rstat_counters_read(big, root, 0, v, RSTAT_MAX_ITEMS));
    CHECK_EQ(v[RSTAT_MAX_ITEMS - 1] <= 12, 1); /* by policy: may lag */
    CHECK_RC(rstat_counters_register(rs, "bigger", items, NULL, RSTAT_MAX_ITEMS + 1, &x),
             RSTAT_EINVAL);
    CHECK_OK(rstat_group_put(r));
    CHECK_OK(rstat_free(rs));
}

static void test_memory(void) {
    rstat *rs = new_rstat();
    rstat_group *root, *t, *r;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_group_create(root, "tenant", &t));
    CHECK_OK(rstat_group_create(t, "req", &r));

    uint64_t v = 0;
    CHECK_OK(rstat_memory_limit(t, RSTAT_MEMORY_MAX, &v));
    CHECK_EQ(v, RSTAT_MEMORY_LIMIT_MAX);
    CHECK_OK(rstat_memory_set_limit(t, RSTAT_MEMORY_MAX, "200M"));
    CHECK_OK(rstat_memory_limit(t, RSTAT_MEMORY_MAX, &v));
    CHECK_EQ(v, 200ull << 20);
    CHECK_OK(rstat_memory_set_limit(t, RSTAT_MEMORY_HIGH, " 100M\n"));
    CHECK_OK(rstat_memory_limit(t, RSTAT_MEMORY_HIGH, &v));
    CHECK_EQ(v, 100ull << 20);
    CHECK_OK(rstat_memory_set_limit(t, RSTAT_MEMORY_LOW, "4K"));
    CHECK_OK(rstat_memory_set_limit(t, RSTAT_MEMORY_MIN, "0"));
    CHECK_OK(rstat_memory_set_limit(r, RSTAT_MEMORY_MAX, "max"));
    const char *bad[] = {"-5", "1.5", "12Q", "", "abc", "99999999999999999999", "16E"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_RC(rstat_memory_set_limit(t, RSTAT_MEMORY_MAX, bad[i]), RSTAT_EINVAL);
    CHECK_OK(rstat_memory_limit(t, RSTAT_MEMORY_MAX, &v));
    CHECK_EQ(v, 200ull << 20); /* bad text changed nothing */
    CHECK_RC(rstat_memory_set_limit(t, 9, "1M"), RSTAT_EINVAL);
    CHECK_RC(rstat_memory_set_limit(t, RSTAT_MEMORY_MAX, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_memory_limit(t, 9, &v), RSTAT_EINVAL);
    CHECK_RC(rstat_memory_limit(t, RSTAT_MEMORY_MAX, NULL), RSTAT_EFAULT);

    /* Charge within the limit, then past it. */
    uint32_t fl = 99;
    CHECK_OK(rstat_memory_try_charge(r, 150ull << 20, 0, &fl));
    CHECK_EQ(fl & RSTAT_CHARGED_FORCED, 0);
    CHECK_EQ(fl & RSTAT_CHARGED_OVER_HIGH, RSTAT_CHARGED_OVER_HIGH); /* past 100M high */
    CHECK_RC(rstat_memory_try_charge(r, 100ull << 20, 0, NULL), RSTAT_ENOMEM);
    CHECK_OK(rstat_memory_try_charge(r, 100ull << 20, RSTAT_CHARGE_FORCE, &fl));
    CHECK_EQ(fl & RSTAT_CHARGED_FORCED, RSTAT_CHARGED_FORCED);
    CHECK_RC(rstat_memory_try_charge(r, 1, 4, NULL), RSTAT_EINVAL);
    CHECK_RC(rstat_memory_try_charge(r, UINT64_MAX, 0, NULL), RSTAT_EOVERFLOW);
    CHECK_OK(rstat_memory_current(t, &v));
    CHECK_EQ(v, 250ull << 20);
    CHECK_OK(rstat_memory_peak(t, &v));
    CHECK_EQ(v >= (250ull << 20), 1);
    CHECK_RC(rstat_memory_current(t, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_memory_peak(t, NULL), RSTAT_EFAULT);

    rstat_memory_events ev = {.size = sizeof ev};
    CHECK_OK(rstat_memory_read_events(t, 0, &ev));
    CHECK_EQ(ev.max, 2); /* the refused and the forced charge */
    CHECK_EQ(ev.oom, 2);
    CHECK_EQ(ev.high >= 1, 1);
    CHECK_EQ(ev.size, sizeof ev); /* left as the caller set it */
    CHECK_OK(rstat_memory_read_events(r, RSTAT_EVENTS_LOCAL, &ev));
    CHECK_EQ(ev.max, 0); /* t's limit refused: counted on t */
    CHECK_OK(rstat_memory_read_events(root, 0, &ev));
    CHECK_EQ(ev.max, 2); /* hierarchical */
    CHECK_RC(rstat_memory_read_events(t, 2, &ev), RSTAT_EINVAL);
    CHECK_RC(rstat_memory_read_events(t, 0, NULL), RSTAT_EFAULT);
    ev.size = 4;
    CHECK_RC(rstat_memory_read_events(t, 0, &ev), RSTAT_EINVAL);
    /* A larger (newer) struct: the known part is filled, the rest left. */
    struct {
        rstat_memory_events base;
        uint64_t future;
    } big;
    memset(&big, 0, sizeof big);
    big.base.size = sizeof big;
    big.future = 77;
    CHECK_OK(rstat_memory_read_events(t, 0, &big.base));
    CHECK_EQ(big.base.oom, 2);
    CHECK_EQ(big.future, 77);

    /* Uncharge exactly what was charged. */
    CHECK_RC(rstat_memory_uncharge(r, 1ull << 40), RSTAT_EINVAL); /* more than usage */
    CHECK_RC(rstat_memory_uncharge(r, UINT64_MAX), RSTAT_EOVERFLOW);
    CHECK_OK(rstat_memory_uncharge(r, 150ull << 20));
    CHECK_OK(rstat_memory_uncharge(r, 100ull << 20));
    CHECK_OK(rstat_memory_drain(root));
    CHECK_OK(rstat_memory_current(root, &v));
    CHECK_EQ(v, 0);

    /* Small charges from the stock; a removed group's charges move up. */
    CHECK_OK(rstat_memory_try_charge(r, 10, 0, NULL));
    CHECK_OK(rstat_group_remove(r));
    CHECK_OK(rstat_memory_uncharge(r, 10)); /* lands on t, which holds it */
    CHECK_OK(rstat_memory_drain(root));
    CHECK_OK(rstat_memory_current(t, &v));
    CHECK_EQ(v, 0);
    CHECK_RC(rstat_memory_set_limit(r, RSTAT_MEMORY_MAX, "1M"), RSTAT_ENODEV);

    /* Wrong and stale handles. */
    CHECK_RC(rstat_memory_try_charge((rstat_group *)rs, 1, 0, NULL), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_memory_uncharge(NULL, 1), RSTAT_EBADF);
    CHECK_RC(rstat_memory_drain(NULL), RSTAT_EBADF);
    CHECK_OK(rstat_group_put(r));
    CHECK_RC(rstat_memory_try_charge(r, 1, 0, NULL), RSTAT_EBADF);
    CHECK_OK(rstat_free(rs));

    /* Without a memory controller. */
    rstat_options o = {.size = sizeof o,
                       .flags = RSTAT_OPT_NO_MEMORY | RSTAT_OPT_NO_PERIODIC_FLUSH};
    CHECK_OK(rstat_new(&o, &rs));
    CHECK_OK(rstat_root(rs, &root));
    CHECK_RC(rstat_memory_try_charge(root, 1, 0, NULL), RSTAT_EOPNOTSUPP);
    CHECK_RC(rstat_memory_set_limit(root, RSTAT_MEMORY_MAX, "1M"), RSTAT_EOPNOTSUPP);
    CHECK_RC(rstat_memory_current(root, &v), RSTAT_EOPNOTSUPP);
    CHECK_OK(rstat_free(rs));
}

static void test_read(void) {
    rstat *rs = new_rstat();
    rstat_group *root, *t;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_group_create(root, "t", &t));
    const char *items[] = {"rbytes", "wbytes"};
    rstat_counters *io;
    CHECK_OK(rstat_counters_register(rs, "io", items, NULL, 2, &io));
    CHECK_OK(rstat_add(io, t, 0, 4096));
    CHECK_OK(rstat_account_cputime(t, 300, 200));
    CHECK_OK(rstat_memory_set_limit(t, RSTAT_MEMORY_MAX, "200M"));

    char buf[4096];
    size_t n = 0;
    CHECK_OK(rstat_read(t, "io.stat", buf, sizeof buf, &n));
    CHECK_STR(buf, "rbytes 4096\nwbytes 0\n");
    CHECK_EQ(n, strlen(buf));
    CHECK_OK(rstat_read(root, "io.stat.local", buf, sizeof buf, NULL));
    CHECK_STR(buf, "rbytes 0\nwbytes 0\n");
    CHECK_OK(rstat_read(t, "cpu.stat", buf, sizeof buf, NULL));
    CHECK_STR(buf, "usage_usec 500\nuser_usec 300\nsystem_usec 200\n");
    CHECK_OK(rstat_read(t, "memory.max", buf, sizeof buf, NULL));
    CHECK_STR(buf, "209715200\n");
    CHECK_OK(rstat_read(root, "memory.max", buf, sizeof buf, NULL));
    CHECK_STR(buf, "max\n");
    CHECK_OK(rstat_memory_try_charge(t, 1000, 0, NULL));
    CHECK_OK(rstat_read(t, "memory.stat", buf, sizeof buf, NULL));
    CHECK_EQ(strncmp(buf, "charged 1000\n", 13), 0);
    CHECK_OK(rstat_read(t, "memory.events", buf, sizeof buf, NULL));
    CHECK_STR(buf, "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n");

    CHECK_RC(rstat_read(t, "memory.bogus", buf, sizeof buf, NULL), RSTAT_ENOENT);
    CHECK_RC(rstat_read(t, "nope.stat", buf, sizeof buf, NULL), RSTAT_ENOENT);
    CHECK_RC(rstat_read(t, NULL, buf, sizeof buf, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_read(t, "io.stat", buf, 5, &n), RSTAT_ERANGE);
    CHECK_EQ(n, strlen("rbytes 4096\nwbytes 0\n") + 1);
    CHECK_RC(rstat_read(t, "io.stat", NULL, 0, &n), RSTAT_ERANGE);
    CHECK_RC(rstat_read(t, "io.stat", NULL, 100, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_read((rstat_group *)io, "io.stat", buf, sizeof buf, NULL), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_read(NULL, "io.stat", buf, sizeof buf, NULL), RSTAT_EBADF);
    CHECK_OK(rstat_memory_uncharge(t, 1000));
    CHECK_OK(rstat_free(rs));
    CHECK_RC(rstat_read(t, "io.stat", buf, sizeof buf, NULL), RSTAT_EBADF);
}

static void test_enter_exit(void) {
    rstat *rs = new_rstat(), *other = new_rstat();
    rstat_group *root, *a, *b, *cur;
    uint64_t id_a, id_b, id;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_group_create(root, "a", &a));
    CHECK_OK(rstat_group_create(a, "b", &b));
    CHECK_OK(rstat_group_id(a, &id_a));
    CHECK_OK(rstat_group_id(b, &id_b));

    CHECK_OK(rstat_current_group(rs, &cur)); /* in no group: the root */
    CHECK_OK(rstat_group_id(cur, &id));
    CHECK_EQ(id, 1);
    CHECK_OK(rstat_group_put(cur));

    CHECK_OK(rstat_group_enter(a));
    CHECK_OK(rstat_group_enter(b));
    CHECK_OK(rstat_current_group(rs, &cur));
    CHECK_OK(rstat_group_id(cur, &id));
    CHECK_EQ(id, id_b);
    CHECK_OK(rstat_group_put(cur));
    /* Another rstat sees its own root while this thread is in rs's group. */
    CHECK_OK(rstat_current_group(other, &cur));
    CHECK_OK(rstat_group_id(cur, &id));
    CHECK_EQ(id, 1);
    CHECK_OK(rstat_group_put(cur));

    CHECK_OK(rstat_group_exit(b));
    CHECK_OK(rstat_current_group(rs, &cur));
    CHECK_OK(rstat_group_id(cur, &id));
    CHECK_EQ(id, id_a);
    CHECK_OK(rstat_group_put(cur));
    CHECK_RC(rstat_group_exit(b), RSTAT_EINVAL); /* exited already */
    CHECK_RC(rstat_group_exit(NULL), RSTAT_EBADF);
    CHECK_RC(rstat_group_enter(NULL), RSTAT_EBADF);
    CHECK_RC(rstat_group_enter((rstat_group *)rs), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_current_group(rs, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_current_group((rstat *)a, &cur), RSTAT_EPROTOTYPE);

    /* Put while entered: the exit still matches, the group stays current. */
    CHECK_OK(rstat_group_put(a));
    CHECK_OK(rstat_current_group(rs, &cur));
    CHECK_OK(rstat_group_id(cur, &id));
    CHECK_EQ(id, id_a);
    CHECK_OK(rstat_group_put(cur));
    CHECK_OK(rstat_group_exit(a));
    CHECK_OK(rstat_current_group(rs, &cur));
    CHECK_OK(rstat_group_id(cur, &id));
    CHECK_EQ(id, 1);
    CHECK_OK(rstat_group_put(cur));
    CHECK_OK(rstat_free(rs));
    CHECK_OK(rstat_free(other));
}

/* Limits from C: a kill marks the subtree (and later children), fallible
 * charges of a killed group fail, the current thread sees it; cpu.max in
 * the kernel's format, read back through rstat_read; the memory.high
 * delay a thread owes (none here). */
static void test_limits(void) {
    rstat *rs = new_rstat();
    rstat_group *root, *t, *req, *late;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_group_create(root, "t", &t));
    CHECK_OK(rstat_group_create(t, "req", &req));
    int k = -1;
    CHECK_OK(rstat_group_is_killed(t, &k));
    CHECK_EQ(k, 0);
    CHECK_OK(rstat_group_enter(req));
    CHECK_OK(rstat_current_killed(&k));
    CHECK_EQ(k, 0);
    uint64_t n = 0;
    CHECK_OK(rstat_group_kill(t, &n));
    CHECK_EQ(n, 2);
    CHECK_OK(rstat_current_killed(&k));
    CHECK_EQ(k, 1);
    CHECK_OK(rstat_group_exit(req));
    CHECK_OK(rstat_current_killed(&k));
    CHECK_EQ(k, 0); /* in no group */
    CHECK_OK(rstat_group_kill(t, NULL)); /* again: nothing new */
    CHECK_OK(rstat_group_kill(t, &n));
    CHECK_EQ(n, 0);
    CHECK_OK(rstat_group_create(t, "late", &late));
    CHECK_OK(rstat_group_is_killed(late, &k));
    CHECK_EQ(k, 1);
    CHECK_RC(rstat_memory_try_charge(late, 100, 0, NULL), RSTAT_ENOMEM);
    CHECK_OK(rstat_group_is_killed(root, &k));
    CHECK_EQ(k, 0);

    char text[256];
    CHECK_OK(rstat_read(root, "cpu.max", text, sizeof text, NULL));
    CHECK_STR(text, "max 100000\n");
    CHECK_OK(rstat_group_set_cpu_max(t, "20000 100000"));
    CHECK_OK(rstat_read(t, "cpu.max", text, sizeof text, NULL));
    CHECK_STR(text, "20000 100000\n");
    CHECK_OK(rstat_read(t, "cpu.stat", text, sizeof text, NULL));
    CHECK_EQ(strstr(text, "nr_throttled 0\n") != NULL, 1);
    CHECK_RC(rstat_group_set_cpu_max(t, "0 100000"), RSTAT_EINVAL);
    CHECK_RC(rstat_group_set_cpu_max(t, "20000 10"), RSTAT_EINVAL);
    CHECK_RC(rstat_group_set_cpu_max(t, "lots"), RSTAT_EINVAL);
    CHECK_RC(rstat_group_set_cpu_max(t, NULL), RSTAT_EFAULT);
    CHECK_OK(rstat_read(t, "cpu.max", text, sizeof text, NULL));
    CHECK_STR(text, "20000 100000\n"); /* refused writes changed nothing */
    CHECK_OK(rstat_group_set_cpu_max(t, "max"));

    uint64_t slept = 1;
    CHECK_OK(rstat_throttle_point(&slept));
    CHECK_EQ(slept, 0);
    CHECK_OK(rstat_throttle_point(NULL));

    CHECK_RC(rstat_group_kill(NULL, NULL), RSTAT_EBADF);
    CHECK_RC(rstat_group_kill((rstat_group *)rs, NULL), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_group_is_killed(t, NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_current_killed(NULL), RSTAT_EFAULT);
    CHECK_RC(rstat_group_set_cpu_max(NULL, "max"), RSTAT_EBADF);

    CHECK_OK(rstat_group_remove(late));
    CHECK_OK(rstat_group_put(late));
    CHECK_OK(rstat_group_remove(req));
    CHECK_OK(rstat_group_put(req));
    CHECK_OK(rstat_group_put(t));
    CHECK_OK(rstat_group_put(root));
    CHECK_OK(rstat_free(rs));
}

/* GET `path` from 127.0.0.1:`port` (HTTP/1.0: the server closes after
 * answering); the answer goes into `buf`, NUL-terminated. Returns the
 * number of bytes read, or -1 if the connection was refused. */
static long http_get(uint16_t port, const char *path, char *buf, size_t len) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK_EQ(fd >= 0, 1);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    char req[256];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    CHECK_EQ(write(fd, req, (size_t)n), n);
    size_t got = 0;
    for (;;) {
        ssize_t r = read(fd, buf + got, len - 1 - got);
        if (r <= 0)
            break;
        got += (size_t)r;
        if (got == len - 1)
            break;
    }
    buf[got] = 0;
    close(fd);
    return (long)got;
}

/* rstat_serve: the exporter from C, on loopback, its series scraped over
 * a real socket; one server per rstat; stopped by rstat_serve_stop and by
 * rstat_free. */
static void test_serve(void) {
    rstat *rs = new_rstat(), *other = new_rstat();
    rstat_group *root, *tenant;
    CHECK_OK(rstat_root(rs, &root));
    CHECK_OK(rstat_group_create(root, "tenant-x", &tenant));
    CHECK_OK(rstat_memory_try_charge(tenant, 4096, 0, NULL));

    uint16_t port = 0;
    CHECK_OK(rstat_serve(rs, "127.0.0.1:0", NULL, &port));
    CHECK_EQ(port != 0, 1);
    static char buf[1 << 20];
    CHECK_EQ(http_get(port, "/metrics", buf, sizeof buf) > 0, 1);
    CHECK_EQ(strncmp(buf, "HTTP/1.1 200", 12) == 0, 1);
    CHECK_EQ(strstr(buf, "path=\"/tenant-x\"") != NULL, 1);
    CHECK_EQ(strstr(buf, "rstat_memory_current_bytes{path=\"/tenant-x\"} 4096") != NULL, 1);
    CHECK_EQ(http_get(port, "/nothing-here", buf, sizeof buf) > 0, 1);
    CHECK_EQ(strncmp(buf, "HTTP/1.1 404", 12) == 0, 1);

    /* One server per rstat; another rstat cannot take the same port. */
    CHECK_RC(rstat_serve(rs, "127.0.0.1:0", NULL, NULL), RSTAT_EBUSY);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%u", (unsigned)port);
    CHECK_RC(rstat_serve(other, addr, NULL, NULL), RSTAT_EBUSY);

    /* Stopped: the port no longer answers, a second stop is an error. */
    CHECK_OK(rstat_serve_stop(rs));
    CHECK_EQ(http_get(port, "/metrics", buf, sizeof buf), -1);
    CHECK_RC(rstat_serve_stop(rs), RSTAT_ENOENT);
    CHECK_RC(rstat_serve_stop(other), RSTAT_ENOENT);

    /* Bad input: handles, addresses, options. */
    CHECK_RC(rstat_serve(NULL, NULL, NULL, NULL), RSTAT_EBADF);
    CHECK_RC(rstat_serve((rstat *)tenant, NULL, NULL, NULL), RSTAT_EPROTOTYPE);
    CHECK_RC(rstat_serve_stop(NULL), RSTAT_EBADF);
    CHECK_RC(rstat_serve(rs, "not an address", NULL, NULL), RSTAT_EINVAL);
    CHECK_RC(rstat_serve(rs, "127.0.0.1:99999", NULL, NULL), RSTAT_EINVAL);
    CHECK_RC(rstat_serve(rs, "\xff\xfe:0", NULL, NULL), RSTAT_EINVAL);
    CHECK_RC(rstat_serve(rs, "0.0.0.0:0", NULL, NULL), RSTAT_EPERM); /* not loopback */
    rstat_serve_options o = {.size = sizeof o, .flags = 0x80};
    CHECK_RC(rstat_serve(rs, "127.0.0.1:0", &o, NULL), RSTAT_EINVAL);
    o.flags = 0;
    o.max_connections = 100000;
    CHECK_RC(rstat_serve(rs, "127.0.0.1:0", &o, NULL), RSTAT_EINVAL);
    o.max_connections = 0;
    o.size = 4;
    CHECK_RC(rstat_serve(rs, "127.0.0.1:0", &o, NULL), RSTAT_EINVAL);
    struct {
        rstat_serve_options o;
        uint64_t newer;
    } big = {.o = {.size = sizeof big}, .newer = 1};
    CHECK_RC(rstat_serve(rs, "127.0.0.1:0", &big.o, NULL), RSTAT_E2BIG);

    /* Options: depth 1 exports the tenant, memory in 4 KiB units. */
    o.size = sizeof o;
    o.max_depth = 1;
    o.memory_unit_bytes = 4096;
    o.max_connections = 2;
    CHECK_OK(rstat_serve(rs, "127.0.0.1:0", &o, &port));
    CHECK_EQ(http_get(port, "/metrics", buf, sizeof buf) > 0, 1);
    CHECK_EQ(strstr(buf, "rstat_memory_current_bytes{path=\"/tenant-x\"} 16777216") != NULL, 1);

    /* rstat_free stops a running server. */
    CHECK_OK(rstat_memory_uncharge(tenant, 4096));
    CHECK_OK(rstat_group_put(tenant));
    CHECK_OK(rstat_group_put(root));
    CHECK_OK(rstat_free(rs));
    CHECK_EQ(http_get(port, "/metrics", buf, sizeof buf), -1);
    CHECK_RC(rstat_serve_stop(rs), RSTAT_EBADF);
    CHECK_OK(rstat_free(other));
}

int main(void) {
    test_version_and_errors();
    test_made_up_handles();
    test_new_and_options();
    test_groups();
    test_counters();
    test_max_items();
    test_memory();
    test_read();
    test_enter_exit();
    test_serve();
    test_limits();
    DONE("test_capi");
}
