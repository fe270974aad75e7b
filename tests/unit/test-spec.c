#include "cli/run-flags.h"
#include "core/spec.h"
#include "tap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static int from_json(struct cdn_spec *s, const char *json, struct cdn_error *err)
{
    *err = (struct cdn_error){0};
    if (cdn_spec_init(s) < 0)
        return -ENOMEM;
    return cdn_spec_from_json(s, json, strlen(json), err);
}

TEST(defaults_are_safe)
{
    struct cdn_spec s;
    struct cdn_error err = {0};
    CHECK_EQ_INT(cdn_spec_init(&s), 0);
    CHECK_EQ_INT(s.tier, CDN_TIER_CONTAINER);
    CHECK_EQ_INT(s.net_mode, CDN_NET_NONE);
    CHECK_EQ_INT(s.limits.memory_mb, 512);
    CHECK_EQ_INT(s.limits.pids, 256);
    CHECK_EQ_INT(s.limits.disk_mb, 1024);
    CHECK_EQ_INT(s.limits.timeout_ms, 600000);
    CHECK_STREQ(s.image, "host");
    CHECK_STREQ(s.workdir, "/workspace");
    CHECK_EQ_INT(cdn_spec_validate(&s, &err), 0);
    cdn_spec_free(&s);
}

/* The writable layer's kind: "memory" (a tmpfs) by default, "disk" a filesystem of its own; both survive a
 * round trip through the JSON the daemon records. */
TEST(disk_kind)
{
    struct cdn_spec s;
    struct cdn_error err;
    CHECK_EQ_INT(from_json(&s, "{}", &err), 0);
    CHECK_EQ_INT(s.disk, CDN_DISK_DISK); /* the default: a filesystem of its own (issue 20) */
    char *out = cdn_spec_to_json(&s);
    CHECK(out && strstr(out, "\"disk\":\"disk\""));
    free(out);
    cdn_spec_free(&s);
    CHECK_EQ_INT(from_json(&s, "{\"disk\":\"memory\",\"limits\":{\"disk_mb\":64}}", &err), 0);
    CHECK_EQ_INT(s.disk, CDN_DISK_MEMORY);
    CHECK_EQ_INT(cdn_spec_validate(&s, &err), 0);
    out = cdn_spec_to_json(&s);
    CHECK(out && strstr(out, "\"disk\":\"memory\""));
    struct cdn_spec again;
    CHECK_EQ_INT(from_json(&again, out, &err), 0);
    CHECK_EQ_INT(again.disk, CDN_DISK_MEMORY);
    cdn_spec_free(&again);
    free(out);
    cdn_spec_free(&s);
    CHECK_EQ_INT(from_json(&s, "{\"disk\":\"floppy\"}", &err), -EINVAL);
    CHECK_STREQ(err.field, "disk");
    CHECK(strstr(err.msg, "floppy") && strstr(err.msg, "memory"));
    cdn_spec_free(&s);
}

TEST(json_full_spec)
{
    struct cdn_spec s;
    struct cdn_error err;
    const char *j =
        "{\"tier\":\"container\",\"image\":\"host\",\"limits\":{\"cpus\":0.5,\"memory_mb\":256,"
        "\"pids\":64,\"disk_mb\":100,\"timeout_s\":1.5},\"network\":{\"mode\":\"none\"},"
        "\"mounts\":[{\"source\":\"/srv\",\"target\":\"/data\",\"readonly\":true}],"
        "\"env\":{\"K\":\"V\"},\"workdir\":\"/w\",\"labels\":{\"job\":\"j1\"},\"on_violation\":\"log\"}";
    CHECK_EQ_INT(from_json(&s, j, &err), 0);
    CHECK(s.limits.cpus == 0.5);
    CHECK_EQ_INT(s.limits.memory_mb, 256);
    CHECK_EQ_INT(s.limits.timeout_ms, 1500);
    CHECK_EQ_INT(s.n_mounts, 1);
    CHECK_STREQ(s.mounts[0].target, "/data");
    CHECK(s.mounts[0].readonly);
    CHECK_STREQ(s.env.v[0], "K=V");
    CHECK_STREQ(s.labels.v[0], "job=j1");
    CHECK_EQ_INT(cdn_spec_validate(&s, &err), 0);
    char *out = cdn_spec_to_json(&s);
    CHECK(out && strstr(out, "\"memory_mb\":256"));
    free(out);
    cdn_spec_free(&s);
}

