/* The cordon CLI: dispatch only. */
#include <stdio.h>
#include <string.h>

#include "image/image.h"
#include "shared/macro.h"

int cdn_cli_run(int argc, char *const *argv);

static int cmd_image(int argc, char *const *argv)
{
    if (argc == 2 && strcmp(argv[0], "rebuild") == 0 && strcmp(argv[1], "host") == 0) {
        struct cdn_error err = {0};
        if (cdn_image_build_host(true, &err) < 0) {
            fprintf(stderr, "cordon: %s\n", err.msg);
            return 125;
        }
        return 0;
    }
    fprintf(stderr, "usage: cordon image rebuild host\n");
    return 125;
}

static const struct {
    const char *name;
    int (*fn)(int argc, char *const *argv);
    const char *help;
} commands[] = {
    {"run", cdn_cli_run, "run [FLAGS] [--] CMD [ARG…]   one command in a fresh sandbox, no daemon"},
    {"image", cmd_image,
     "image rebuild host            rebuild the host image skeleton from this host's /etc"},
};

static void usage(FILE *f)
{
    fprintf(f, "usage: cordon COMMAND …\n");
    for (size_t i = 0; i < ELEMENTSOF(commands); i++)
        fprintf(f, "  cordon %s\n", commands[i].help);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 125;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("cordon %s\n", CORDON_VERSION);
        return 0;
    }
    for (size_t i = 0; i < ELEMENTSOF(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "cordon: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 125;
}
