/* The monitor's rules (DESIGN §1 monitor/): patterns of escape or
 * reward-hacking intent matched against the command lines a sandbox runs
 * (exec) and against free text submitted about it (agent messages, POST
 * /v1/sandboxes/{id}/monitor/text). A match is an alert, not a violation:
 * intent, not an act. pcre2, with match limits (the input is the agent's).
 *
 * Rule file (JSON):
 *   {"rules": [{"id": "R1", "severity": "low|medium|high|critical",
 *               "on": ["exec", "text"], "pattern": "PCRE2", "description": "…"}]}
 * Patterns are compiled case-sensitive unless they say (?i), in byte mode
 * (subjects may be any bytes). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "shared/error.h"

enum cdn_rule_source { CDN_RULE_EXEC = 1, CDN_RULE_TEXT = 2 };

struct cdn_rules;

struct cdn_rule_match {
    const char *id, *severity, *description;
    size_t start, end; /* of the match in the subject */
};

/* Parse and compile; NULL with err (field "rules[I].pattern" …) on a bad file. */
struct cdn_rules *cdn_rules_load_json(const char *json, size_t len, struct cdn_error *err);
/* The rule set shipped with cordon (dist/monitor-rules.json has the same text). */
extern const char cdn_rules_default_json[];
void cdn_rules_free(struct cdn_rules *r);
size_t cdn_rules_count(const struct cdn_rules *r);
/* Call fn for every rule of source that matches subject (any bytes); returns the number of matches. */
size_t cdn_rules_match(const struct cdn_rules *r, enum cdn_rule_source source, const char *subject,
                       size_t len, void (*fn)(const struct cdn_rule_match *m, void *arg), void *arg);
