/* bench/load: the load generator of bench/run-daemon, in C on libcordon, so
 * that the client's own CPU cost stays small next to what is measured.
 *
 *   load cycle   SOCKET CLIENTS SECONDS [SPEC_JSON]   create → exec true → delete, CLIENTS threads
 *   load rate    SOCKET CLIENTS SECONDS SPEC BODY      one sandbox per client, then calls (BODY: the
 *                                                     call's JSON) or execs of true (BODY "exec")
 *   load latency SOCKET COUNT WARMUP CMD [ARG...]     sequential execs in one sandbox ($LOAD_SPEC)
 *   load health  SOCKET COUNT WARMUP                  sequential GET /v1/health: the client + HTTP floor
 *   load spawn   COUNT WARMUP PATH [ARG...]           sequential posix_spawn + waitpid on the host,
 *                                                     no sandbox, no daemon: the fork+exec floor
 *   load cpuid   COUNT ROUNDS                         ns per `cpuid` (x86-64; a VM exit under a hypervisor)
 *   load cpuid-count PATH [ARG...]                    how many `cpuid` PATH executes from exec to exit
 *   load fill    SOCKET CLIENTS COUNT SPEC            COUNT sandboxes made and left alive (run-density)
 *   load nsclone WORKERS SECONDS                      clone() into seven new namespaces, child exits: a floor
 *
 * Prints one JSON object on stdout: counts, errors and every sample in ms.
 * Each thread has its own client (its own keep-alive connection). */
#include "lib/cordon.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The environment of every host-side child: as small as that of a sandbox's exec. */
static char *const child_env[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec * 1e3 + (double) t.tv_nsec / 1e6;
}

struct samples {
    double *v;
    size_t n, cap;
};

static void add(struct samples *s, double x)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4096;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v)
            abort();
    }
    s->v[s->n++] = x;
}

static void print_samples(const char *name, const struct samples *s, bool last)
{
    printf("\"%s\":[", name);
    for (size_t i = 0; i < s->n; i++)
        printf("%s%.4f", i ? "," : "", s->v[i]);
    printf("]%s", last ? "" : ",");
}

struct worker {
    pthread_t t;
    const char *socket, *spec;
    double deadline;
    struct samples cycle, create, exec, server, del;
    long errors;
    char first_error[256];
};

static atomic_bool go;

static void fail(struct worker *w, cordon_client *c, const char *what)
{
    if (!w->errors++)
        snprintf(w->first_error, sizeof w->first_error, "%s: %s", what, cordon_last_error(c)->message);
}

static void *cycle_main(void *arg)
{
    struct worker *w = arg;
    cordon_client *c = cordon_client_new(w->socket);
    if (!c)
        return NULL;
    static const char *const argv[] = {"true", NULL};
    while (!atomic_load(&go))
        ;
    while (now_ms() < w->deadline) {
        char *id = NULL;
        double t0 = now_ms();
        if (cordon_create(c, w->spec, &id) < 0) {
            fail(w, c, "create");
            continue;
        }
        double t1 = now_ms();
        struct cordon_exec_result r = {0};
        if (cordon_exec(c, id, argv, NULL, &r) < 0 || r.exit_code != 0)
            fail(w, c, "exec");
        double t2 = now_ms();
        if (cordon_delete(c, id) < 0)
            fail(w, c, "delete");
        double t3 = now_ms();
        add(&w->create, t1 - t0);
        add(&w->exec, t2 - t1);
        add(&w->server, r.duration_ms);
        add(&w->del, t3 - t2);
        add(&w->cycle, t3 - t0);
        cordon_exec_result_free(&r);
        free(id);
    }
    cordon_client_free(c);
    return NULL;
}

