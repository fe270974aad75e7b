/* Fuzz target: the monitor's rules against hostile subjects (an agent's text
 * and command lines go straight into them): the shipped rule set must match
 * any bytes without crashing or running away. */
#include "monitor/rules.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct cdn_rules *rules;
    if (!rules) {
        struct cdn_error err = {0};
        rules = cdn_rules_load_json(cdn_rules_default_json, strlen(cdn_rules_default_json), &err);
        if (!rules)
            abort(); /* the shipped rules must compile */
    }
    size_t a = cdn_rules_match(rules, CDN_RULE_EXEC, (const char *) data, size, NULL, NULL);
    size_t b = cdn_rules_match(rules, CDN_RULE_TEXT, (const char *) data, size, NULL, NULL);
    if (a > cdn_rules_count(rules) || b > cdn_rules_count(rules))
        abort();
    return 0;
}
