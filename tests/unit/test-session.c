/* The violation policy (src/supervise/policy.h) and a session's counting, kill mode and
 * decisions (src/supervise/session.h), with ops that record what the owner is told. */
#include "supervise/session.h"
#include "proto/frame.h"
#include "tap.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

TEST(answer_rule)
{
    /* A refused call: EPERM in log and deny mode, held once the sandbox is being killed. */
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_LOG, CDN_ATTEMPT_CALL, false), CDN_ANSWER_DENY);
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_DENY, CDN_ATTEMPT_CALL, false), CDN_ANSWER_DENY);
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_KILL, CDN_ATTEMPT_CALL, true), CDN_ANSWER_HOLD);
    /* A kill that did not go out: refused all the same. */
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_KILL, CDN_ATTEMPT_CALL, false), CDN_ANSWER_DENY);
    /* A reported write: the kernel's answer in log mode, EPERM in deny mode. */
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_LOG, CDN_ATTEMPT_WRITE, false), CDN_ANSWER_CONTINUE);
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_DENY, CDN_ATTEMPT_WRITE, false), CDN_ANSWER_DENY);
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_KILL, CDN_ATTEMPT_WRITE, true), CDN_ANSWER_HOLD);
    /* An open is refused in every mode, and held once the sandbox is being killed. */
    for (int m = 0; m < _CDN_VIOLATION_MAX; m++)
        CHECK_EQ_INT(cdn_violation_answer(m, CDN_ATTEMPT_OPEN, false), CDN_ANSWER_DENY);
    CHECK_EQ_INT(cdn_violation_answer(CDN_VIOLATION_KILL, CDN_ATTEMPT_OPEN, true), CDN_ANSWER_HOLD);
    CHECK_STREQ(cdn_vk_name(CDN_VK_SYSTEM_WRITE), "system_write");
    CHECK_STREQ(cdn_vk_name(_CDN_VK_MAX), "?");
}

/* What the owner saw. */
static struct {
    enum cdn_session_phase phase;
    int kills, counted, details, kill_result;
    enum cdn_vk last_kind;
    bool last_guest, wants;
    bool killed_before_counted; /* the order the owner relies on: record first, then kill */
} seen;

static enum cdn_session_phase op_phase(struct cdn_session *s)
{
    (void) s;
    return seen.phase;
}

static int op_kill(struct cdn_session *s, enum cdn_vk kind)
{
    (void) s, (void) kind;
    seen.kills++;
    if (seen.kill_result == 0)
        seen.phase = CDN_SESSION_ENDED; /* as cordond's cdn_box_stop does */
    return seen.kill_result;
}

static bool op_wants(struct cdn_session *s, enum cdn_vk kind)
{
    (void) s, (void) kind;
    return seen.wants;
}

static void op_counted(struct cdn_session *s, enum cdn_vk kind, const struct cdn_violation_detail *d)
{
    (void) s;
    seen.counted++;
    seen.details += d != NULL;
    seen.last_kind = kind;
    seen.last_guest = d && d->guest;
    seen.killed_before_counted = seen.kills > 0 && seen.counted == 1;
}

static const struct cdn_session_ops ops = {
    .phase = op_phase, .kill = op_kill, .wants_detail = op_wants, .counted = op_counted};

static void start(struct cdn_session *s, struct cdn_sandbox *sb, struct cdn_spec *spec,
                  enum cdn_on_violation m)
{
    *spec = (struct cdn_spec){.on_violation = m};
    *sb = (struct cdn_sandbox){.spec = spec, .init_pid = getppid()};
    seen = (typeof(seen)){.phase = CDN_SESSION_RUNNING};
    cdn_session_init(s, sb, &ops, NULL);
}

TEST(counts_every_kind)
{
    struct cdn_spec spec;
    struct cdn_sandbox sb;
    struct cdn_session s;
    start(&s, &sb, &spec, CDN_VIOLATION_LOG);
    for (int k = 0; k < _CDN_VK_MAX; k++)
        CHECK(cdn_session_violation(&s, k, NULL));
    CHECK(cdn_session_violation(&s, CDN_VK_EGRESS, NULL));
    CHECK_EQ_INT(s.counts[CDN_VK_EGRESS], 2);
    CHECK_EQ_INT(s.counts[CDN_VK_SYSTEM_WRITE], 1);
    CHECK_EQ_INT(seen.counted, _CDN_VK_MAX + 1);
    CHECK_EQ_INT(seen.kills, 0);
    CHECK(s.first > 0 && s.last >= s.first);
    CHECK(!s.killed);
    cdn_session_free(&s);
}

