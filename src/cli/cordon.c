/* The cordon CLI: dispatch only. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/paths.h"
#if !CDN_LEAN
#include "oci/resolve.h"
#endif
#include "shared/macro.h"

static char **cli_argv;

static const struct {
    const char *name;
    int (*fn)(int argc, char *const *argv);
    bool lean; /* the lean build runs it itself rather than handing it to cordon-full */
    const char *help;
} commands[] = {
    {"run", cdn_cli_run, true, "run [FLAGS] [--] CMD [ARG…]   one command in a fresh sandbox, no daemon"},
    {"image", cdn_cli_image, false,
     "image rebuild host            rebuild the host image skeleton from this host's /etc\n"
     "  cordon image pull REF…               an OCI image into the store (ls, inspect, rm, prune)\n"
     "  cordon image build DIR [--disk F]    a Debian root by debootstrap (and a disk of it for --tier vm)"},
#if !CDN_LEAN
    {"create", cdn_cli_create, false, "create [FLAGS]                a sandbox in cordond; prints its id"},
    {"exec", cdn_cli_exec, false,
     "exec ID [-d] [--env K=V] [--workdir D] [--user U] [--timeout T] [--] CMD [ARG…]  (-d: in the "
     "background)"},
    {"ps", cdn_cli_ps, false,
     "ps ID                         its background processes (cordon exec -d starts them)"},
    {"logs", cdn_cli_logs, false,
     "logs [-f] ID PID              what a background process printed (-f: and prints)"},
    {"signal", cdn_cli_signal, false,
     "signal ID PID SIGNAL          any signal to a background process (TERM, 9, …)"},
    {"wait", cdn_cli_wait, false, "wait ID PID                   until it ends; prints its exit code"},
    {"port-forward", cdn_cli_port_forward, false,
     "port-forward ID [LOCAL:]REMOTE  127.0.0.1:LOCAL (0: any) to port REMOTE inside the sandbox"},
    {"session", cdn_cli_session, false,
     "session open ID [--shell SH] [--workdir D] [--user U] [--env K=V]…  a shell kept between commands\n"
     "  cordon session run [-i] [--timeout DUR] ID SID CMD…  one command line in it (ls, interrupt, rm)"},
    {"kill", cdn_cli_kill, false,
     "kill ID… | kill --label K=V…  delete sandboxes (by id, or all with those labels)"},
    {"update", cdn_cli_update, false,
     "update ID [--timeout DUR] [--idle-timeout DUR] [--label K=V | --label K-]… [--cpus N] [--memory SIZE]\n"
     "         [--pids N] [--on-violation P] [--network allowlist|open [--allow E]…] [--protect P]…\n"
     "         [--no-protect]  a new lifetime from now (0: none), idle timeout, labels, limits, violation\n"
     "         and egress policy (a container made with network none gets its network), protected paths\n"
     "         (the whole new list)"},
    {"ls", cdn_cli_ls, false, "ls [--label K=V]…             list sandboxes"},
    {"inspect", cdn_cli_inspect, false, "inspect ID                    a sandbox as JSON"},
    {"events", cdn_cli_events, false, "events ID [--follow]          its event log (NDJSON)"},
    {"trajectory", cdn_cli_trajectory, false,
     "trajectory show|export ID     a trajectory's steps (export: JSONL, docs/trajectories.md)"},
    {"checkpoint", cdn_cli_checkpoint, false,
     "checkpoint ID | ls [ID] | rm CK…  take a checkpoint of a sandbox's files (made --checkpoints), list,\n"
     "                              delete them"},
    {"rollback", cdn_cli_rollback, false,
     "rollback ID CK                its files become checkpoint CK's; its processes end "
     "(docs/trajectories.md)"},
    {"fork", cdn_cli_fork, false,
     "fork ID [-n N] [--checkpoint CK]  N sandboxes from a checkpoint of ID (one taken now without it)"},
    {"stats", cdn_cli_stats, false,
     "stats ID                      what it uses now: CPU, memory, pids, disk, network"},
    {"cp", cdn_cli_cp, false,
     "cp ID:PATH HOST | HOST ID:PATH copy a file out of or into a sandbox\n"
     "  cordon cp --max-bytes SIZE ID:PATH HOST   a download of a file over cordond's max_read\n"
     "  cordon cp FILE ID:DIR/                    into a directory, under its own name (either way)\n"
     "  cordon cp -r DIR ID:PATH | ID:PATH DIR    a directory, as one tar stream"},
    {"mv", cdn_cli_mv, false, "mv [-n] ID:FROM [ID:]TO       move a file or directory inside a sandbox"},
    {"chmod", cdn_cli_chmod, false,
     "chmod MODE ID:PATH            set permission bits (octal) inside a sandbox"},
    {"vm", cdn_cli_vm, false,
     "vm prepare                    the VM tiers' guest kernel and initramfs (cached)\n"
     "  cordon vm status [--json]            whether they are prepared (exit 1 if not), preparing nothing"},
    {"selftest", cdn_cli_selftest, false,
     "selftest [--tier T]… [--json] [RUN FLAGS]  the escape probes in a sandbox of each tier (exit 1: "
     "escaped)"},
#else
    /* the lean build hands these to cordon-full (see main) */
    {"create", NULL, false, ""},
    {"exec", NULL, false, ""},
    {"ps", NULL, false, ""},
    {"logs", NULL, false, ""},
    {"signal", NULL, false, ""},
    {"wait", NULL, false, ""},
    {"port-forward", NULL, false, ""},
    {"session", NULL, false, ""},
    {"kill", NULL, false, ""},
    {"update", NULL, false, ""},
    {"ls", NULL, false, ""},
    {"inspect", NULL, false, ""},
    {"events", NULL, false, ""},
    {"trajectory", NULL, false, ""},
    {"checkpoint", NULL, false, ""},
    {"fork", NULL, false, ""},
    {"rollback", NULL, false, ""},
    {"stats", NULL, false, ""},
    {"cp", NULL, false, ""},
    {"mv", NULL, false, ""},
    {"chmod", NULL, false, ""},
    {"vm", NULL, false, ""},
    {"selftest", NULL, false, ""},
#endif
};

int cdn_cli_exec_full(void)
{
    char path[4096];
    if (cdn_libexec_path("cordon-full", path, sizeof path) < 0) {
        fprintf(stderr, "cordon: cordon-full not found next to cordon or in %s (reinstall cordon)\n",
                CDN_LIBEXECDIR);
        return 125;
    }
    execv(path, cli_argv);
    fprintf(stderr, "cordon: exec %s: %s\n", path, strerror(errno));
    return 125;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: cordon COMMAND …\n");
    for (size_t i = 0; i < ELEMENTSOF(commands); i++)
        fprintf(f, "  cordon %s\n", commands[i].help);
}

int main(int argc, char **argv)
{
    cli_argv = argv;
#if !CDN_LEAN
    cdn_oci_install_resolver(); /* OCI references as images (the lean build hands them over) */
#endif
    if (argc < 2) {
        usage(stderr);
        return 125;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        if (CDN_LEAN)
            return cdn_cli_exec_full(); /* the full list is the full build's */
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("cordon %s\n", CORDON_VERSION);
        return 0;
    }
    for (size_t i = 0; i < ELEMENTSOF(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return CDN_LEAN && !commands[i].lean ? cdn_cli_exec_full() : commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "cordon: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 125;
}
