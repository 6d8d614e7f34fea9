/* rstat from C: a tenant with a memory limit, a request group charged
 * counters and memory, removed when done; its history stays in the tenant.
 * Build: cc example.c $(pkg-config --cflags --libs rstat) */
#include <stdio.h>
#include <rstat.h>

#define TRY(call)                                                              \
    do {                                                                       \
        int rc_ = (call);                                                      \
        if (rc_ != 0) {                                                        \
            char msg[512];                                                     \
            rstat_last_error(msg, sizeof msg, NULL);                           \
            fprintf(stderr, "%s: %s\n  %s\n", #call, rstat_strerror(rc_), msg); \
            return 1;                                                          \
        }                                                                      \
    } while (0)

int main(void) {
    rstat *rs;
    rstat_group *root, *tenant, *req;
    rstat_counters *http;
    TRY(rstat_new(NULL, &rs));
    TRY(rstat_root(rs, &root));
    TRY(rstat_group_create(root, "tenant-a", &tenant));
    TRY(rstat_memory_set_limit(tenant, RSTAT_MEMORY_MAX, "200M"));

    const char *items[] = {"requests", "bytes_out"};
    TRY(rstat_counters_register(rs, "http", items, NULL, 2, &http));

    TRY(rstat_group_create(tenant, "req-1", &req));
    TRY(rstat_add(http, req, 0, 1));       /* per-CPU, no lock */
    TRY(rstat_add(http, req, 1, 1500));
    TRY(rstat_memory_try_charge(req, 64 << 10, 0, NULL));
    int rc = rstat_memory_try_charge(req, 300 << 20, 0, NULL);
    printf("charging 300M under a 200M limit: %s\n", rstat_strerror(rc));
    TRY(rstat_memory_uncharge(req, 64 << 10));
    TRY(rstat_group_remove(req));          /* history folds into tenant-a */
    TRY(rstat_group_put(req));

    int64_t v[2];
    TRY(rstat_read_exact(http, tenant, 0, v, 2));
    printf("tenant-a: requests %lld, bytes_out %lld\n", (long long)v[0], (long long)v[1]);
    char text[1024];
    TRY(rstat_read(tenant, "memory.events", text, sizeof text, NULL));
    printf("tenant-a memory.events:\n%s", text);
    TRY(rstat_group_put(tenant));
    TRY(rstat_group_put(root));
    TRY(rstat_free(rs));
    return 0;
}