TEST(kill_mode_kills_once_while_running)
{
    struct cdn_spec spec;
    struct cdn_sandbox sb;
    struct cdn_session s;
    start(&s, &sb, &spec, CDN_VIOLATION_KILL);
    CHECK(!cdn_session_violation(&s, CDN_VK_SYSCALL, NULL)); /* hold its caller */
    CHECK(s.killed);
    CHECK_EQ_INT(seen.kills, 1);
    CHECK(!seen.killed_before_counted);
    /* Still counted once it is ending (the counts are exact), never killed twice. */
    CHECK(!cdn_session_violation(&s, CDN_VK_PROTECT, NULL));
    CHECK_EQ_INT(s.counts[CDN_VK_PROTECT], 1);
    CHECK_EQ_INT(seen.kills, 1);

    /* Not running yet (cordond: starting): counted, no kill. */
    start(&s, &sb, &spec, CDN_VIOLATION_KILL);
    seen.phase = CDN_SESSION_STARTING;
    CHECK(!cdn_session_violation(&s, CDN_VK_OOM, NULL));
    CHECK_EQ_INT(seen.kills, 0);
    CHECK_EQ_INT(s.counts[CDN_VK_OOM], 1);

    /* A verifier step runs: still the sandbox's violations, still killed. */
    start(&s, &sb, &spec, CDN_VIOLATION_KILL);
    seen.phase = CDN_SESSION_VERIFIER;
    CHECK(!cdn_session_violation(&s, CDN_VK_SYSCALL, NULL));
    CHECK_EQ_INT(seen.kills, 1);

    /* A kill that fails: not killed, the caller is answered (refused), the next one tries again. */
    start(&s, &sb, &spec, CDN_VIOLATION_KILL);
    seen.kill_result = -ESRCH;
    CHECK(cdn_session_violation(&s, CDN_VK_SYSCALL, NULL));
    CHECK(!s.killed);
    CHECK(cdn_session_violation(&s, CDN_VK_SYSCALL, NULL));
    CHECK_EQ_INT(seen.kills, 2);

    /* Deny mode never kills. */
    start(&s, &sb, &spec, CDN_VIOLATION_DENY);
    CHECK(cdn_session_violation(&s, CDN_VK_SYSCALL, NULL));
    CHECK_EQ_INT(seen.kills, 0);
}

TEST(no_phase_op_means_running_until_killed)
{
    static const struct cdn_session_ops bare = {.kill = op_kill};
    struct cdn_spec spec = {.on_violation = CDN_VIOLATION_KILL};
    struct cdn_sandbox sb = {.spec = &spec};
    struct cdn_session s;
    seen = (typeof(seen)){0};
    cdn_session_init(&s, &sb, &bare, NULL);
    CHECK_EQ_INT(cdn_session_phase(&s), CDN_SESSION_RUNNING);
    CHECK(!cdn_session_violation(&s, CDN_VK_EGRESS, NULL));
    CHECK_EQ_INT(cdn_session_phase(&s), CDN_SESSION_ENDED);
}

TEST(guest_violation_frames)
{
    struct cdn_spec spec;
    struct cdn_sandbox sb;
    struct cdn_session s;
    start(&s, &sb, &spec, CDN_VIOLATION_LOG);
    seen.wants = true;
    uint8_t buf[1024];
    struct cdn_violation_msg v = {.kind = CDN_VIOLATION_MSG_SYSCALL, .nr = 101, .pid = 7};
    int n = cdn_violation_encode(buf, sizeof buf, &v);
    CHECK(n > 0);
    CHECK_EQ_INT(cdn_session_guest_violation(&s, buf, (uint32_t) n), 0);
    CHECK_EQ_INT(s.counts[CDN_VK_SYSCALL], 1);
    CHECK(seen.last_guest);
    v = (struct cdn_violation_msg){.kind = CDN_VIOLATION_MSG_PROTECT, .pid = 7};
    n = cdn_violation_encode(buf, sizeof buf, &v);
    CHECK_EQ_INT(cdn_session_guest_violation(&s, buf, (uint32_t) n), 0);
    CHECK_EQ_INT(s.counts[CDN_VK_PROTECT], 1);
    /* A SYMLINK belongs to a file request's channel; garbage is garbage: neither counts. */
    v = (struct cdn_violation_msg){.kind = CDN_VIOLATION_MSG_SYMLINK};
    n = cdn_violation_encode(buf, sizeof buf, &v);
    CHECK_EQ_INT(cdn_session_guest_violation(&s, buf, (uint32_t) n), -EPROTO);
    CHECK_EQ_INT(cdn_session_guest_violation(&s, buf, 3), -EPROTO);
    CHECK_EQ_INT(seen.counted, 2);
}

