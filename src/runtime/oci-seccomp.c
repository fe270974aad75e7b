/* runtime/oci-seccomp.h. The bundle is the engine's (trusted for what it asks); what it asks only
 * ever narrows what cordon's filter allows. */
#include "runtime/oci-seccomp.h"

#include <errno.h>
#include <linux/filter.h>
#include <seccomp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "shared/fd-util.h"
#include "shared/macro.h"

#define bad(err, field, ...) cdn_error_field(err, EINVAL, field, __VA_ARGS__)

static void ctx_releasep(scmp_filter_ctx *ctx)
{
    if (*ctx)
        seccomp_release(*ctx);
}

/* An action by its OCI name; errno_ret for ERRNO and TRACE (EPERM when absent). The bundle's numbers
 * are read as reals (bundle.c). */
static int action(const char *name, const json_t *errno_ret, uint32_t *ret)
{
    double e = errno_ret ? json_number_value(errno_ret) : EPERM;
    if ((errno_ret && !json_is_number(errno_ret)) || e < 0 || e > 4095 || e != (double) (int) e)
        return -ERANGE;
    static const struct {
        const char *name;
        uint32_t action;
    } fixed[] = {{"SCMP_ACT_KILL", SCMP_ACT_KILL},
                 {"SCMP_ACT_KILL_THREAD", SCMP_ACT_KILL_THREAD},
                 {"SCMP_ACT_KILL_PROCESS", SCMP_ACT_KILL_PROCESS},
                 {"SCMP_ACT_TRAP", SCMP_ACT_TRAP},
                 {"SCMP_ACT_ALLOW", SCMP_ACT_ALLOW},
                 {"SCMP_ACT_LOG", SCMP_ACT_LOG}};
    for (size_t i = 0; name && i < ELEMENTSOF(fixed); i++)
        if (strcmp(name, fixed[i].name) == 0)
            return *ret = fixed[i].action, 0;
    if (name && strcmp(name, "SCMP_ACT_ERRNO") == 0)
        return *ret = SCMP_ACT_ERRNO((uint16_t) e), 0;
    if (name && strcmp(name, "SCMP_ACT_TRACE") == 0) /* no tracer here: the call fails as ERRNO would */
        return *ret = SCMP_ACT_ERRNO((uint16_t) e), 0;
    return -EINVAL;
}

static int op(const char *name, enum scmp_compare *ret)
{
    static const struct {
        const char *name;
        enum scmp_compare op;
    } ops[] = {{"SCMP_CMP_NE", SCMP_CMP_NE},
               {"SCMP_CMP_LT", SCMP_CMP_LT},
               {"SCMP_CMP_LE", SCMP_CMP_LE},
               {"SCMP_CMP_EQ", SCMP_CMP_EQ},
               {"SCMP_CMP_GE", SCMP_CMP_GE},
               {"SCMP_CMP_GT", SCMP_CMP_GT},
               {"SCMP_CMP_MASKED_EQ", SCMP_CMP_MASKED_EQ}};
    for (size_t i = 0; name && i < ELEMENTSOF(ops); i++)
        if (strcmp(name, ops[i].name) == 0)
            return *ret = ops[i].op, 0;
    return -EINVAL;
}

static bool u64(const json_t *j, uint64_t *ret)
{
    if (!j)
        return *ret = 0, true;
    if (json_is_integer(j) && json_integer_value(j) >= 0)
        return *ret = (uint64_t) json_integer_value(j), true;
    /* Past 2^63 jansson has no integer; a real exact up to 2^53 (bundle.c reads reals) */
    if (json_is_real(j) && json_real_value(j) >= 0 && json_real_value(j) < 18446744073709551616.0)
        return *ret = (uint64_t) json_real_value(j), true;
    return false;
}

/* The args of one rule: comparisons, each on its own argument. Several on the same argument become
 * one rule each (libseccomp takes one comparison per argument in a rule), as runc does. */