/* The start of a run's JSON line: its clients, time, count and errors (the first one's text escaped). */
static void print_head(int clients, double elapsed_ms, const char *count_name, size_t count, long errors,
                       const char *first)
{
    printf("{\"clients\":%d,\"elapsed_ms\":%.3f,\"%s\":%zu,\"errors\":%ld,\"first_error\":\"", clients,
           elapsed_ms, count_name, count, errors);
    for (const char *p = first; *p; p++)
        printf(*p == '"' || *p == '\\' ? "\\%c" : (unsigned char) *p < 0x20 ? "?" : "%c", *p);
    printf("\",");
}

static int run_cycle(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    int n = atoi(argv[3]);
    double secs = atof(argv[4]);
    struct worker *w = calloc((size_t) n, sizeof *w);
    if (n < 1 || !w)
        return 2;
    for (int i = 0; i < n; i++) {
        w[i].socket = argv[2];
        w[i].spec = argc > 5 ? argv[5] : NULL;
        if (pthread_create(&w[i].t, NULL, cycle_main, &w[i]) != 0)
            return 1;
    }
    double start = now_ms();
    for (int i = 0; i < n; i++)
        w[i].deadline = start + secs * 1e3;
    atomic_store(&go, true);
    struct samples all[5] = {0};
    long errors = 0;
    const char *first = "";
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].t, NULL);
        struct samples *mine[5] = {&w[i].cycle, &w[i].create, &w[i].exec, &w[i].server, &w[i].del};
        for (int k = 0; k < 5; k++)
            for (size_t j = 0; j < mine[k]->n; j++)
                add(&all[k], mine[k]->v[j]);
        errors += w[i].errors;
        if (w[i].errors && !*first)
            first = w[i].first_error;
    }
    print_head(n, now_ms() - start, "cycles", all[0].n, errors, first);
    print_samples("cycle", &all[0], false);
    print_samples("create", &all[1], false);
    print_samples("exec", &all[2], false);
    print_samples("server", &all[3], false);
    print_samples("delete", &all[4], true);
    printf("}\n");
    return errors ? 1 : 0;
}

/* A worker thread's end: its samples into all, its errors counted, the first one's text kept. */
static void join_worker(pthread_t t, const struct samples *mine, long mine_errors, const char *mine_first,
                        struct samples *all, long *errors, const char **first)
{
    pthread_join(t, NULL);
    for (size_t j = 0; j < mine->n; j++)
        add(all, mine->v[j]);
    *errors += mine_errors;
    if (mine_errors && !**first)
        *first = mine_first;
}

/* rate: each client its own sandbox of SPEC, then calls (BODY: a call's JSON) or execs of
 * `true` (BODY "exec") back to back until the deadline. */
struct rater {
    pthread_t t;
    const char *socket, *spec, *body;
    double deadline;
    struct samples op;
    long errors;
    char first_error[256];
};

static void *rate_main(void *arg)
{
    struct rater *w = arg;
    cordon_client *c = cordon_client_new(w->socket);
    char *id = NULL;
    if (!c || cordon_create(c, w->spec, &id) < 0) {
        w->errors++;
        snprintf(w->first_error, sizeof w->first_error, "create: %s",
                 c ? cordon_last_error(c)->message : "?");
        cordon_client_free(c);
        return NULL;
    }
    static const char *const argv[] = {"true", NULL};
    bool exec = strcmp(w->body, "exec") == 0;
    while (!atomic_load(&go))
        ;
    while (now_ms() < w->deadline) {
        double t0 = now_ms();
        int r;
        if (exec) {
            struct cordon_exec_result res = {0};
            r = cordon_exec(c, id, argv, NULL, &res);
            r = r < 0 ? r : res.exit_code == 0 ? 0 : -1;
            cordon_exec_result_free(&res);
        } else {
            char *out = NULL;
            r = cordon_call(c, id, w->body, &out);
            bool failed = r == 0 && !strstr(out, "\"error\": null"); /* the call's own error */
            if (failed && !w->errors++)
                snprintf(w->first_error, sizeof w->first_error, "%s", out);
            free(out);
            if (failed) {
                add(&w->op, now_ms() - t0);
                continue;
            }
        }
        if (r < 0 && !w->errors++)
            snprintf(w->first_error, sizeof w->first_error, "%s", cordon_last_error(c)->message);
        add(&w->op, now_ms() - t0);
    }
    (void) cordon_delete(c, id);
    free(id);
    cordon_client_free(c);
    return NULL;
}

