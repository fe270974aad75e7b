/* `cordon run` / `cordon create` flags → spec (DESIGN §3). Table-driven; a
 * flag maps onto exactly one spec field, and errors name both. */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#include "core/bind-policy.h"
#include "core/spec.h"

struct cdn_run_opts {
    struct cdn_spec spec;
    bool json;
    bool needs_full;    /* lean build: a flag it cannot serve (--spec) was given; see cli.h */
    char *const *argv;  /* the command, NULL-terminated; points into the caller's argv */
    bool no_command;    /* set by the caller: flags only (cordon create) */
    bool image_oci;     /* --image is an OCI reference: its config applies, the command may be omitted */
    bool workdir_given; /* --workdir: the image's WorkingDir does not apply */
    const char *pull;   /* --pull missing|always|never, or NULL */
    /* --bind-allow DIR[:ro] (run only; cordond has its own): points into the caller's argv */
    const char *bind_allow[CDN_BIND_RULES_MAX];
    size_t n_bind_allow;
};

/* Parse argv (after the subcommand) into opts; opts->spec must be initialised.
 * Returns 0, or a negative errno with err naming the flag. */
int cdn_run_parse(int argc, char *const *argv, struct cdn_run_opts *opts, struct cdn_error *err);
/* One line per flag, for --help. */
void cdn_run_usage(FILE *f);