/* The session's marks: mount 5 protected, and with kernel, mount 6 a masked kernel file. */
static bool set_marks(struct cdn_session *s, bool kernel)
{
    size_t n = kernel ? 2 : 1;
    s->marks.v = calloc(n, sizeof *s->marks.v);
    CHECK(s->marks.v != NULL);
    if (!s->marks.v)
        return false;
    s->marks.v[0] = (struct cdn_fanotify_mark){.mnt_id = 5, .kind = CDN_MARK_PROTECT};
    if (kernel)
        s->marks.v[1] = (struct cdn_fanotify_mark){.mnt_id = 6, .kind = CDN_MARK_KERNEL};
    s->marks.n = s->marks.cap = n;
    return true;
}

TEST(file_open_decision)
{
    struct cdn_spec spec;
    struct cdn_sandbox sb;
    struct cdn_session s;
    start(&s, &sb, &spec, CDN_VIOLATION_LOG);
    /* Our parent plays init, so we are a process of its "sandbox" (same pid namespace). */
    if (!set_marks(&s, true))
        return;
    CHECK(cdn_session_marked(&s, 6));
    CHECK(!cdn_session_marked(&s, 7));
    struct cdn_fanotify_event ev = {.fd = -1, .pid = getpid(), .mnt_id = 7};
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_CONTINUE); /* not marked for it */
    ev.mnt_id = 5;
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_DENY);
    CHECK_EQ_INT(s.counts[CDN_VK_PROTECT], 1);
    ev.mnt_id = 6;
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_DENY);
    CHECK_EQ_INT(s.counts[CDN_VK_KERNEL], 1);
    ev.pid = getppid(); /* init: the files API */
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_CONTINUE);
    ev.pid = getpid();
    seen.phase = CDN_SESSION_VERIFIER; /* a verifier step runs alone */
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_CONTINUE);
    seen.phase = CDN_SESSION_ENDED; /* stopped (not by a kill of ours): its processes are going */
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_CONTINUE);
    seen.phase = CDN_SESSION_STARTING;
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_CONTINUE);
    CHECK_EQ_INT(s.counts[CDN_VK_KERNEL], 1);
    CHECK_EQ_INT(seen.counted, 2);
    cdn_session_free(&s);
    CHECK_EQ_INT(s.marks.n, 0);
}

/* Kill mode: the violating open and every later open of the sandbox's processes are held, not
 * answered, so that nothing reads the file or runs on before the kill takes it. Before the hold,
 * the first was refused (its command went on: "after" printed under load) and the others let
 * through uncounted: the lines marked "held" below returned DENY and CONTINUE. */
TEST(kill_mode_holds_opens)
{
    struct cdn_spec spec;
    struct cdn_sandbox sb;
    struct cdn_session s;
    start(&s, &sb, &spec, CDN_VIOLATION_KILL);
    if (!set_marks(&s, false))
        return;
    struct cdn_fanotify_event ev = {.fd = dup(0), .pid = getpid(), .mnt_id = 5};
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_HOLD); /* held */
    CHECK(s.killed);
    CHECK_EQ_INT(seen.kills, 1);
    CHECK_EQ_INT(s.counts[CDN_VK_PROTECT], 1);
    CHECK_EQ_INT(ev.fd, -1); /* the session keeps it */
    ev.fd = dup(0);
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_HOLD); /* held: a second reader */
    CHECK_EQ_INT(s.counts[CDN_VK_PROTECT], 1);                     /* uncounted: the sandbox is going */
    ev.pid = getppid();                                            /* init (the files API) is never held */
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_CONTINUE);
    CHECK_EQ_INT(s.n_held, 2);
    CHECK_EQ_INT(seen.kills, 1);
    cdn_session_free(&s); /* closes the held fds */
    CHECK_EQ_INT(s.n_held, 0);

    /* A kill that fails: refused and answered, as in deny mode. */
    start(&s, &sb, &spec, CDN_VIOLATION_KILL);
    seen.kill_result = -ESRCH;
    if (!set_marks(&s, false))
        return;
    ev = (struct cdn_fanotify_event){.fd = -1, .pid = getpid(), .mnt_id = 5};
    CHECK_EQ_INT(cdn_session_file_open(&s, &ev), CDN_ANSWER_DENY);
    CHECK_EQ_INT(s.n_held, 0);
    cdn_session_free(&s);
}