static int run_rate(int argc, char **argv)
{
    if (argc < 7)
        return 2;
    int n = atoi(argv[3]);
    double secs = atof(argv[4]);
    struct rater *w = calloc((size_t) n, sizeof *w);
    if (n < 1 || !w)
        return 2;
    for (int i = 0; i < n; i++) {
        w[i] = (struct rater){.socket = argv[2], .spec = argv[5], .body = argv[6], .deadline = 1e300};
        if (pthread_create(&w[i].t, NULL, rate_main, &w[i]) != 0)
            return 1;
    }
    usleep(500000); /* the sandboxes are made before the clock starts */
    double start = now_ms();
    for (int i = 0; i < n; i++)
        w[i].deadline = start + secs * 1e3;
    atomic_store(&go, true);
    struct samples all = {0};
    long errors = 0;
    const char *first = "";
    for (int i = 0; i < n; i++)
        join_worker(w[i].t, &w[i].op, w[i].errors, w[i].first_error, &all, &errors, &first);
    print_head(n, now_ms() - start, "ops", all.n, errors, first);
    print_samples("op", &all, true);
    printf("}\n");
    return errors ? 1 : 0;
}

static int run_latency(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    int count = atoi(argv[3]), warm = atoi(argv[4]);
    cordon_client *c = cordon_client_new(argv[2]);
    char *id = NULL;
    if (!c || cordon_create(c, getenv("LOAD_SPEC"), &id) < 0) {
        fprintf(stderr, "load: create: %s\n", c ? cordon_last_error(c)->message : "no client");
        return 1;
    }
    const char *const *cmd = (const char *const *) argv + 5;
    struct samples client = {0}, server = {0};
    int rc = 0;
    for (int i = 0; i < warm + count; i++) {
        struct cordon_exec_result r = {0};
        double t0 = now_ms();
        if (cordon_exec(c, id, cmd, NULL, &r) < 0 || r.exit_code != 0) {
            fprintf(stderr, "load: exec: %s (exit %d)\n", cordon_last_error(c)->message, r.exit_code);
            rc = 1;
            break;
        }
        double t1 = now_ms();
        if (i >= warm) {
            add(&client, t1 - t0);
            add(&server, r.duration_ms);
        }
        cordon_exec_result_free(&r);
    }
    (void) cordon_delete(c, id);
    free(id);
    cordon_client_free(c);
    printf("{");
    print_samples("client", &client, false);
    print_samples("server", &server, true);
    printf("}\n");
    return rc;
}

static int run_health(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    int count = atoi(argv[3]), warm = atoi(argv[4]);
    cordon_client *c = cordon_client_new(argv[2]);
    if (!c)
        return 1;
    struct samples client = {0};
    int rc = 0;
    for (int i = 0; i < warm + count; i++) {
        char *body = NULL;
        double t0 = now_ms();
        if (cordon_request(c, "GET", "/v1/health", NULL, 0, NULL, NULL, &body, NULL) < 0) {
            fprintf(stderr, "load: health: %s\n", cordon_last_error(c)->message);
            rc = 1;
            break;
        }
        double t1 = now_ms();
        free(body);
        if (i >= warm)
            add(&client, t1 - t0);
    }
    cordon_client_free(c);
    printf("{");
    print_samples("client", &client, true);
    printf("}\n");
    return rc;
}

/* fill: COUNT sandboxes of SPEC made by CLIENTS threads and left alive (bench/run-density);
 * the create samples, and the made ones' ids on stderr one a line when $LOAD_IDS is set. */
struct filler {
    pthread_t t;
    const char *socket, *spec;
    atomic_int *left;
    struct samples create;
    long errors;
    char first_error[256];
};

