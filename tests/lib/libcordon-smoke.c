/* Drives libcordon against a running cordond ($CORDON_SOCKET); run by
 * tests/integration/test_cli_client.py, which checks what it prints. Exits
 * non-zero, naming the step, if any call fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/cordon.h"

static int die(cordon_client *c, const char *step)
{
    const struct cordon_error *e = cordon_last_error(c);
    fprintf(stderr, "%s: status %ld code %s field %s: %s\n", step, e->status, e->code, e->field, e->message);
    return 1;
}

static void on_output(int stream, const uint8_t *p, size_t len, void *arg)
{
    (void) arg;
    printf("stream %d: %.*s", stream, (int) len, (const char *) p);
}

int main(void)
{
    cordon_client *c = cordon_client_new(NULL);
    char *id = NULL;
    if (!c || cordon_create(c, "{\"limits\": {\"memory_mb\": 128}, \"labels\": {\"from\": \"c\"}}", &id) < 0)
        return die(c, "create");
    const char *argv[] = {"sh", "-c", "cat; echo to-err >&2; exit 3", NULL};
    const char *env[] = {"A=1", NULL};
    struct cordon_exec_opts o = {.env = env, .stdin_data = "in\0put\n", .stdin_len = 7};
    struct cordon_exec_result r;
    if (cordon_exec(c, id, argv, &o, &r) < 0)
        return die(c, "exec");
    printf("exit %d out %zu bytes err '%s'\n", r.exit_code, r.out_len, (char *) r.err);
    if (r.out_len != 7 || memcmp(r.out, "in\0put\n", 7) != 0)
        return fprintf(stderr, "stdin/stdout bytes differ\n"), 1;
    cordon_exec_result_free(&r);
    const char *argv2[] = {"sh", "-c", "echo one; echo two >&2", NULL};
    if (cordon_exec_stream(c, id, argv2, NULL, on_output, NULL, &r) < 0)
        return die(c, "exec_stream");
    printf("stream exit %d\n", r.exit_code);
    if (cordon_file_write(c, id, "/workspace/x.bin", "\x01\x02\x00\x03", 4) < 0)
        return die(c, "file_write");
    uint8_t *data;
    size_t len;
    if (cordon_file_read(c, id, "/workspace/x.bin", &data, &len) < 0)
        return die(c, "file_read");
    printf("read %zu bytes ok %d\n", len, len == 4 && memcmp(data, "\x01\x02\x00\x03", 4) == 0);
    free(data);
    /* A streamed download into a pipe, and one over its max_bytes. */
    int p[2];
    uint64_t got = 0;
    if (pipe(p) < 0 || cordon_file_read_fd(c, id, "/workspace/x.bin", p[1], 4, &got) < 0)
        return die(c, "file_read_fd");
    char four[8];
    printf("read_fd %llu bytes ok %d\n", (unsigned long long) got,
           read(p[0], four, sizeof four) == 4 && memcmp(four, "\x01\x02\x00\x03", 4) == 0);
    if (cordon_file_read_fd(c, id, "/workspace/x.bin", p[1], 3, &got) == 0)
        return fprintf(stderr, "a download over max_bytes succeeded\n"), 1;
    printf("over max_bytes: %ld %s %s\n", cordon_last_error(c)->status, cordon_last_error(c)->code,
           cordon_last_error(c)->field);
    close(p[0]);
    close(p[1]);
    const char *missing[] = {"/no/such/binary", NULL};
    if (cordon_exec(c, id, missing, NULL, &r) == 0)
        return fprintf(stderr, "exec of a missing binary succeeded\n"), 1;
    printf("missing: %ld %s %s\n", cordon_last_error(c)->status, cordon_last_error(c)->code,
           cordon_last_error(c)->field);
    const char *not_utf8[] = {"printf", "[%s]", "\xff",
                              NULL}; /* JSON cannot carry it: refused, never dropped */
    int r2 = cordon_exec(c, id, not_utf8, NULL, &r);
    printf("not utf-8: %d %s\n", r2, cordon_last_error(c)->field);
    if (cordon_delete(c, id) < 0)
        return die(c, "delete");
    if (cordon_delete(c, id) == 0)
        return fprintf(stderr, "second delete succeeded\n"), 1;
    printf("deleted twice: %ld %s\n", cordon_last_error(c)->status, cordon_last_error(c)->code);
    free(id);
    cordon_client_free(c);
    return 0;
}