TEST(json_errors_name_the_field)
{
    static const struct {
        const char *json, *field;
    } cases[] = {
        {"{\"limits\":{\"memroy_mb\":1}}", "limits.memroy_mb"},
        {"{\"bogus\":1}", "bogus"},
        {"{\"limits\":{\"memory_mb\":-5}}", "limits.memory_mb"},
        {"{\"limits\":{\"cpus\":0}}", "limits.cpus"},
        {"{\"tier\":\"spaceship\"}", "tier"},
        {"{\"network\":{\"mode\":\"maybe\"}}", "network.mode"},
        {"{\"mounts\":[{\"source\":\"/a\",\"target\":\"../etc\"}]}", "mounts[0]"},
        {"{\"mounts\":[{\"source\":\"/a\"}]}", "mounts[0]"},
        {"{\"env\":{\"A=B\":\"x\"}}", "env"},
        {"{\"image\":3}", "image"},
        {"{\"disk\":\"floppy\"}", "disk"},
        {"{\"disk\":1024}", "disk"},
        {"{\"disk\":\"Memory\"}", "disk"},
        {"[1,2]", ""},
        {"{\"tier\":\"container\",\"tier\":\"vm\"}", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cdn_spec s;
        struct cdn_error err;
        int r = from_json(&s, cases[i].json, &err);
        CHECK(r < 0);
        CHECK_STREQ(err.field, cases[i].field);
        CHECK(err.msg[0] != 0);
        cdn_spec_free(&s);
    }
}

TEST(validate_ranges_and_unsupported)
{
    static const struct {
        const char *json, *field;
    } cases[] = {
        {"{\"limits\":{\"memory_mb\":4}}", "limits.memory_mb"},
        {"{\"limits\":{\"pids\":1}}", "limits.pids"},
        {"{\"limits\":{\"disk_mb\":0}}", "limits.disk_mb"},
        {"{\"limits\":{\"ptys\":0}}", "limits.ptys"},
        {"{\"limits\":{\"ptys\":1048577}}", "limits.ptys"},
        {"{\"tier\":\"process\",\"image\":\"/srv\"}", "image"},
        {"{\"tier\":\"process\",\"network\":{\"mode\":\"allowlist\",\"allow\":[\"a.test\"]}}", "network"},
        {"{\"tier\":\"process\",\"mounts\":[{\"source\":\"/srv\",\"target\":\"/data\"}]}", "mounts"},
        {"{\"tier\":\"process\",\"workdir\":\"/srv\"}", "workdir"},
        {"{\"network\":{\"mode\":\"none\",\"allow\":[\"a.test\"]}}", "network.allow"},
        {"{\"network\":{\"mode\":\"allowlist\",\"allow\":[\"a.test\",\"10.0.0.0/40\"]}}", "network.allow[1]"},
        {"{\"protect\":[\"/a/**/b\"]}", "protect[0]"},
        {"{\"protect\":[\"/ok/**\", \"rel\"]}", "protect[1]"},
        {"{\"protect\":[\"/a/../b\"]}", "protect[0]"},
        {"{\"workdir\":\"relative\"}", "workdir"},
        {"{\"image\":\"has space\"}", "image"},
        {"{\"image\":\"/srv/../etc\"}", "image"},
        {"{\"hostname\":\"bad host\"}", "hostname"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cdn_spec s;
        struct cdn_error err;
        CHECK_EQ_INT(from_json(&s, cases[i].json, &err), 0);
        CHECK(cdn_spec_validate(&s, &err) < 0);
        CHECK_STREQ(err.field, cases[i].field);
        cdn_spec_free(&s);
    }
}

TEST(ptys_default_and_round_trip)
{
    struct cdn_spec s, back;
    struct cdn_error err;
    CHECK_EQ_INT(from_json(&s, "{}", &err), 0);
    CHECK_EQ_INT(s.limits.ptys, 64);
    cdn_spec_free(&s);
    CHECK_EQ_INT(from_json(&s, "{\"limits\":{\"ptys\":5}}", &err), 0);
    CHECK_EQ_INT(cdn_spec_validate(&s, &err), 0);
    char *j = cdn_spec_to_json(&s);
    CHECK(j != NULL);
    CHECK_EQ_INT(from_json(&back, j ? j : "{}", &err), 0);
    CHECK_EQ_INT(back.limits.ptys, 5);
    free(j);
    cdn_spec_free(&back);
    cdn_spec_free(&s);
}

TEST(safe_paths)
{
    CHECK(cdn_path_is_safe_absolute("/a/b"));
    CHECK(cdn_path_is_safe_absolute("/a/.b/c"));
    CHECK(!cdn_path_is_safe_absolute("a/b"));
    CHECK(!cdn_path_is_safe_absolute("/a/../b"));
    CHECK(!cdn_path_is_safe_absolute("/a/./b"));
    CHECK(!cdn_path_is_safe_absolute("/.."));
    CHECK(!cdn_path_is_safe_absolute(NULL));
}

static int parse(struct cdn_run_opts *o, struct cdn_error *err, char **argv)
{
    int argc = 0;
    while (argv[argc])
        argc++;
    *o = (struct cdn_run_opts){0};
    *err = (struct cdn_error){0};
    CHECK_EQ_INT(cdn_spec_init(&o->spec), 0);
    return cdn_run_parse(argc, argv, o, err);
}

TEST(flags_map_to_spec)
{
    struct cdn_run_opts o;
    struct cdn_error err;
    char *argv[] = {"--cpus",
                    "0.5",
                    "--memory=256M",
                    "--pids",
                    "32",
                    "--disk",
                    "1500K",
                    "--timeout",
                    "2m",
                    "--bind",
                    "/srv:/data:ro",
                    "--env",
                    "A=1",
                    "--env",
                    "A=2",
                    "--workdir",
                    "/w",
                    "--json",
                    "--",
                    "echo",
                    "hi",
                    NULL};
    CHECK_EQ_INT(parse(&o, &err, argv), 0);
    CHECK(o.spec.limits.cpus == 0.5);
    CHECK_EQ_INT(o.spec.limits.memory_mb, 256);
    CHECK_EQ_INT(o.spec.limits.pids, 32);
    CHECK_EQ_INT(o.spec.limits.disk_mb, 2); /* 1500K rounds up to whole MiB */
    CHECK_EQ_INT(o.spec.limits.timeout_ms, 120000);
    CHECK_EQ_INT(o.spec.n_mounts, 1);
    CHECK(o.spec.mounts[0].readonly);
    CHECK_EQ_INT(o.spec.env.n, 1);
    CHECK_STREQ(o.spec.env.v[0], "A=2");
    CHECK(o.json);
    CHECK_STREQ(o.argv[0], "echo");
    CHECK_STREQ(o.argv[1], "hi");
    cdn_spec_free(&o.spec);
}

TEST(flags_command_without_dashdash)
{
    struct cdn_run_opts o;
    struct cdn_error err;
    char *argv[] = {"--pids", "8", "ls", "-l", NULL};
    CHECK_EQ_INT(parse(&o, &err, argv), 0);
    CHECK_STREQ(o.argv[0], "ls");
    CHECK_STREQ(o.argv[1], "-l");
    cdn_spec_free(&o.spec);
}

TEST(flags_errors)
{
    static const struct {
        const char *a, *b, *field;
    } cases[] = {
        {"--memory", "12Q", "limits.memory_mb"},
        {"--disk", "lots", "limits.disk_mb"},
        {"--cpus", "-1", "limits.cpus"},
        {"--pids", "1.5", "limits.pids"},
        {"--timeout", "soon", "limits.timeout_s"},
        {"--tier", "rocket", "tier"},
        {"--bind", "/only-source", "mounts"},
        {"--bind", "/a:/b:rx", "mounts"},
        {"--env", "NOEQUALS", "env"},
        {"--net", "sometimes", "network.mode"},
        {"--bogus", "x", ""},
        {"--on-violation", "explode", "on_violation"},
        {"--disk-kind", "floppy", "disk"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cdn_run_opts o;
        struct cdn_error err;
        char *argv[] = {(char *) cases[i].a, (char *) cases[i].b, "--", "true", NULL};
        CHECK(parse(&o, &err, argv) < 0);
        CHECK_STREQ(err.field, cases[i].field);
        CHECK(err.msg[0]);
        cdn_spec_free(&o.spec);
    }
    struct cdn_run_opts o;
    struct cdn_error err;
    char *none[] = {"--json", NULL};
    CHECK(parse(&o, &err, none) < 0); /* no command */
    cdn_spec_free(&o.spec);
    char *missing[] = {"--memory", NULL};
    CHECK(parse(&o, &err, missing) < 0);
    CHECK_STREQ(err.field, "limits.memory_mb");
    cdn_spec_free(&o.spec);
}

static const char *env_get(const struct cdn_strv *env, const char *name)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < env->n; i++)
        if (strncmp(env->v[i], name, n) == 0 && env->v[i][n] == '=')
            return env->v[i] + n + 1;
    return NULL;
}

TEST(a_verifier_step_leaves_out_what_loads_code)
{
    struct cdn_spec s;
    struct cdn_error err;
    CHECK_EQ_INT(
        from_json(&s,
                  "{\"env\": {\"PYTHONPATH\": \"/workspace/lib\", \"LD_PRELOAD\": \"/w/x.so\", "
                  "\"BASH_ENV\": \"/w/e\", \"GIT_DIR\": \"/w\", \"HOME\": \"/w\", \"MODE\": \"test\"}}",
                  &err),
        0);
    char *extra[] = {"GIT_CONFIG_GLOBAL=/etc/mine", "PYTHONPATH=/opt/x", NULL};
    struct cdn_strv env = {0};
    CHECK_EQ_INT(cdn_exec_env_for(&s, NULL, extra, true, &env), 0);
    CHECK(!env_get(&env, "LD_PRELOAD") && !env_get(&env, "BASH_ENV") && !env_get(&env, "GIT_DIR"));
    CHECK(!env_get(&env, "HOME") && !env_get(&env, "PATH")); /* init makes them */
    CHECK_STREQ(env_get(&env, "MODE"), "test");
    CHECK_STREQ(env_get(&env, "PYTHONNOUSERSITE"), "1");
    CHECK_STREQ(env_get(&env, "GIT_CONFIG_NOSYSTEM"), "1");
    CHECK_STREQ(env_get(&env, "GIT_CONFIG_KEY_0"), "core.fsmonitor");
    CHECK_STREQ(env_get(&env, "GIT_CONFIG_GLOBAL"), "/etc/mine"); /* the request's own wins */
    CHECK_STREQ(env_get(&env, "PYTHONPATH"), "/opt/x");
    cdn_strv_free(&env);
    CHECK_EQ_INT(cdn_exec_env_for(&s, NULL, NULL, false, &env), 0); /* an agent's command: the spec's */
    CHECK_STREQ(env_get(&env, "PYTHONPATH"), "/workspace/lib");
    CHECK_STREQ(env_get(&env, "HOME"), "/w");
    CHECK(!env_get(&env, "PYTHONNOUSERSITE"));
    cdn_strv_free(&env);
    cdn_spec_free(&s);
}

/* --label and the JSON "labels" accept and refuse the same labels. Seen failing before they shared
 * cdn_spec_add_label: --label took a 1,025-byte value and a 200-byte key (it only capped the whole
 * argument at 1,100 bytes), which the API refuses. */
TEST(labels_flag_and_json_agree)
{
    static char long_value[1100], long_key[300];
    memset(long_value, 'v', 1025);
    memset(long_key, 'k', 200);
    static char arg[1400], json[1500];
    const struct {
        const char *key, *value;
        bool ok;
    } cases[] = {{"job", "j1", true},
                 {"job", "", true},
                 {"", "x", false},
                 {"job", long_value, false},
                 {long_key, "x", false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct cdn_run_opts o;
        struct cdn_error err;
        (void) snprintf(arg, sizeof arg, "%s=%s", cases[i].key, cases[i].value);
        char *argv[] = {"--label", arg, "--", "true", NULL};
        int flag = parse(&o, &err, argv);
        CHECK_EQ_INT(flag == 0, cases[i].ok);
        if (!cases[i].ok)
            CHECK(strncmp(err.field, "labels", 6) == 0);
        cdn_spec_free(&o.spec);
        struct cdn_spec s;
        (void) snprintf(json, sizeof json, "{\"labels\":{\"%s\":\"%s\"}}", cases[i].key, cases[i].value);
        CHECK_EQ_INT(from_json(&s, json, &err) == 0, cases[i].ok);
        cdn_spec_free(&s);
    }
    struct cdn_run_opts o;
    struct cdn_error err;
    char *noeq[] = {"--label", "job", "--", "true", NULL};
    CHECK(parse(&o, &err, noeq) < 0);
    CHECK_STREQ(err.field, "labels");
    cdn_spec_free(&o.spec);
}

/* "user": checked for its form at validation (names are looked up later, in the sandbox), kept
 * through the JSON the daemon records, absent when not set. */
TEST(user_field)
{
    struct cdn_spec s;
    struct cdn_error err;
    CHECK_EQ_INT(from_json(&s, "{\"user\": \"app:dev\"}", &err), 0);
    CHECK_STREQ(s.user, "app:dev");
    CHECK_EQ_INT(cdn_spec_validate(&s, &err), 0);
    char *out = cdn_spec_to_json(&s);
    CHECK(out && strstr(out, "\"user\":\"app:dev\""));
    free(out);
    cdn_spec_free(&s);
    CHECK_EQ_INT(from_json(&s, "{}", &err), 0);
    CHECK(s.user == NULL);
    out = cdn_spec_to_json(&s);
    CHECK(out && !strstr(out, "\"user\""));
    free(out);
    cdn_spec_free(&s);
    const char *bad[] = {"{\"user\": \"a b\"}", "{\"user\": \"70000\"}", "{\"user\": \"\"}",
                         "{\"user\": \":x\"}", NULL};
    for (int i = 0; bad[i]; i++) {
        CHECK_EQ_INT(from_json(&s, bad[i], &err), 0);
        err = (struct cdn_error){0};
        CHECK(cdn_spec_validate(&s, &err) < 0);
        CHECK_STREQ(err.field, "user");
        cdn_spec_free(&s);
    }
    CHECK(from_json(&s, "{\"user\": 7}", &err) < 0);
    CHECK_STREQ(err.field, "user");
    cdn_spec_free(&s);
}

TEST(trajectory_ids)
{
    const char *good[] = {"a", "run-17/episode-3", "A.b_c-d", "x/y/z", "..a", "a..", NULL};
    const char *bad[] = {"",
                         "/a",
                         "a/",
                         "a//b",
                         ".",
                         "..",
                         "a/./b",
                         "a/../b",
                         "sp ace",
                         "a\\b",
                         "é",
                         "a/steps.jsonl",
                         "rolled_back.jsonl/x",
                         NULL};
    for (int i = 0; good[i]; i++)
        CHECK(cdn_trajectory_id_valid(good[i]));
    for (int i = 0; bad[i]; i++)
        CHECK(!cdn_trajectory_id_valid(bad[i]));
    char seg[66];
    memset(seg, 'x', 64);
    seg[64] = 0;
    CHECK(cdn_trajectory_id_valid(seg)); /* 64 bytes: a segment's most */
    seg[64] = 'x', seg[65] = 0;
    CHECK(!cdn_trajectory_id_valid(seg));
    char whole[CDN_TRAJECTORY_ID_MAX + 2];
    for (size_t i = 0; i < sizeof whole - 1; i++)
        whole[i] = i % 10 == 9 ? '/' : 'a';
    whole[CDN_TRAJECTORY_ID_MAX] = 0;
    whole[CDN_TRAJECTORY_ID_MAX - 1] = 'a';
    CHECK(cdn_trajectory_id_valid(whole));
    whole[CDN_TRAJECTORY_ID_MAX] = 'a', whole[CDN_TRAJECTORY_ID_MAX + 1] = 0;
    CHECK(!cdn_trajectory_id_valid(whole));
}

TEST(checkpoint_fields)
{
    CHECK(cdn_checkpoint_id_valid("ck-0123456789abcdef"));
    const char *bad_ids[] = {"",
                             "ck-",
                             "ck-0123456789abcde",
                             "ck-0123456789abcdef0",
                             "ck-0123456789ABCDEF",
                             "xx-0123456789abcdef",
                             "ck-0123456789abcdeg",
                             "ck-../../../etc/pas",
                             NULL};
    for (int i = 0; bad_ids[i]; i++)
        CHECK(!cdn_checkpoint_id_valid(bad_ids[i]));
    struct cdn_spec s;
    struct cdn_error err;
    CHECK_EQ_INT(from_json(&s, "{\"checkpoints\": true, \"checkpoint\": \"ck-0123456789abcdef\"}", &err), 0);
    CHECK(s.checkpoints);
    CHECK_STREQ(s.checkpoint, "ck-0123456789abcdef");
    CHECK_EQ_INT(cdn_spec_validate(&s, &err), 0);
    char *out = cdn_spec_to_json(&s);
    CHECK(out && strstr(out, "\"checkpoints\":true") &&
          strstr(out, "\"checkpoint\":\"ck-0123456789abcdef\""));
    free(out);
    cdn_spec_free(&s);
    /* the policy, in either spelling, and back out as "checkpoints": "every_step" */
    CHECK_EQ_INT(from_json(&s, "{\"checkpoint\": \"every_step\", \"trajectory\": \"t\"}", &err), 0);
    CHECK(s.checkpoints && s.checkpoint_every_step && !s.checkpoint);
    CHECK_EQ_INT(cdn_spec_validate(&s, &err), 0);
    out = cdn_spec_to_json(&s);
    CHECK(out && strstr(out, "\"checkpoints\":\"every_step\"") && !strstr(out, "\"checkpoint\":"));
    free(out);
    cdn_spec_free(&s);
    /* both spellings at once: which won would be the keys' order */
    CHECK(from_json(&s, "{\"checkpoint\": \"every_step\", \"checkpoints\": false}", &err) < 0);
    CHECK_STREQ(err.field, "checkpoint");
    cdn_spec_free(&s);
    CHECK(from_json(&s, "{\"checkpoints\": false, \"checkpoint\": \"every_step\"}", &err) < 0);
    cdn_spec_free(&s);
    static const struct {
        const char *json, *field;
    } bad[] = {
        {"{\"checkpoints\": 1}", "checkpoints"},
        {"{\"checkpoints\": \"often\"}", "checkpoints"},
        {"{\"checkpoints\": \"every_step\"}", "checkpoints"}, /* no trajectory */
        {"{\"checkpoint\": \"every_step\", \"trajectory\": \"t\", \"tier\": \"microvm\"}", "checkpoints"},
        {"{\"checkpoint\": 7}", "checkpoint"},
        {"{\"checkpoint\": \"ck-nothex\"}", "checkpoint"},
        {"{\"checkpoints\": true, \"tier\": \"microvm\"}", "checkpoints"},
        {"{\"checkpoints\": true, \"tier\": \"process\"}", "checkpoints"},
        {"{\"checkpoint\": \"ck-0123456789abcdef\", \"disk\": \"memory\"}", "checkpoint"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int r = from_json(&s, bad[i].json, &err);
        if (r == 0) {
            err = (struct cdn_error){0};
            r = cdn_spec_validate(&s, &err);
        }
        CHECK(r < 0);
        CHECK_STREQ(err.field, bad[i].field);
        cdn_spec_free(&s);
    }
}