static void *fill_main(void *arg)
{
    struct filler *w = arg;
    cordon_client *c = cordon_client_new(w->socket);
    if (!c)
        return NULL;
    while (!atomic_load(&go))
        ;
    while (atomic_fetch_sub(w->left, 1) > 0) {
        char *id = NULL;
        double t0 = now_ms();
        if (cordon_create(c, w->spec, &id) < 0) {
            if (!w->errors++)
                snprintf(w->first_error, sizeof w->first_error, "create: %s", cordon_last_error(c)->message);
            if (w->errors > 8) /* the daemon refuses: no point going on */
                break;
            continue;
        }
        add(&w->create, now_ms() - t0);
        if (getenv("LOAD_IDS"))
            fprintf(stderr, "%s\n", id);
        free(id);
    }
    cordon_client_free(c);
    return NULL;
}

static int run_fill(int argc, char **argv)
{
    if (argc < 6)
        return 2;
    int n = atoi(argv[3]);
    atomic_int left = atoi(argv[4]);
    struct filler *w = calloc((size_t) (n > 0 ? n : 1), sizeof *w);
    if (n < 1 || !w)
        return 2;
    for (int i = 0; i < n; i++) {
        w[i] = (struct filler){.socket = argv[2], .spec = argv[5], .left = &left};
        if (pthread_create(&w[i].t, NULL, fill_main, &w[i]) != 0)
            return 1;
    }
    double start = now_ms();
    atomic_store(&go, true);
    struct samples all = {0};
    long errors = 0;
    const char *first = "";
    for (int i = 0; i < n; i++)
        join_worker(w[i].t, &w[i].create, w[i].errors, w[i].first_error, &all, &errors, &first);
    print_head(n, now_ms() - start, "made", all.n, errors, first);
    print_samples("create", &all, true);
    printf("}\n");
    return errors ? 1 : 0;
}

/* nsclone: the floor of a sandbox's making. WORKERS threads each clone() a child into seven new
 * namespaces (user, mount, pid, net, uts, ipc, cgroup) that exits at once, and wait for it, for
 * SECONDS; the children made per second. */
struct cloner {
    pthread_t t;
    double deadline;
    long made, errors;
    int first_errno;
    char stack[16384] __attribute__((aligned(16)));
};

static int clone_child(void *arg)
{
    (void) arg;
    return 0;
}

static void *clone_main(void *arg)
{
    struct cloner *w = arg;
    const int flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS |
                      CLONE_NEWIPC | CLONE_NEWCGROUP | SIGCHLD;
    while (!atomic_load(&go))
        ;
    while (now_ms() < w->deadline) {
        pid_t pid = clone(clone_child, w->stack + sizeof w->stack, flags, NULL);
        int status;
        if (pid < 0) {
            if (!w->errors++)
                w->first_errno = errno;
            continue;
        }
        while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
            ;
        w->made++;
    }
    return NULL;
}

static int run_nsclone(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int n = atoi(argv[2]);
    double secs = atof(argv[3]);
    struct cloner *w = calloc((size_t) (n > 0 ? n : 1), sizeof *w);
    if (n < 1 || !w)
        return 2;
    double start = now_ms();
    for (int i = 0; i < n; i++) {
        w[i].deadline = start + secs * 1e3;
        if (pthread_create(&w[i].t, NULL, clone_main, &w[i]) != 0)
            return 1;
    }
    atomic_store(&go, true);
    long made = 0, errors = 0;
    int first = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(w[i].t, NULL);
        made += w[i].made;
        errors += w[i].errors;
        if (w[i].errors && !first)
            first = w[i].first_errno;
    }
    double elapsed = now_ms() - start;
    print_head(n, elapsed, "made", (size_t) made, errors, first ? strerror(first) : "");
    printf("\"rate_per_s\":%.1f}\n", (double) made * 1e3 / elapsed);
    return errors ? 1 : 0;
}