static int add_rule(scmp_filter_ctx ctx, uint32_t act, int nr, const json_t *args, const char *field,
                    struct cdn_error *err)
{
    struct scmp_arg_cmp cmp[6];
    size_t n = json_array_size(args), i;
    const json_t *a;
    bool seen[6] = {false}, repeated = false;
    if (args && !json_is_array(args))
        return bad(err, field, "%s.args: must be an array", field);
    if (n > 64)
        return bad(err, field, "%s.args: at most 64", field);
    struct scmp_arg_cmp all[64];
    json_array_foreach(args, i, a)
    {
        uint64_t index, value, two;
        enum scmp_compare o;
        if (!u64(json_object_get(a, "index"), &index) || index > 5 ||
            !u64(json_object_get(a, "value"), &value) || !u64(json_object_get(a, "valueTwo"), &two) ||
            op(json_string_value(json_object_get(a, "op")), &o) < 0)
            return bad(err, field, "%s.args[%zu]: index 0-5, value and valueTwo whole numbers, op SCMP_CMP_*",
                       field, i);
        all[i] = o == SCMP_CMP_MASKED_EQ ? SCMP_CMP((unsigned) index, o, value, two)
                                         : SCMP_CMP((unsigned) index, o, value);
        repeated |= seen[index];
        seen[index] = true;
    }
    int r = 0;
    if (!repeated) {
        memcpy(cmp, all, n * sizeof *cmp);
        r = seccomp_rule_add_array(ctx, act, nr, (unsigned) n, cmp);
    }
    for (i = 0; repeated && r >= 0 && i < n; i++)
        r = seccomp_rule_add_array(ctx, act, nr, 1, &all[i]);
    /* -EEXIST: the same rule again, or one the default action already gives (libseccomp refuses it) */
    if (r < 0 && r != -EEXIST && r != -EACCES)
        return cdn_error_field(err, -r, field, "%s: %s", field, strerror(-r));
    return 0;
}

static int export(scmp_filter_ctx ctx, void **ret_insns, uint16_t *ret_len, struct cdn_error *err)
{
    _cleanup_close_ int fd = memfd_create("cordon-oci-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return cdn_error_set(err, errno, "linux.seccomp: memfd: %m");
    int r = seccomp_export_bpf(ctx, fd);
    if (r < 0)
        return cdn_error_field(err, -r, "linux.seccomp", "linux.seccomp: export: %s", strerror(-r));
    off_t n = lseek(fd, 0, SEEK_END);
    if (n <= 0 || n % (off_t) sizeof(struct sock_filter) ||
        n / (off_t) sizeof(struct sock_filter) > BPF_MAXINSNS)
        return bad(err, "linux.seccomp", "linux.seccomp: %s", "the filter is too long for the kernel");
    void *b = malloc((size_t) n);
    if (!b)
        return -ENOMEM;
    if (pread(fd, b, (size_t) n, 0) != n) {
        free(b);
        return cdn_error_set(err, EIO, "linux.seccomp: read the filter back: %m");
    }
    *ret_insns = b;
    *ret_len = (uint16_t) (n / (off_t) sizeof(struct sock_filter));
    return 0;
}

int cdn_oci_seccomp_compile(const json_t *sc, void **ret_insns, uint16_t *ret_len, struct cdn_error *err)
{
    *ret_insns = NULL;
    *ret_len = 0;
    uint32_t def;
    const char *dname = json_string_value(json_object_get(sc, "defaultAction"));
    if (action(dname, json_object_get(sc, "defaultErrnoRet"), &def) < 0)
        return bad(err, "linux.seccomp.defaultAction",
                   "linux.seccomp.defaultAction: '%s' is not an action "
                   "cordon-runtime takes (SCMP_ACT_ERRNO, KILL, TRAP, ALLOW, LOG…; not NOTIFY)",
                   dname ? dname : "");
    if (json_object_get(sc, "listenerPath"))
        return bad(err, "linux.seccomp.listenerPath", "linux.seccomp.listenerPath: refused: %s",
                   "no seccomp agent answers a cordon container's calls");
    _cleanup_(ctx_releasep) scmp_filter_ctx ctx = seccomp_init(def);
    if (!ctx)
        return -ENOMEM;
    /* Other architectures' calls meet cordon's filter, which kills them: no need to add them here. */
    (void) seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); /* cordon sets it itself */
    const json_t *calls = json_object_get(sc, "syscalls"), *c;
    if (calls && !json_is_array(calls))
        return bad(err, "linux.seccomp.syscalls", "linux.seccomp.syscalls: %s", "must be an array");
    size_t i;
    json_array_foreach(calls, i, c)
    {
        char field[64];
        (void) snprintf(field, sizeof field, "linux.seccomp.syscalls[%zu]", i);
        uint32_t act;
        const char *aname = json_string_value(json_object_get(c, "action"));
        if (action(aname, json_object_get(c, "errnoRet"), &act) < 0)
            return bad(err, field, "%s.action: '%s' is not an action cordon-runtime takes (not NOTIFY)",
                       field, aname ? aname : "");
        const json_t *names = json_object_get(c, "names"), *nm;
        size_t k;
        if (!json_is_array(names))
            return bad(err, field, "%s.names: must be an array of syscall names", field);
        json_array_foreach(names, k, nm)
        {
            const char *name = json_string_value(nm);
            if (!name)
                return bad(err, field, "%s.names[%zu]: must be a string", field, k);
            int nr = seccomp_syscall_resolve_name(name);
            if (nr == __NR_SCMP_ERROR || act == def)
                continue; /* unknown here; or what the default does anyway */
            int r = add_rule(ctx, act, nr, json_object_get(c, "args"), field, err);
            if (r < 0)
                return r;
        }
    }
    return export(ctx, ret_insns, ret_len, err);
}