/* argv[i..] as a NULL-terminated vector (argv itself is one). */
static int run_spawn(int argc, char **argv)
{
    if (argc < 5)
        return 2;
    int count = atoi(argv[2]), warm = atoi(argv[3]);
    char *const *cmd = argv + 4;
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0 ||
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0) != 0 ||
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0) != 0)
        return 1;
    struct samples client = {0};
    int rc = 0;
    for (int i = 0; i < warm + count; i++) {
        pid_t pid;
        int status;
        double t0 = now_ms();
        int e = posix_spawn(&pid, cmd[0], &fa, NULL, cmd, child_env);
        if (e != 0) {
            fprintf(stderr, "load: posix_spawn %s: %s\n", cmd[0], strerror(e));
            rc = 1;
            break;
        }
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
            ;
        double t1 = now_ms();
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "load: %s: wait status 0x%x\n", cmd[0], (unsigned) status);
            rc = 1;
            break;
        }
        if (i >= warm)
            add(&client, t1 - t0);
    }
    posix_spawn_file_actions_destroy(&fa);
    printf("{");
    print_samples("client", &client, true);
    printf("}\n");
    return rc;
}

#if defined(__x86_64__)
static void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4])
{
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

/* ROUNDS rounds of COUNT `cpuid`s (leaves 0, 1, 4 and 7 in turn, all used by
 * glibc's start-up); the ns per instruction of each round. */
static int run_cpuid(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int count = atoi(argv[2]), rounds = atoi(argv[3]);
    static const uint32_t leaves[4] = {0, 1, 4, 7};
    uint32_t r[4];
    printf("{\"leaves\":[0,1,4,7],\"ns\":[");
    for (int k = 0; k < rounds; k++) {
        double t0 = now_ms();
        for (int i = 0; i < count; i++)
            cpuid(leaves[i & 3], 0, r);
        double t1 = now_ms();
        printf("%s%.1f", k ? "," : "", (t1 - t0) * 1e6 / count);
    }
    printf("]}\n");
    return 0;
}

#ifndef ARCH_SET_CPUID
#define ARCH_SET_CPUID 0x1012
#endif

/* In the tracee stopped at rip: run the syscall nr(a1, a2) there (two bytes
 * of its text become `syscall` for one step); its return value. */
static long inject_syscall(pid_t pid, long nr, long a1, long a2)
{
    struct user_regs_struct saved, r;
    int status;
    if (ptrace(PTRACE_GETREGS, pid, NULL, &saved) < 0)
        return -errno;
    errno = 0;
    long word = ptrace(PTRACE_PEEKTEXT, pid, (void *) saved.rip, NULL);
    if (errno)
        return -errno;
    r = saved;
    r.rax = (unsigned long) nr;
    r.orig_rax = (unsigned long) -1;
    r.rdi = (unsigned long) a1;
    r.rsi = (unsigned long) a2;
    long ret = -EIO;
    if (ptrace(PTRACE_POKETEXT, pid, (void *) saved.rip, (void *) ((word & ~0xffffL) | 0x050f)) == 0 &&
        ptrace(PTRACE_SETREGS, pid, NULL, &r) == 0 && ptrace(PTRACE_SINGLESTEP, pid, NULL, NULL) == 0 &&
        waitpid(pid, &status, 0) == pid && WIFSTOPPED(status) && ptrace(PTRACE_GETREGS, pid, NULL, &r) == 0)
        ret = (long) r.rax;
    if (ptrace(PTRACE_POKETEXT, pid, (void *) saved.rip, (void *) word) < 0 ||
        ptrace(PTRACE_SETREGS, pid, NULL, &saved) < 0)
        return -EIO;
    return ret;
}

/* Run PATH under ptrace with `cpuid` made to fault (ARCH_SET_CPUID, needs the
 * CPU's "cpuid_fault" feature): each one stops the tracee with SIGSEGV, is
 * counted, emulated (run here with the same leaf and subleaf) and stepped
 * over. Without cpuid faulting, single-steps the whole program instead (slow:
 * every step is a debug trap). */
static int run_cpuid_count(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    char *const *cmd = argv + 2;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) {
            (void) dup2(null, 0);
            (void) dup2(null, 1);
        }
        if (ptrace(PTRACE_TRACEME, 0, NULL, NULL) == 0)
            execve(cmd[0], cmd, child_env);
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFSTOPPED(status) || WSTOPSIG(status) != SIGTRAP) {
        fprintf(stderr, "load: cpuid-count: %s did not stop at its exec\n", cmd[0]);
        return 1;
    }
    (void) ptrace(PTRACE_SETOPTIONS, pid, NULL, (void *) (long) PTRACE_O_EXITKILL);
    bool faulting = inject_syscall(pid, SYS_arch_prctl, ARCH_SET_CPUID, 0) == 0;
    long n = 0, steps = 0;
    int sig = 0;
    for (;;) {
        if (ptrace(faulting ? PTRACE_CONT : PTRACE_SINGLESTEP, pid, NULL, (void *) (long) sig) < 0 ||
            waitpid(pid, &status, 0) != pid)
            return 1;
        if (WIFEXITED(status) || WIFSIGNALED(status))
            break;
        sig = WSTOPSIG(status);
        struct user_regs_struct r;
        if (ptrace(PTRACE_GETREGS, pid, NULL, &r) < 0)
            return 1;
        errno = 0;
        long word = ptrace(PTRACE_PEEKTEXT, pid, (void *) r.rip, NULL);
        bool at_cpuid = !errno && (word & 0xffff) == 0xa20f;
        if (!faulting) {
            if (sig == SIGTRAP) {
                sig = 0;
                steps++;
                n += at_cpuid;
            }
        } else if (sig == SIGSEGV && at_cpuid) {
            uint32_t v[4];
            cpuid((uint32_t) r.rax, (uint32_t) r.rcx, v);
            r.rax = v[0], r.rbx = v[1], r.rcx = v[2], r.rdx = v[3];
            r.rip += 2;
            if (ptrace(PTRACE_SETREGS, pid, NULL, &r) < 0)
                return 1;
            n++;
            sig = 0;
        }
    }
    printf("{\"cpuid\":%ld,\"method\":\"%s\",\"steps\":%ld,\"exit_status\":%d}\n", n,
           faulting ? "cpuid-faulting" : "single-step", steps, status);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
#else
static int run_cpuid(int argc, char **argv)
{
    (void) argc, (void) argv;
    printf("{\"error\":\"not x86-64\"}\n");
    return 1;
}
#define run_cpuid_count run_cpuid
#endif

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*run)(int, char **);
    } modes[] = {{"cycle", run_cycle},
                 {"rate", run_rate},
                 {"latency", run_latency},
                 {"health", run_health},
                 {"spawn", run_spawn},
                 {"cpuid", run_cpuid},
                 {"cpuid-count", run_cpuid_count},
                 {"fill", run_fill},
                 {"nsclone", run_nsclone}};
    for (size_t i = 0; argc > 1 && i < sizeof modes / sizeof *modes; i++)
        if (strcmp(argv[1], modes[i].name) == 0) {
            int r = modes[i].run(argc, argv);
            if (r == 2)
                break;
            return r;
        }
    fprintf(stderr,
            "usage: load cycle SOCKET CLIENTS SECONDS [SPEC] | rate SOCKET CLIENTS SECONDS SPEC BODY |\n"
            "       latency SOCKET COUNT WARMUP CMD... |\n"
            "       health SOCKET COUNT WARMUP | spawn COUNT WARMUP PATH [ARG...] |\n"
            "       cpuid COUNT ROUNDS | cpuid-count PATH [ARG...] |\n"
            "       fill SOCKET CLIENTS COUNT SPEC | nsclone WORKERS SECONDS\n");
    return 2;
}
